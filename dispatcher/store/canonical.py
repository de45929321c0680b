"""Canonical JSON, secret redaction and the event hash.

Everything stored in a JSON column goes through `normalize_json` first so that
what is hashed is exactly what the database gives back on both backends
(PostgreSQL JSONB rejects NUL characters and re-prints huge floats as exact
integers; SQLite keeps text as is). The hash of an event is then
SHA-256(prev_hash || canonical JSON of its stored fields), re-computable from
the row alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from decimal import Decimal
from typing import Any

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
    """Deterministic JSON text: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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


def event_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """SHA-256 over the previous hash and the canonical JSON of the event's fields."""
    payload = {}
    for name in HASHED_FIELDS:
        value = fields.get(name)
        if isinstance(value, datetime):
            value = timestamp_text(value)
        payload[name] = value
    digest = hashlib.sha256()
    digest.update(prev_hash.encode("ascii"))
    digest.update(b"\n")
    digest.update(canonical_json(payload).encode("utf-8"))
    return digest.hexdigest()
