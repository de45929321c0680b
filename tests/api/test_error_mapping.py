"""Backing-service failures map to a retryable 503 with one clear message, never a 500.

The errors here are the Temporal client's own exception types, raised from a
route of a bare app that carries parkgate's handlers: what a worker crash or
an overloaded server produces mid-request, without having to time one.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowQueryFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from parkgate.api.shared.errors import install_error_handlers


async def get_raising(exc: BaseException) -> httpx.Response:
    """GET a route of a bare app with parkgate's handlers that raises `exc`."""
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise exc

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get("/boom")


@pytest.mark.parametrize(
    "exc",
    [
        WorkflowUpdateRPCTimeoutOrCancelledError(),
        RPCTimeoutOrCancelledError("query timed out"),
        WorkflowQueryFailedError("worker lost mid-task"),
        RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b""),
    ],
    ids=["update-timeout", "rpc-timeout", "query-failed", "rpc-unavailable"],
)
async def test_temporal_trouble_is_a_retryable_503(exc: BaseException) -> None:
    response = await get_raising(exc)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    body = response.json()["error"]
    assert body["code"] == "temporal_unavailable"
    assert "retry" in body["message"]


async def test_anything_else_is_a_generic_500_without_details() -> None:
    response = await get_raising(KeyError("secret-internal-name"))
    assert response.status_code == 500
    assert response.json()["error"] == {
        "code": "internal_error", "message": "internal server error", "details": None
    }
