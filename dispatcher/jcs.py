"""The one canonical JSON of parkgate: RFC 8785 (JCS), and the form it replaced.

Every hash and MAC parkgate takes of a JSON value is taken of these bytes:
`input_sha256` and `input_hash` (parkgate.models), message proofs
(parkgate.approvals.proof), the event hash chain (parkgate.store.canonical)
and the audit export. JCS, so that a client in any language reproduces them:

- object keys sorted by their UTF-16 code units, no whitespace, UTF-8;
- strings escape only `"`, `\\` and the control characters (`\\n`, `\\u001f`);
- numbers as ECMAScript prints an IEEE double (`1e+21`, `0.1`, `1` for 1.0),
  through the `rfc8785` package;
- NaN and Infinity are refused (`NotCanonicalError`), as are lone surrogates,
  non-string keys and values that are not JSON.

One deliberate extension: integers beyond ±(2**53 - 1), which RFC 8785 leaves
outside its domain (I-JSON), are written as their exact decimal digits, so two
different big ids never hash alike and a stored value keeps hashing. A client
that parses such a number as a double cannot reproduce the hash: send big ids
as strings. Within ±(2**53 - 1) integers are plain RFC 8785.

`legacy_text` is the Python `json.dumps` form used before (sorted code points,
Python float spelling, NaN allowed): only for verifying hashes written by
older versions, never for new ones.

Standard library and `rfc8785` only (both pure Python): the agent client, the
workflow sandbox and a hook process import it without the server.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import rfc8785

_encode_str: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
_SAFE_INT = 2**53 - 1


class NotCanonicalError(ValueError):
    """A value has no canonical JSON: `path` says where (`$.a[2]`), `problem` what."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class _Refused(Exception):
    """Raised by the fast walk; `canonical_*` then walks again to name the place."""


def _utf16(key: Any) -> bytes:
    if not isinstance(key, str):
        raise _Refused
    return key.encode("utf-16-be", "surrogatepass")


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise _Refused
    return rfc8785.dumps(value).decode("ascii")


def _walk(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_str(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for key in sorted(value, key=_utf16):
            if not first:
                out.append(",")
            first = False
            out.append(_encode_str(key))
            out.append(":")
            _walk(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _walk(item, out)
        out.append("]")
    else:
        raise _Refused


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def problem(value: Any, path: str = "$", *, text: bool = True) -> NotCanonicalError | None:
    """The first place `value` has no canonical JSON (NaN, Infinity, a lone
    surrogate, a non-string key, a value that is not JSON), or None. `text=False`
    leaves lone surrogates to the caller (the API names them in its own words)."""
    if isinstance(value, str):
        if text and _has_surrogate(value):
            return NotCanonicalError(path, "a string holds a lone surrogate (not Unicode text)")
        return None
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        spelled = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return NotCanonicalError(
            path, f"{spelled} is not a JSON number (RFC 8259/8785); send null or a string")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return NotCanonicalError(path, f"an object key is not a string ({key!r})")
            if text and _has_surrogate(key):
                return NotCanonicalError(path, "an object key holds a lone surrogate")
            found = problem(item, f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]",
                            text=text)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = problem(item, f"{path}[{index}]", text=text)
            if found is not None:
                return found
        return None
    return NotCanonicalError(path, f"a {type(value).__name__} is not a JSON value")


def check(value: Any, path: str = "$", *, text: bool = True) -> Any:
    """`value` itself when it has a canonical JSON; NotCanonicalError naming the
    first problem otherwise (a pydantic validator: the error is a ValueError)."""
    found = problem(value, path, text=text)
    if found is not None:
        raise found
    return value


def canonical_text(value: Any) -> str:
    """The RFC 8785 text of `value` (NotCanonicalError if it has none)."""
    out: list[str] = []
    try:
        _walk(value, out)
        text = "".join(out)
        text.encode("utf-8")
    except (_Refused, UnicodeEncodeError, RecursionError):
        try:
            found = problem(value)
        except RecursionError:
            found = NotCanonicalError("$", "nested too deeply")
        raise found if found is not None else NotCanonicalError("$", "not JSON") from None
    return text


def canonical_bytes(value: Any) -> bytes:
    """The RFC 8785 bytes (UTF-8) of `value`: what hashes and MACs cover."""
    return canonical_text(value).encode("utf-8")


def sha256_hex(value: Any) -> str:
    """SHA-256 hex of the canonical bytes of `value`."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def legacy_text(value: Any, *, ascii_only: bool = False) -> str:
    """The form hashed before RFC 8785 (Python's `json.dumps`, sorted keys, no
    spaces; `ascii_only` for the first proof encoding): verify old hashes only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only,
                      default=str)


def legacy_sha256_hex(value: Any) -> str | None:
    """SHA-256 hex of `legacy_text(value)`; None when even that has no form."""
    try:
        return hashlib.sha256(legacy_text(value).encode("utf-8")).hexdigest()
    except (TypeError, ValueError, RecursionError):
        return None
