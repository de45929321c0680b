"""Property-based run of the OpenAPI document (schemathesis): no request gets a 5xx.

The app runs in uvicorn on a free port (in this event loop, over the real
worker, dev server and database); schemathesis generates valid and invalid
requests for every operation from another thread and calls it over HTTP.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server

MAX_EXAMPLES = 8
CONFORMANCE = [
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


def _run_operation(
    operation: Any, mode: GenerationMode, path_params: dict[str, str] | None,
    base: str, auth: dict[str, str], failures: list[str], statuses: list[int],
) -> None:
    """Generate MAX_EXAMPLES requests for one operation and record any 5xx."""
    is_sse = operation.path.endswith("/events") and operation.path.count("/") == 4
    query = {"follow": "false"} if is_sse and mode == GenerationMode.POSITIVE else None
    strategy = operation.as_strategy(
        generation_mode=mode, path_parameters=path_params, query=query
    )

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def check(case: schemathesis.Case) -> None:
        if is_sse and path_params is not None:
            # A real session's stream stays open unless told not to follow.
            case.query = {**(case.query or {}), "follow": "false"}
        response = case.call(base_url=base, headers=auth, timeout=75)
        statuses.append(response.status_code)
        where = (f"{operation.method.upper()} {operation.path} [{mode.value}] -> "
                 f"{response.status_code}")
        if response.status_code >= 500:
            failures.append(
                f"{where}: {response.text[:300]} "
                f"case={case.path_parameters} q={case.query} b={case.body!r:.200}"
            )
            return
        # The document is accurate: declared status, content type and body schema.
        try:
            case.validate_response(response, checks=CONFORMANCE)
        except (Exception, BaseExceptionGroup) as exc:  # a failure (group) per problem
            failures.append(f"{where}: does not match the OpenAPI document: {exc!s:.500}")

    try:
        check()
    except Unsatisfiable:
        pass  # e.g. no way to make a parameterless request invalid


def _fuzz(
    spec: dict[str, Any], base: str, auth: dict[str, str], sid: str, statuses: list[int]
) -> list[str]:
    """Run every operation in both modes, with random and with a real session id."""
    schema = schemathesis.openapi.from_dict(spec)
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        variants: list[dict[str, str] | None] = [None]
        if "{session_id}" in operation.path:
            variants.append({"session_id": sid})
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for path_params in variants:
                _run_operation(operation, mode, path_params, base, auth, failures, statuses)
    return failures


async def test_no_5xx_for_generated_requests(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await api.register("fuzz-session")
        async with httpx.AsyncClient(base_url=base) as client:
            spec = (await client.get("/openapi.json")).json()
        auth = {"Authorization": f"Bearer {api.key}"}
        statuses: list[int] = []
        failures = await asyncio.to_thread(_fuzz, spec, base, auth, sid, statuses)
        assert failures == [], "\n".join(failures[:20])
        # The run exercised the API: many requests, successes and client errors alike.
        assert len(statuses) > 150, len(statuses)
        assert any(200 <= s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
        ready = await api.http.get("/readyz")
        assert ready.status_code == 200
