"""Errors the store raises; each says what is wrong in one line."""

from __future__ import annotations

import sqlite3

from sqlalchemy import exc as sa_exc


class StoreError(Exception):
    """Base class of history-store errors."""


class SchemaError(StoreError):
    """The database schema does not match this code (see `check_schema`)."""


class SchemaNotMigratedError(SchemaError):
    """The database has no parkgate tables or is behind the code."""


class SchemaTooNewError(SchemaError):
    """The database was migrated by a newer parkgate than this one."""


class SessionConflictError(StoreError):
    """A session id is already registered with a different workspace (or, with
    `existing` None, by another project: its workspace is not disclosed)."""

    def __init__(
        self,
        session_id: str,
        existing: str | None,
        requested: str,
        *,
        existing_group: str | None = None,
        group: str | None = None,
    ) -> None:
        group_differs = existing_group is not None or group is not None
        if group_differs:
            message = (
                f"session {session_id!r} is already registered with worker group "
                f"{existing_group!r} (requested {group!r})"
            )
        elif existing is not None:
            message = (
                f"session {session_id!r} is already registered with workspace {existing!r}"
                f" (requested {requested!r})"
            )
        else:
            message = f"session id {session_id!r} is already in use; choose another"
        super().__init__(message)
        self.session_id = session_id
        self.existing_workspace = existing
        self.requested_workspace = requested
        self.existing_group = existing_group if group_differs else None


class ApprovalNotFoundError(StoreError, KeyError):
    """No approval request with this id."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no approval request {request_id!r}")
        self.request_id = request_id

    def __str__(self) -> str:
        return str(self.args[0])


class ApiKeyNameTakenError(StoreError):
    """An active API key already has this name."""


class ApiKeyNotFoundError(StoreError, KeyError):
    """No active API key with this name or id."""

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidCursorError(StoreError, ValueError):
    """A pagination cursor that this store did not produce."""


class DatabaseUnavailableError(StoreError, ConnectionError):
    """The database cannot be reached or opened (an OSError, for callers that catch those)."""


def unavailable(where: str, exc: BaseException) -> DatabaseUnavailableError:
    """One line naming the database and the driver's reason."""
    cause = getattr(exc, "orig", None) or exc
    reason = " ".join(str(cause).split()) or type(cause).__name__
    return DatabaseUnavailableError(f"cannot connect to the database {where}: {reason}")


#: SQLite errors that say the file cannot be used now, not that a statement is wrong.
_SQLITE_UNREACHABLE = ("locked", "busy", "unable to open", "disk i/o", "readonly")
#: PostgreSQL SQLSTATEs that say the server cannot take a statement now, not that
#: it is wrong: shutting down or starting up (57P01-57P03) and too many
#: connections (53300), besides every connection exception (class 08). asyncpg's
#: arrive as a plain DBAPIError (SQLAlchemy maps only a few of its classes), so
#: the class alone would count a restart's "starting up" as a wrong statement.
_PG_UNREACHABLE = frozenset({"57P01", "57P02", "57P03", "53300"})


def _sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE of a driver error, if it has one."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state if isinstance(state, str) else None


def is_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the database did not answer (down, restarting, no
    connection in time), not that a statement is wrong: callers that must
    outlast an outage retry these, and only these, without a cap."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    state = _sqlstate(exc) if isinstance(exc, sa_exc.DBAPIError) else None
    if state is not None and (state.startswith("08") or state in _PG_UNREACHABLE):
        return True
    if isinstance(exc, sa_exc.OperationalError) and isinstance(exc.orig, sqlite3.Error):
        # SQLite says "no such table" as it says "database is locked".
        return any(word in str(exc.orig).lower() for word in _SQLITE_UNREACHABLE)
    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.TimeoutError, OSError, TimeoutError))
