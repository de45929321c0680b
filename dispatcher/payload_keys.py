"""Payload keys as configured: urlsafe base64 of 32 bytes (AES-256).

Pure, so settings can check a key without importing the Temporal codec.
"""

from __future__ import annotations

import base64


def decode_key(text: str) -> bytes:
    """A 32-byte AES-256 key from urlsafe base64; ValueError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
    except ValueError as exc:
        raise ValueError("a payload key must be urlsafe base64") from exc
    if len(raw) != 32:
        raise ValueError(f"a payload key must be 32 bytes (AES-256), got {len(raw)}")
    return raw
