"""Temporal remote codec server: `/codec/encode` and `/codec/decode`.

parkgate encrypts every Temporal payload (`parkgate.durable.codec`), so the Temporal
UI and CLI show ciphertext unless pointed here. The protocol is Temporal's:
POST `{"payloads": [{"metadata": {k: base64}, "data": base64}]}` and get the
same shape back. Callers authenticate with an API key holding the auditor or admin role
(`Authorization: Bearer`, what `temporal --codec-auth` sends) or the audit
session cookie (what the
Temporal UI sends with "include cross-origin credentials"). CORS is answered
only for the `codec_cors_origin` setting (the Temporal UI's origin).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from parkgate.access import Role
from parkgate.api.errors import ApiError, error_responses
from parkgate.api.routes_audit import current_key
from parkgate.durable.codec import CodecError
from parkgate.settings import Settings

router = APIRouter(tags=["operations"])


class CodecPayload(BaseModel):
    """One Temporal payload in its JSON form (bytes as base64)."""

    metadata: dict[str, str] = Field(default_factory=dict)
    data: str = ""


class CodecPayloads(BaseModel):
    """Body and answer of the remote codec protocol."""

    payloads: list[CodecPayload] = Field(default_factory=list)


_DOC: dict[str, Any] = {
    "response_model": CodecPayloads,
    "responses": error_responses(400, 401, 413, 422),
    "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/CodecPayloads"}}}}},
}

_ALLOWED_HEADERS = "Authorization, Content-Type, X-Namespace"


def _cors(request: Request, response: Response) -> Response:
    settings: Settings = request.app.state.settings
    origin = request.headers.get("origin")
    if settings.codec_cors_origin and origin == settings.codec_cors_origin.rstrip("/"):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Credentials"] = "true"
        response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = _ALLOWED_HEADERS
        response.headers["Vary"] = "Origin"
    return response


async def _authorized(request: Request) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        repo = request.app.state.deps.repo
        record = await repo.verify_api_key(token.strip())
        # Decoded payloads are what the audit pages show: same roles.
        return record is not None and bool(
            {Role.AUDITOR.value, Role.ADMIN.value} & set(record.roles)
        )
    return await current_key(request) is not None  # an auditor's session


async def _handle(
    request: Request, op: Callable[[Sequence[Payload]], Awaitable[list[Payload]]]
) -> Response:
    if not await _authorized(request):
        raise ApiError(401, "unauthorized", "send `Authorization: Bearer <API key>`")
    try:
        body = CodecPayloads.model_validate_json(await request.body())
        payloads = [
            Payload(
                metadata={k: _b64(v) for k, v in p.metadata.items()}, data=_b64(p.data)
            )
            for p in body.payloads
        ]
    except (ValidationError, ValueError) as exc:
        message = " ".join(str(exc).split())[:300]
        raise ApiError(
            400, "invalid_payloads",
            f"expected {{\"payloads\": [...]}} with base64 values: {message}",
        ) from None
    try:
        result = await op(payloads)
    except CodecError as exc:
        raise ApiError(422, "undecodable_payload", str(exc)) from None
    out = CodecPayloads(payloads=[
        CodecPayload(
            metadata={k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
            data=base64.b64encode(p.data).decode(),
        )
        for p in result
    ])
    return _cors(request, JSONResponse(out.model_dump()))


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _codec(request: Request) -> PayloadCodec:
    codec: PayloadCodec = request.app.state.codec
    return codec


@router.options("/codec/encode", include_in_schema=False)
@router.options("/codec/decode", include_in_schema=False)
async def codec_preflight(request: Request) -> Response:
    return _cors(request, Response(status_code=204))


@router.post("/codec/decode", summary="Temporal codec server: decrypt payloads", **_DOC)
async def codec_decode(request: Request) -> Response:
    return await _handle(request, _codec(request).decode)


@router.post("/codec/encode", summary="Temporal codec server: encrypt payloads", **_DOC)
async def codec_encode(request: Request) -> Response:
    return await _handle(request, _codec(request).encode)
