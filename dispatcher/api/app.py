"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from parkgate.api.agents import mcp_endpoint, v1
from parkgate.api.operators import routes_audit, routes_codec, routes_ops
from parkgate.api.people import (
    inbox_signin,
    routes_approve,
    routes_inbox,
    routes_oidc,
    routes_remembered,
    routes_slack,
)
from parkgate.api.shared import metrics
from parkgate.api.shared.deps import ApiDeps
from parkgate.api.shared.errors import install_error_handlers
from parkgate.api.shared.limits import BodySizeLimitMiddleware
from parkgate.api.shared.ratelimit import RateLimiter
from parkgate.api.shared.service import CallService
from parkgate.api.shared.views import STATIC_DIR, make_templates
from parkgate.durable.blobs import BlobCodec, ChainCodec
from parkgate.durable.codec import EncryptionCodec, codec_for
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.runtime.logredact import install_log_redaction
from parkgate.settings import Settings

API_DESCRIPTION = """\
parkgate's agent API. Authenticate with `Authorization: Bearer <key>`
(`parkgate keys create --name NAME`). Every error is
`{"error": {"code", "message", "details"}}` with a 4xx for bad requests.
"""


def create_app(settings: Settings, deps: ApiDeps) -> FastAPI:
    """Build the app around already-connected dependencies (the caller owns their lifetime)."""
    install_log_redaction()
    app = FastAPI(
        title="parkgate",
        version="0.1.0",
        description=API_DESCRIPTION,
        openapi_tags=[
            {"name": "agent", "description": "Submit, follow, decide and cancel tool calls."},
            {"name": "audit", "description": "What happened, queried from the history store."},
            {"name": "operations", "description": "Health and metrics."},
        ],
    )
    app.state.settings = settings
    app.state.deps = deps
    app.state.secret = settings.signing_secret()
    app.state.rate_limiter = RateLimiter(
        settings.rate_limit_per_second, settings.rate_limit_burst
    )
    dispatcher = deps.dispatcher or DurableDispatcher(
        deps.temporal, settings, registry=deps.registry, approvals=deps.repo
    )
    app.state.calls = CallService(settings, deps.repo, dispatcher)
    app.state.templates = make_templates()
    app.state.static_url = "/static"
    app.state.sampler = metrics.StoreSampler(settings.open_call_report_seconds)
    metrics.register_tool_names(deps.registry.names())
    app.state.codec = _remote_codec(settings, deps)
    install_error_handlers(app)
    for resource in v1.ROUTERS:
        app.include_router(resource)
    app.include_router(routes_remembered.router)
    app.include_router(routes_ops.router)
    app.include_router(routes_approve.router)
    app.include_router(routes_audit.router)
    app.include_router(routes_inbox.router)
    app.include_router(inbox_signin.router)
    app.include_router(routes_oidc.router)
    app.include_router(routes_codec.router)
    app.include_router(routes_slack.router)
    mcp_endpoint.install(app, settings, deps, app.state.calls)
    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    return app


def _remote_codec(settings: Settings, deps: ApiDeps) -> ChainCodec:
    """What /codec/* runs: the client's encryption key, and blob references resolved
    from this store, so the Temporal UI shows large values too."""
    codec = deps.temporal.data_converter.payload_codec
    if isinstance(codec, ChainCodec):
        codec = codec.encryption
    enc = codec if isinstance(codec, EncryptionCodec) else codec_for(settings)
    # Lenient: the Temporal UI sends plaintext payloads too (markers, histories
    # from before the codec) and shows them as they are.
    enc = enc.lenient()
    return ChainCodec([BlobCodec(deps.repo, enc, settings.blob_threshold_bytes), enc])
