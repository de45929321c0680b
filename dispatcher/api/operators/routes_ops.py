"""Operations endpoints: liveness, readiness (database and Temporal), Prometheus metrics.

/metrics needs `Authorization: Bearer <metrics_token>` when that setting is set.
"""

from __future__ import annotations

import asyncio
import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from parkgate.api.shared import metrics
from parkgate.api.shared.deps import DepsDep, SettingsDep
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.schemas import HealthOut

router = APIRouter(tags=["operations"])

_CHECK_TIMEOUT = 5.0


@router.get("/healthz", response_model=HealthOut, summary="Liveness: the process answers")
async def healthz() -> HealthOut:
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "A dependency is unreachable"}},
    summary="Readiness: the database and Temporal are reachable",
)
async def readyz(deps: DepsDep) -> Response:
    checks: dict[str, str] = {}
    try:
        await asyncio.wait_for(deps.repo.ping(), _CHECK_TIMEOUT)
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    try:
        # Retried within the bound: one transient RPC error (a busy frontend)
        # must not flip readiness; False is a frontend that is up but not serving.
        serving = await asyncio.wait_for(
            deps.temporal.service_client.check_health(retry=True), _CHECK_TIMEOUT)
        checks["temporal"] = "ok" if serving else "unavailable: not serving"
    except Exception as exc:
        checks["temporal"] = f"unavailable: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    body = HealthOut(status="ok" if ok else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "Prometheus exposition format"}},
    summary="Prometheus metrics",
)
async def metrics_endpoint(request: Request, deps: DepsDep, settings: SettingsDep) -> Response:
    if settings.metrics_token:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), settings.metrics_token.encode()
        ):
            raise ApiError(401, "unauthorized", "send `Authorization: Bearer <metrics_token>`")
    sampler: metrics.StoreSampler = request.app.state.sampler
    try:
        await asyncio.wait_for(sampler.refresh(deps.repo), _CHECK_TIMEOUT)
    except Exception:  # stale store numbers beat no metrics at all
        metrics.log_refresh_failure()
    body, content_type = metrics.render()
    return Response(body, media_type=content_type)
