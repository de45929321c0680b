"""One error shape for every HTTP failure: `{"error": {"code", "message", "details"}}`.

Bad input is always a 4xx with a specific code; an unexpected exception is a
500 with a generic message (never a traceback), and is logged server-side.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowQueryFailedError
from temporalio.service import RPCError

log = logging.getLogger("parkgate.api")


class ErrorDetail(BaseModel):
    """The body of every error response."""

    code: str = Field(description="Stable machine-readable code, e.g. `not_found`.")
    message: str = Field(description="One human-readable sentence.")
    details: Any = Field(default=None, description="Extra data (validation errors, winner...).")


class ErrorResponse(BaseModel):
    """`{"error": {...}}`."""

    error: ErrorDetail


class ApiError(Exception):
    """Raise anywhere in a handler to answer with the error shape."""

    def __init__(
        self, status: int, code: str, message: str, details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


def not_found(what: str, details: Any = None) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found", details)


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _clean_validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors made JSON-safe (ctx may hold exceptions, input may be bytes)."""
    cleaned: list[dict[str, Any]] = []
    for err in errors:
        item: dict[str, Any] = {
            "loc": [str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "invalid")),
            "type": str(err.get("type", "value_error")),
        }
        cleaned.append(item)
    return cleaned


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception kind to the one error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else exc.headers
        return error_response(exc.status, exc.code, exc.message, exc.details, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = _clean_validation_errors(exc.errors())
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"]) or "request"
        return error_response(422, "invalid_request", f"{where}: {first['msg']}", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # Undecodable body (bad UTF-8, broken JSON framing): a validation error.
            return error_response(
                422, "invalid_request", "request body is not valid JSON",
                [{"loc": ["body"], "msg": "could not be parsed", "type": "json_invalid"}],
            )
        code = _STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return error_response(exc.status_code, code, message, None, dict(exc.headers or {}))

    @app.exception_handler(RPCError)
    async def _temporal(request: Request, exc: RPCError) -> Response:
        log.warning("temporal error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(
            503, "temporal_unavailable", "the workflow service did not answer; retry shortly",
            {"status": exc.status.name if exc.status is not None else None},
            {"Retry-After": "5"},
        )

    async def _no_answer(request: Request, exc: Exception) -> Response:
        # An update or query that no worker answered in time, or a query the
        # call's workflow could not answer yet (its worker died mid-task and
        # the replacement is replaying): the call is intact; retry.
        log.warning("temporal did not answer on %s %s: %s: %s", request.method,
                    request.url.path, type(exc).__name__, exc)
        return error_response(
            503, "temporal_unavailable", "no worker answered in time; retry shortly",
            None, {"Retry-After": "5"},
        )

    for no_answer in (RPCTimeoutOrCancelledError, WorkflowQueryFailedError):
        app.add_exception_handler(no_answer, _no_answer)

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> Response:
        log.warning("database error on %s %s: %s", request.method, request.url.path,
                    type(exc).__name__)
        return error_response(
            503, "database_unavailable", "the history database did not answer; retry shortly",
            None, {"Retry-After": "5"},
        )

    @app.exception_handler(OSError)
    async def _unreachable(request: Request, exc: OSError) -> Response:
        # Connection refused/reset, timeouts: a backing service (database,
        # Temporal, a file system) is unreachable; not the client's fault.
        log.warning("backing service error on %s %s: %s", request.method, request.url.path,
                    type(exc).__name__)
        return error_response(
            503, "service_unavailable", "a backing service did not answer; retry shortly",
            None, {"Retry-After": "5"},
        )

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> Response:
        # Only absurdly nested client data gets here (JSON parsing, validation).
        return error_response(422, "invalid_request", "input is nested too deeply")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")


#: Declared on routes so the OpenAPI document lists the error shape.
def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse, "description": _STATUS_CODES.get(code, "error")}
            for code in codes}
