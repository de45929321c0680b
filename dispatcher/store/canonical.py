"""Canonical JSON, secret redaction and the event hash.

Everything stored in a JSON column goes through `normalize_json` first so that
what is hashed is exactly what the database gives back on both backends
(PostgreSQL JSONB rejects NUL characters and re-prints huge floats as exact
integers; SQLite keeps text as is). The hash of an event is then
SHA-256(prev_hash || canonical JSON of its stored fields), re-computable from
the row alone. Canonical JSON is RFC 8785 (parkgate.jcs) for events written
since issue 37; events written before hashed Python's json.dumps form, and
`event_hash_matches` accepts either, so old chains and exports still verify.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from parkgate import jcs
from parkgate.store.types import as_utc

REDACTED = "[REDACTED]"
_SECRET_KEY = re.compile(r"password|passwd|secret|token|api[_-]?key|authorization", re.I)
_BIG_FLOAT = float(2**53)


def clean_text(value: str) -> str:
    """Text PostgreSQL accepts (no NUL characters)."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def normalize_json(value: Any) -> Any:
    """A JSON value that round-trips identically through JSONB and SQLite JSON."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= _BIG_FLOAT:
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, dict):
        return {clean_text(str(k)): normalize_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize_json(v) for v in value]
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    return clean_text(str(value))


def redact(value: Any) -> Any:
    """Replace the values of secret-looking keys (password, token, ...) at any depth."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _SECRET_KEY.search(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Deterministic JSON text: RFC 8785 (parkgate.jcs, the one canonical JSON)."""
    return jcs.canonical_text(value)


def timestamp_text(value: datetime) -> str:
    """The canonical text of a stored timestamp (UTC, microseconds)."""
    return as_utc(value).isoformat(timespec="microseconds")


#: The stored event columns covered by the hash (everything but seq, the
#: hashes themselves and recorded_at, which the database assigns).
HASHED_FIELDS: tuple[str, ...] = (
    "event_id",
    "chain_id",
    "chain_index",
    "type",
    "session_id",
    "turn_id",
    "tool_use_id",
    "tool_name",
    "side_effects",
    "at",
    "request_id",
    "error_class",
    "message",
    "parent_tool_use_id",
    "data",
)


def _hashed(fields: Mapping[str, Any]) -> dict[str, Any]:
    payload = {}
    for name in HASHED_FIELDS:
        value = fields.get(name)
        if isinstance(value, datetime):
            value = timestamp_text(value)
        payload[name] = value
    return payload


def _digest(prev_hash: str, text: str) -> str:
    digest = hashlib.sha256()
    digest.update(prev_hash.encode("ascii"))
    digest.update(b"\n")
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def event_hash(prev_hash: str, fields: Mapping[str, Any]) -> str:
    """SHA-256 over the previous hash and the canonical JSON of the event's fields."""
    return _digest(prev_hash, canonical_json(_hashed(fields)))


def legacy_event_hash(prev_hash: str, fields: Mapping[str, Any]) -> str | None:
    """The hash an event written before RFC 8785 got (json.dumps form); None when
    the fields have no such form."""
    try:
        return _digest(prev_hash, jcs.legacy_text(_hashed(fields)))
    except (TypeError, ValueError, RecursionError):
        return None


def event_hash_matches(stored_hash: str, prev_hash: str, fields: Mapping[str, Any]) -> bool:
    """True when `stored_hash` is the event's hash in either form: RFC 8785 (written
    since issue 37) or json.dumps (written before; each event is hashed whole in
    one form, so either form still proves its fields unchanged)."""
    try:
        if event_hash(prev_hash, fields) == stored_hash:
            return True
    except jcs.NotCanonicalError:
        pass
    return legacy_event_hash(prev_hash, fields) == stored_hash
