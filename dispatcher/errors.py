"""ToolError hierarchy: one base, one closed error class per subclass.

The dispatcher converts every ToolError into a ToolResultBlock with
is_error=True; unexpected exceptions become ToolExecutionError with a generic,
non-leaking message.
"""

from __future__ import annotations

from parkgate.models import ToolErrorClass


class ToolError(Exception):
    """Base of every failure a tool call can end in."""

    error_class: ToolErrorClass = ToolErrorClass.EXECUTION_ERROR

    def __init__(
        self,
        message: str,
        *,
        tool_use_id: str = "",
        is_user_visible: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool_use_id = tool_use_id
        self.is_user_visible = is_user_visible


class ToolNotFound(ToolError):
    error_class = ToolErrorClass.NOT_FOUND


class ToolValidationError(ToolError):
    error_class = ToolErrorClass.VALIDATION_ERROR

    def __init__(
        self,
        message: str,
        *,
        validation_errors: list[str] | None = None,
        tool_use_id: str = "",
        is_user_visible: bool = True,
    ) -> None:
        super().__init__(message, tool_use_id=tool_use_id, is_user_visible=is_user_visible)
        self.validation_errors = list(validation_errors or [])


class ToolPermissionDenied(ToolError):
    error_class = ToolErrorClass.PERMISSION_DENIED


class ToolUserDenied(ToolError):
    error_class = ToolErrorClass.USER_DENIED


class ToolTimeout(ToolError):
    error_class = ToolErrorClass.TIMEOUT


class ToolExecutionError(ToolError):
    error_class = ToolErrorClass.EXECUTION_ERROR

    def __init__(
        self,
        message: str,
        *,
        underlying: BaseException | None = None,
        tool_use_id: str = "",
        is_user_visible: bool = True,
    ) -> None:
        super().__init__(message, tool_use_id=tool_use_id, is_user_visible=is_user_visible)
        self.underlying = underlying


class ToolCancelled(ToolError):
    error_class = ToolErrorClass.CANCELLED


class ConfirmationTimeout(ToolError):
    error_class = ToolErrorClass.CONFIRMATION_TIMEOUT


class WorkspaceEscapeError(ToolPermissionDenied):
    """A path resolves outside the session's workspace root."""


class ToolRegistrationError(Exception):
    """A tool definition or factory was rejected at registration time."""


class ToolNameConflictError(ToolRegistrationError):
    """A tool with this name is already registered."""
