"""Database URLs: accept what users type, hand SQLAlchemy the async driver."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url

_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
}


def async_url(url: str | URL) -> URL:
    """`postgresql://...` -> `postgresql+asyncpg://...`, `sqlite:///` -> aiosqlite."""
    parsed = make_url(url) if isinstance(url, str) else url
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is not None:
        parsed = parsed.set(drivername=driver)
    if parsed.drivername not in ("postgresql+asyncpg", "sqlite+aiosqlite"):
        raise ValueError(
            f"unsupported database URL scheme {parsed.drivername!r}"
            " (use postgresql:// or sqlite:///path)"
        )
    return parsed


def ensure_sqlite_dir(url: URL) -> None:
    """Create the directory of a SQLite file so a first start just works."""
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def display_url(url: str | URL) -> str:
    """The URL with any password hidden, for messages."""
    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.render_as_string(hide_password=True)
