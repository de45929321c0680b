"""Health, readiness and metrics."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import httpx
from temporalio.client import Client

from parkgate.api import ApiDeps, create_app
from parkgate.registry import ToolRegistry
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, closed_port_url
from tests.fixtures.temporal import make_settings


async def test_health_ready_and_openapi(api: ApiRig) -> None:
    assert (await api.http.get("/healthz")).json() == {"status": "ok", "checks": {}}
    ready = await api.http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "temporal": "ok"}
    spec = (await api.http.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in ("/v1/sessions", "/v1/sessions/{session_id}/turns/{turn_id}/tool-calls",
                 "/v1/sessions/{session_id}/turns/{turn_id}/tool-calls:batch",
                 "/v1/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}",
                 "/v1/tool-calls", "/v1/sessions/{session_id}/events", "/readyz", "/metrics"):
        assert path in paths, path
    submit = paths["/v1/sessions/{session_id}/turns/{turn_id}/tool-calls"]["post"]
    assert {"200", "202", "401", "404", "413", "422"} <= set(submit["responses"])
    assert submit["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/CallResource")
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


async def test_readyz_reports_an_unreachable_database(
    dev_temporal: Client, tmp_path: Path
) -> None:
    repo = await Repository.connect("postgresql+asyncpg://postgres@127.0.0.1:1/nope")
    try:
        settings = make_settings(tmp_path / "data", tmp_path)
        app = create_app(settings, ApiDeps(repo=repo, temporal=dev_temporal,
                                           registry=ToolRegistry()))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as http:
            r = await http.get("/readyz")
            assert r.status_code == 503
            assert r.json()["checks"]["database"].startswith("unavailable")
            assert r.json()["checks"]["temporal"] == "ok"
            assert (await http.get("/healthz")).status_code == 200
            # Metrics still answer (store numbers just go stale).
            assert (await http.get("/metrics")).status_code == 200
            # The API says the database is down: 503 in the error shape, not a 500.
            down = await http.get("/v1/tool-calls", headers={"Authorization": "Bearer pgk_x"})
            assert down.status_code == 503
            assert down.json()["error"]["code"] in ("database_unavailable", "service_unavailable")
            assert down.headers["retry-after"] == "5"
    finally:
        await repo.close()


async def test_readyz_reports_an_unreachable_temporal_within_its_bound(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    """The Temporal check is retried (a transient error must not flip readiness)
    but bounded: a frontend that cannot be reached answers 503, never a hang."""
    gone = await Client.connect(closed_port_url().removeprefix("http://").removesuffix("/hook"),
                                lazy=True)
    settings = make_settings(tmp_path / "data", tmp_path)
    app = create_app(settings, ApiDeps(repo=sqlite_repo, temporal=gone, registry=ToolRegistry()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 timeout=30) as http:
        started = time.monotonic()
        r = await http.get("/readyz")
        assert r.status_code == 503
        checks = r.json()["checks"]
        assert checks["database"] == "ok" and checks["temporal"].startswith("unavailable: ")
        assert time.monotonic() - started < 15


async def test_metrics_count_calls_and_durations(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "m.txt").write_text("m")
    tool_call = f"toolu_{uuid.uuid4().hex[:6]}"
    await api.http.get("/metrics")  # first scrape sets the watermark
    assert (await api.submit(sid, "read_file", {"path": "m.txt"}, call_id=tool_call,
                             wait=20)).status_code == 200
    await api.submit(sid, "write_file", {"path": "n.txt", "content": "n"}, call_id="toolu_mw")
    parked = await api.wait_parked(sid, "toolu_mw")
    r = await api.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert re.search(r'^parkgate_calls\{status="parked"\} [1-9]', text, re.M)
    assert re.search(r'^parkgate_calls\{status="succeeded"\} [1-9]', text, re.M)
    assert re.search(r"^parkgate_parked_calls [1-9]", text, re.M)
    # Calls not ended past open_call_report_seconds (issue 37): the parked one
    # counts at 0 s, and nothing here is a year old.
    sampler = api.app.state.sampler
    assert sampler.open_report_seconds == api.rig.settings.open_call_report_seconds
    sampler.open_report_seconds = 0
    text = (await api.http.get("/metrics")).text
    assert re.search(r"^parkgate_calls_open_too_long [1-9]", text, re.M)
    sampler.open_report_seconds = 366 * 24 * 3600.0
    assert re.search(r"^parkgate_calls_open_too_long 0\.0$",
                     (await api.http.get("/metrics")).text, re.M)
    sampler.open_report_seconds = api.rig.settings.open_call_report_seconds
    assert re.search(
        r'^parkgate_tool_duration_seconds_count\{status="succeeded",tool="read_file"\} [1-9]',
        text, re.M)
    before = re.findall(r'^parkgate_tool_duration_seconds_count\{status="succeeded",'
                        r'tool="read_file"\} (\S+)', text, re.M)
    again = (await api.http.get("/metrics")).text  # no double counting on re-scrape
    assert re.findall(r'^parkgate_tool_duration_seconds_count\{status="succeeded",'
                      r'tool="read_file"\} (\S+)', again, re.M) == before
    await api.http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
                        json={"decision": "allow"})
    text = (await api.http.get("/metrics")).text
    assert re.search(r'^parkgate_approval_latency_seconds_count\{decision="allow",via="api"\} '
                     r"[1-9]", text, re.M)
