"""URL mapping, redaction and JSON normalization (pure functions)."""

from __future__ import annotations

import json

import pytest

from parkgate.store.canonical import REDACTED, canonical_json, normalize_json, redact
from parkgate.store.urls import async_url, display_url


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u@h:5432/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
        ("postgresql+psycopg2://u@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg"),
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite"),
    ],
)
def test_async_url(given: str, driver: str) -> None:
    assert async_url(given).drivername == driver


def test_unsupported_url_and_hidden_password() -> None:
    with pytest.raises(ValueError, match="unsupported database URL scheme 'mysql'"):
        async_url("mysql://u@h/db")
    assert "s3cret" not in display_url("postgresql://u:s3cret@h/db")


def test_redact_secret_keys_at_any_depth() -> None:
    value = {
        "path": "a",
        "Password": "p",
        "headers": {"Authorization": "Bearer x", "accept": "json"},
        "items": [{"client_secret": "s", "n": 1}, {"refresh_token": "t"}],
        "OPENAI_API_KEY": "k",
        "apikey": "k",
    }
    assert redact(value) == {
        "path": "a",
        "Password": REDACTED,
        "headers": {"Authorization": REDACTED, "accept": "json"},
        "items": [{"client_secret": REDACTED, "n": 1}, {"refresh_token": REDACTED}],
        "OPENAI_API_KEY": REDACTED,
        "apikey": REDACTED,
    }


def test_normalize_json_is_stable_through_a_round_trip() -> None:
    value = {"nul": "a\x00b", "big": 1e300, "inf": float("inf"), "f": 0.1, "t": (1, 2), 3: "k"}
    norm = normalize_json(value)
    assert norm["nul"] == "a\ufffdb" and norm["big"] == 10**300 and norm["inf"] == "inf"
    assert norm["t"] == [1, 2] and norm["3"] == "k"
    assert normalize_json(json.loads(json.dumps(norm))) == norm
    assert canonical_json(norm) == canonical_json(json.loads(canonical_json(norm)))
