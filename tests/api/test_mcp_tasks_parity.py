"""MCP tasks held to the old paths' tests: a task of another session or project
is not found (get, result, cancel, list), a key without the agent role reads
but cannot cancel, a requestState issued to one session is refused at another;
hostile JSON-RPC is an error answer, never a 5xx; every task's decision and run
is in the audit with a chain that verifies; cancels and results racing on one
task end it once. Real uvicorn socket, worker, Temporal dev server, SQLite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig
from tests.api.test_mcp_gateway import served
from tests.api.test_mcp_tasks import ACCEPT, TASKS, decide, rpc

BAD = (types.INVALID_PARAMS, types.INVALID_REQUEST, types.PARSE_ERROR, types.METHOD_NOT_FOUND)


async def parked_task(http: httpx.AsyncClient, url: str, tool_use_id: str,
                      path: str = "w.txt") -> str:
    """A 2025-11-25 task for a write that parks; its task id."""
    made = await rpc(http, url, "tools/call", {
        "name": "write_file", "arguments": {"path": path, "content": "w\n"},
        "task": {"ttl": 60000}, "_meta": {"tool_use_id": tool_use_id}})
    task = made["result"]["task"]
    assert task["status"] == "working", made
    return str(task["taskId"])


async def initialize(http: httpx.AsyncClient, url: str) -> None:
    init = await rpc(http, url, "initialize", {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}})
    assert "result" in init, init


def wire(base: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"},
                             timeout=60)


async def status_of(api: ApiRig, sid: str, tool_use_id: str) -> str:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{tool_use_id}")
    assert r.status_code in (200, 202), r.text
    return str(r.json()["status"])


async def event_types(api: ApiRig, sid: str, tool_use_id: str) -> list[str]:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{tool_use_id}/events")
    assert r.status_code == 200, r.text
    return [e["type"] for e in r.json()["events"]]


# ---------------------------------------------------------------- authority
async def test_another_sessions_or_projects_task_is_not_found_and_stays_parked(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid, other_sid = await api.register(), await api.register()
        async with wire(base, api.key) as http:
            url, other_url = f"/v1/sessions/{sid}/mcp", f"/v1/sessions/{other_sid}/mcp"
            await initialize(http, url)
            tid = await parked_task(http, url, "toolu_mine")
            # Same key, another session's endpoint: every tasks/* method says not found.
            await initialize(http, other_url)
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                answer = await rpc(http, other_url, method, {"taskId": tid})
                assert answer["error"]["code"] == types.INVALID_PARAMS, (method, answer)
                assert "not found" in answer["error"]["message"], answer
            # The other session's id spelled into this session's prefix: not found either.
            spliced = f"call/{other_sid}/toolu_mine"
            answer = await rpc(http, url, "tasks/get", {"taskId": spliced})
            assert "not found" in answer["error"]["message"], answer
            listed = await rpc(http, other_url, "tasks/list", {})
            assert listed["result"]["tasks"] == [], listed

        # A key of another project: its session paths do not exist for it.
        other, _ = await api.repo.create_api_key("elsewhere", project="other", roles=["agent"])
        async with wire(base, other) as stranger:
            for method, params in (("tasks/get", {"taskId": tid}),
                                   ("tasks/result", {"taskId": tid}),
                                   ("tasks/cancel", {"taskId": tid}),
                                   ("tasks/list", {}),
                                   ("tools/call", {"name": "write_file", "arguments": {
                                       "path": "w.txt", "content": "x"},
                                       "_meta": {"tool_use_id": "toolu_mine"}})):
                r = await stranger.post(url, headers=ACCEPT, json={
                    "jsonrpc": "2.0", "id": 1, "method": method, "params": params})
                assert r.status_code == 404, (method, r.text)
                assert "not found" in r.json()["error"]["message"]

        # A key of this project without the agent role reads, never cancels or calls.
        auditor, _ = await api.repo.create_api_key("reader", roles=["auditor"])
        async with wire(base, auditor) as reader:
            await initialize(reader, url)
            got = await rpc(reader, url, "tasks/get", {"taskId": tid})
            assert got["result"]["status"] == "working", got
            refused = await rpc(reader, url, "tasks/cancel", {"taskId": tid})
            assert "lacks the agent role" in refused["error"]["message"], refused
            called = await rpc(reader, url, "tools/call", {
                "name": "write_file", "arguments": {"path": "w.txt", "content": "x"},
                "task": {"ttl": 1000}, "_meta": {"tool_use_id": "toolu_mine"}})
            assert called["result"]["isError"] is True, called
            assert "lacks the agent role" in json.dumps(called), called
        assert await status_of(api, sid, "toolu_mine") == "parked"
        assert not (api.workspace / "w.txt").exists()
        await decide(api, sid, "toolu_mine", "allow")
        async with wire(base, api.key) as http:
            done = await rpc(http, url, "tasks/result", {"taskId": tid})
            assert done["result"]["isError"] is False, done
        assert (api.workspace / "w.txt").read_text() == "w\n"


async def test_a_request_state_of_one_session_is_refused_at_another(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid, other_sid = await api.register(), await api.register()

        async def never(context: Any, params: Any) -> types.ElicitResult:
            return types.ElicitResult(action="decline")

        async def client(session: str) -> Any:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api.key}"},
                                      timeout=30)
            transport = streamable_http_client(f"{base}/v1/sessions/{session}/mcp",
                                               http_client=http)
            return http, McpClient(transport, elicitation_callback=never)

        http, mine = await client(sid)
        async with http, mine as mcp:
            parked = await mcp.session.call_tool(
                "write_file", {"path": "p.txt", "content": "p"}, meta={"tool_use_id": "toolu_p"},
                allow_input_required=True)
            assert isinstance(parked, types.InputRequiredResult) and parked.request_state
        http, theirs = await client(other_sid)
        async with http, theirs as mcp:
            with pytest.raises(Exception) as refused:
                await mcp.session.call_tool("write_file", {"path": "p.txt", "content": "p"},
                                            request_state=parked.request_state,
                                            allow_input_required=True)
            assert "requestState was not issued" in str(refused.value)
        assert await api.repo.get_call(other_sid, "toolu_p") is None
        assert await status_of(api, sid, "toolu_p") == "parked"


# ------------------------------------------------------------ hostile input
async def test_hostile_task_requests_are_errors_never_a_5xx(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        url = f"/v1/sessions/{sid}/mcp"
        async with wire(base, api.key) as http:
            await initialize(http, url)
            tid = await parked_task(http, url, "toolu_h")
            deep: Any = "x"
            for _ in range(100):
                deep = {"a": deep}
            calls: list[tuple[str, Any]] = [
                ("tasks/get", {"taskId": 7}),
                ("tasks/get", {"taskId": None}),
                ("tasks/get", {"taskId": [tid]}),
                ("tasks/get", {"taskId": {"id": tid}}),
                ("tasks/get", {"taskId": tid + "\u200b"}),
                ("tasks/get", {"taskId": tid.replace("toolu_h", "toolu_\u04bb")}),
                ("tasks/get", {"taskId": tid + "\x00"}),
                ("tasks/get", {"taskId": "call/" + "a" * 100_000}),
                ("tasks/result", {"taskId": f"call/{sid}/" + "b" * 201}),
                ("tasks/cancel", {"taskId": f"call/{sid}/%2e%2e"}),
                ("tasks/get", []),
                ("tasks/get", "call"),
                ("tasks/list", {"cursor": 5}),
                ("tasks/list", {"cursor": "\ud800"}),
                ("tools/call", {"name": "write_file", "arguments": {}, "task": {"ttl": 1.5e300}}),
                ("tools/call", {"name": "write_file", "arguments": {}, "task": {"ttl": True}}),
                ("tools/call", {"name": "write_file", "arguments": {}, "task": []}),
                ("tools/call", {"name": "write_file", "arguments": deep, "task": {"ttl": 1}}),
                ("tools/call", {"name": "write_file", "arguments": [1], "task": {"ttl": 1}}),
                ("tools/call", {"name": 5, "arguments": {}, "task": {"ttl": 1}}),
                ("tools/call", {"name": "w" * 50_000, "arguments": {}, "task": {"ttl": 1}}),
                ("tools/call", {"name": "write_file",
                                "arguments": {"path": "x", "content": "\ud800"},
                                "task": {"ttl": 1}, "_meta": {"tool_use_id": "toolu_sur"}}),
                ("tools/call", {"name": "write_file", "arguments": {"path": "x", "content": "y"},
                                "task": {"ttl": 1}, "_meta": {"tool_use_id": "../x"}}),
            ]
            for method, params in calls:
                body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                   "params": params})
                r = await http.post(url, content=body.encode(), headers={
                    **ACCEPT, "Content-Type": "application/json"})
                assert r.status_code < 500, (method, str(params)[:200], r.status_code, r.text)
                text = r.text
                assert len(text) < 20_000, (method, "the answer echoes the input", len(text))
                answer = _answer(r)
                if "error" in answer:
                    assert answer["error"]["code"] in BAD, (method, answer)
                    assert answer["error"]["message"], answer
                else:  # a tool error result, never a started call
                    assert answer["result"].get("isError") is True, (method, answer)
            raws: list[bytes] = [
                b"{not json",
                b"",
                b"[]",
                b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": NaN}}',
                (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
                 b'"write_file", "arguments": {"path": "n.txt", "content": NaN}, "task": '
                 b'{"ttl": 1}, "_meta": {"tool_use_id": "toolu_nan"}}}'),
                ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
                 '"write_file", "arguments": {"x": ' + "[" * 50_000 + "]" * 50_000
                 + '}, "task": {"ttl": 1}}}').encode(),
                b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "'
                + b"a" * (api.rig.settings.max_request_bytes + 1) + b'"}}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "\xff"}}',
            ]
            for raw in raws:
                r = await http.post(url, content=raw, headers={
                    **ACCEPT, "Content-Type": "application/json"})
                assert r.status_code < 500, (raw[:120], r.status_code, r.text[:500])
                if r.status_code == 200:
                    answer = _answer(r)
                    assert "error" in answer or answer["result"].get("isError"), answer
            assert await status_of(api, sid, "toolu_h") == "parked"
            # What started (a write_file with no arguments) ended failing its schema;
            # nothing else started: not the deep, NaN or surrogate input, not a bad id.
            listed = await rpc(http, url, "tasks/list", {})
            others = [t for t in listed["result"]["tasks"] if t["taskId"] != tid]
            assert len(listed["result"]["tasks"]) - len(others) == 1, listed
            for task in others:
                row = await api.repo.get_call(sid, task["taskId"].rsplit("/", 1)[1])
                assert row is not None and row.input == {} and row.rule == "schema", row


def _answer(r: httpx.Response) -> dict[str, Any]:
    body = r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        body = [ln[5:] for ln in body.splitlines() if ln.startswith("data:")][-1]
    out: dict[str, Any] = json.loads(body)
    return out


# ------------------------------------------------------- audit, concurrency
async def test_tasks_decided_run_and_cancelled_are_audited_and_end_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Ten tasks/cancel at once on one task: it ends cancelled once. Five
    tasks/result waiting on another while it is approved: one run, five same
    answers. A third denied. The audit API shows all three; the chain verifies."""
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        url = f"/v1/sessions/{sid}/mcp"
        async with wire(base, api.key) as http:
            await initialize(http, url)
            gone = await parked_task(http, url, "toolu_gone", "gone.txt")
            ran = await parked_task(http, url, "toolu_ran", "ran.txt")
            nope = await parked_task(http, url, "toolu_nope", "nope.txt")
            await api.wait_parked(sid, "toolu_gone")
            cancels = await asyncio.gather(*(
                rpc(http, url, "tasks/cancel", {"taskId": gone}, rid=i) for i in range(10)))
            for answer in cancels:  # cancelled, or (late) already ended: never two ends
                assert answer.get("result", {}).get("status") == "cancelled" or (
                    "already ended" in answer["error"]["message"]), answer
            results = asyncio.gather(*(
                rpc(http, url, "tasks/result", {"taskId": ran}, rid=100 + i) for i in range(5)))
            await decide(api, sid, "toolu_ran", "allow")
            answers = await results
            assert all(a["result"]["isError"] is False for a in answers), answers
            assert len({json.dumps(a["result"]["content"]) for a in answers}) == 1
            await decide(api, sid, "toolu_nope", "deny", "not this one")
            failed = await rpc(http, url, "tasks/result", {"taskId": nope}, rid=200)
            assert failed["result"]["isError"] is True
            assert "not this one" in json.dumps(failed["result"]), failed
        assert (api.workspace / "ran.txt").read_text() == "w\n"
        assert not (api.workspace / "gone.txt").exists()
        assert not (api.workspace / "nope.txt").exists()

        audit = await api.http.get("/v1/tool-calls", params={"session_id": sid})
        assert audit.status_code == 200, audit.text
        rows = {c["tool_use_id"]: c["status"] for c in audit.json()["items"]}
        assert rows == {"toolu_gone": "cancelled", "toolu_ran": "succeeded",
                        "toolu_nope": "denied"}, rows
        for cid in ("toolu_gone", "toolu_ran", "toolu_nope"):
            types_ = await event_types(api, sid, cid)
            assert types_.count("tool.confirmation_requested") == 1, (cid, types_)
            ends = [t for t in types_ if t in ("tool.completed", "tool.failed")]
            assert len(ends) == 1, (cid, types_)
        ran_types = await event_types(api, sid, "toolu_ran")
        assert ran_types.count("tool.confirmation_resolved") == 1 and ran_types[-1] == \
            "tool.completed", ran_types
        report = await api.repo.verify_chain(sid)
        assert report.ok and report.problems == [], report


async def test_nul_bytes_on_postgres_are_an_answer_never_a_5xx(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    """PostgreSQL refuses NUL in text and JSON, SQLite does not: a task whose
    arguments, tool name or ids carry one is still answered (a task or an
    error), and the session's tasks stay listable."""
    async with served(dev_temporal, pg_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        url = f"/v1/sessions/{sid}/mcp"
        async with wire(base, api.key) as http:
            await initialize(http, url)
            for i, params in enumerate((
                    {"name": "write_file", "arguments": {"path": "n.txt", "content": "a\x00b"},
                     "task": {"ttl": 1000}, "_meta": {"tool_use_id": "toolu_nul1"}},
                    {"name": "write_file", "arguments": {"path": "n\x00.txt", "content": "a"},
                     "task": {"ttl": 1000}, "_meta": {"tool_use_id": "toolu_nul2"}},
                    {"name": "write_file", "arguments": {"k\x00": "v"},
                     "task": {"ttl": 1000}, "_meta": {"tool_use_id": "toolu_nul3"}},
                    {"name": "write\x00file", "arguments": {}, "task": {"ttl": 1000}},
                    {"name": "write_file", "arguments": {}, "task": {"ttl": 1000},
                     "_meta": {"tool_use_id": "toolu\x00", "turn_id": "t\x00"}})):
                r = await http.post(url, headers=ACCEPT, json={
                    "jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})
                assert r.status_code < 500, (params, r.status_code, r.text[:300])
                answer = _answer(r)
                assert "error" in answer or "task" in answer["result"] or \
                    answer["result"].get("isError"), answer
            got = await rpc(http, url, "tasks/get", {"taskId": f"call/{sid}/toolu\x00"})
            assert "not found" in got["error"]["message"], got
            listed = await rpc(http, url, "tasks/list", {})
            assert "result" in listed, listed
