"""History store: SQLAlchemy models, the async Repository, migrations helpers.

Import `Repository` from here; activities depend only on the `HistoryStore`
protocol in `records.py`, which Repository implements.
"""

from typing import TYPE_CHECKING, Any

from parkgate.calls.records import ApprovalRecord, CallStatus, CallUpdate, HistoryStore
from parkgate.store.errors import (
    ApiKeyNameTakenError,
    ApiKeyNotFoundError,
    ApprovalNotFoundError,
    DatabaseUnavailableError,
    InvalidCursorError,
    SchemaError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    SessionConflictError,
    StoreError,
)
from parkgate.store.results import (
    ApiKeyRecord,
    CallFilters,
    CallRecord,
    ChainProblem,
    EventRecord,
    Page,
    SessionRecord,
    TimelineEntry,
    VerifyReport,
)

if TYPE_CHECKING:
    from parkgate.store.repository import Repository


def __getattr__(name: str) -> Any:
    """Load Repository (and with it SQLAlchemy) only when asked for.

    Workflows import `parkgate.calls.records`; keeping this package's import
    free of SQLAlchemy keeps the workflow sandbox free of I/O libraries.
    """
    if name == "Repository":
        from parkgate.store.repository import Repository

        return Repository
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiKeyNameTakenError",
    "ApiKeyNotFoundError",
    "ApiKeyRecord",
    "ApprovalNotFoundError",
    "ApprovalRecord",
    "CallFilters",
    "CallRecord",
    "CallStatus",
    "CallUpdate",
    "ChainProblem",
    "DatabaseUnavailableError",
    "EventRecord",
    "HistoryStore",
    "InvalidCursorError",
    "Page",
    "Repository",
    "SchemaError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "SessionConflictError",
    "SessionRecord",
    "StoreError",
    "TimelineEntry",
    "VerifyReport",
]
