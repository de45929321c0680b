"""Temporal remote codec server: `/codec/encode` and `/codec/decode`.

parkgate encrypts every Temporal payload (`parkgate.durable.codec`), so the Temporal
UI and CLI show ciphertext unless pointed here. The protocol is Temporal's:
POST `{"payloads": [{"metadata": {k: base64}, "data": base64}]}` and get the
same shape back.

Admin-only. The payload keys are the deployment's, not a project's, and a
payload names no project: a decode that tried to answer only "the caller's
project's payloads" would have to trust the decrypted bytes to say whose they
are (a blob, a decision, an activity result say nothing of the sort). So the
codec is what it is, a decryption oracle for every project, and only keys with
the admin role reach it (`Authorization: Bearer`, what `temporal --codec-auth`
sends, or the audit session cookie of an admin key, what the Temporal UI sends
with "include cross-origin credentials"). Encode is admin-only too: it seals
payloads a Temporal client could then send. Missing or invalid credentials are
401; a valid key without the admin role is 403. CORS is answered only for the
`codec_cors_origin` setting (the Temporal UI's origin).
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

from parkgate.api.operators.routes_audit import current_key
from parkgate.api.shared.errors import ApiError, error_responses
from parkgate.approvals.access import Role
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
    "responses": error_responses(400, 401, 403, 413, 422),
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


def _need_admin(name: str, roles: list[str]) -> None:
    """403 for a valid key without the admin role."""
    if Role.ADMIN.value not in roles:
        raise ApiError(
            403, "forbidden",
            f"API key {name!r} lacks the admin role: the codec decrypts every "
            "project's payloads, so it is for admins only",
            {"required_roles": [Role.ADMIN.value], "roles": roles},
        )


async def _check_access(request: Request) -> None:
    """An admin key (bearer or audit session), else 401 (no valid key) or 403."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        repo = request.app.state.deps.repo
        record = await repo.verify_api_key(token.strip())
        if record is None:
            raise ApiError(401, "unauthorized", "invalid or revoked API key")
        _need_admin(record.name, list(record.roles))
        return
    key = await current_key(request)  # the audit session's key (auditor role)
    if key is None:
        raise ApiError(401, "unauthorized", "send `Authorization: Bearer <API key>` of an "
                       "admin key, or sign in at /audit with one")
    _need_admin(key.name, list(key.roles))


async def _handle(
    request: Request, op: Callable[[Sequence[Payload]], Awaitable[list[Payload]]]
) -> Response:
    await _check_access(request)
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
