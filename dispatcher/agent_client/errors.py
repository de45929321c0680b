"""Typed errors for the client: every non-2xx answer becomes one of these."""

from __future__ import annotations

from typing import Any

import httpx

from parkgate.calls.wire import CallResource
from parkgate.models import ToolResultBlock


class ParkgateError(Exception):
    """The server answered with its error shape (`{"error": {code, message, details}}`)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


class UnauthorizedError(ParkgateError):
    """401: missing, invalid or revoked API key."""


class ForbiddenError(ParkgateError):
    """403: the key lacks the role (e.g. an agent key deciding its own call)."""


class NotFoundError(ParkgateError):
    """404: no such session or call in this key's project."""


class ConflictError(ParkgateError):
    """409: someone decided first (`winner`), the call is no longer waiting, or a
    session id is registered with another workspace."""

    @property
    def winner(self) -> dict[str, Any] | None:
        """The decision that won, when the server names it."""
        if isinstance(self.details, dict):
            winner = self.details.get("winner")
            return winner if isinstance(winner, dict) else None
        return None


class UnavailableError(ParkgateError):
    """503 (or 429) still answered after every retry."""


class InvalidInputError(ValueError):
    """A tool input with no canonical JSON (NaN, Infinity, a lone surrogate),
    refused before it is sent: JSON has no NaN, its `input_sha256` cannot be
    computed, and the server would answer 422. `path` says where (`input.a[1]`)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class CallNotFinishedError(Exception):
    """`dispatch(..., timeout=...)` gave up waiting; the call keeps going server-side.

    Dispatch the same block again (same tool_use id) to attach to it.
    """

    def __init__(self, resource: CallResource) -> None:
        if resource.status.value == "released":
            message = (f"tool call {resource.tool_use_id!r} is released for its client to "
                       "run (a client tool): claim it, run it and report the outcome, as "
                       "parkgate.agent_client.gate does")
        else:
            message = (f"tool call {resource.tool_use_id!r} is still {resource.status.value}; "
                       "dispatch the same tool_use id again to attach")
        super().__init__(message)
        self.resource = resource


_BY_STATUS: dict[int, type[ParkgateError]] = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    429: UnavailableError,
    503: UnavailableError,
}


def error_from(response: httpx.Response) -> ParkgateError:
    """The typed error for a non-2xx response (works for any body)."""
    code, message, details = f"http_{response.status_code}", response.reason_phrase, None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code", code))
        message = str(err.get("message", message))
        details = err.get("details")
    cls = _BY_STATUS.get(response.status_code, ParkgateError)
    return cls(response.status_code, code, message, details)


def not_waiting(resource: CallResource) -> ConflictError:
    """Deciding a call that has no open approval request."""
    return ConflictError(
        409, "not_waiting",
        f"tool call {resource.tool_use_id!r} is not waiting for a decision "
        f"(status {resource.status.value})",
    )


def result_of(resource: CallResource) -> ToolResultBlock:
    """The finished call's result block, or CallNotFinishedError."""
    if not resource.finished or resource.result is None:
        raise CallNotFinishedError(resource)
    return resource.result


class ParkedError(CallNotFinishedError):
    """A gated call is still waiting for a human when the caller's `wait` ran out.

    For agents that do not block: `resource` carries the tool_use_id, the
    request_id, the expiry and (for a key that may decide) the approval link.
    Call the gated tool again with the same `tool_use_id` to attach: once
    approved it runs then, once.
    """

    def __init__(self, resource: CallResource) -> None:
        super().__init__(resource)
        self.args = (
            f"tool call {resource.tool_use_id!r} is {resource.status.value}, waiting for a "
            f"decision (request {resource.request_id}); call again with the same "
            "tool_use_id to attach",)

    @property
    def tool_use_id(self) -> str:
        return self.resource.tool_use_id

    @property
    def request_id(self) -> str | None:
        return self.resource.request_id

    @property
    def approval_url(self) -> str | None:
        return self.resource.approval_url


class OutcomeNotRecordedError(Exception):
    """The function ran here but its outcome could not be reported (parkgate
    unreachable until after the lease and the late-report window). `result` is
    what the function produced; parkgate shows the call as outcome_unknown."""

    def __init__(self, result: ToolResultBlock, cause: BaseException) -> None:
        super().__init__(f"tool call {result.tool_use_id!r} ran but its outcome was not "
                         f"recorded: {cause}")
        self.result = result
