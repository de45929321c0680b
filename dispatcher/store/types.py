"""Column types that behave the same on PostgreSQL and SQLite.

- `UTCDateTime`: timezone-aware UTC in and out. PostgreSQL stores timestamptz;
  SQLite has no time zones, so values are stored as naive UTC and re-tagged on
  the way out. Naive datetimes handed in are taken to be UTC.
- `JSONColumn`: JSONB on PostgreSQL (indexable, compact), JSON elsewhere.
- `BigIntId`: a 64-bit autoincrement key on PostgreSQL; INTEGER on SQLite (only
  `INTEGER PRIMARY KEY` is a rowid alias there).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer, String, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

JSONColumn = JSON().with_variant(JSONB(), "postgresql")
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


def as_utc(value: datetime) -> datetime:
    """The same instant as an aware UTC datetime (naive input is taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        value = as_utc(value)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # defensive: raw SQLite text
            value = datetime.fromisoformat(value)
        return as_utc(value)


class CleanString(TypeDecorator[str]):
    """VARCHAR(n) that stores what PostgreSQL accepts: NUL replaced, clipped to n.

    Applied to bound values everywhere (inserts and WHERE clauses alike), so a
    lookup by a hostile id finds what a write with the same id stored, and
    neither backend raises on it.
    """

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if not isinstance(value, str):
            return value
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        length = getattr(self.impl_instance, "length", None)
        if length is not None and len(value) > length:
            value = value[:length]
        return value


class CleanText(TypeDecorator[str]):
    """TEXT without NUL characters (PostgreSQL rejects them)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, str) and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value
