"""Workspace-affine routing (worker groups) on the dev server.

Each "host" is a worker serving one group with its own workspace root; the
main worker (workflows, store writes) serves no group. Which worker ran what
is read back from Temporal history: every ActivityTaskStarted event carries
the identity of the worker that picked the task up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parkgate.activities.deps import Deps
from parkgate.durable.payloads import WORKER_LOST_TEXT, call_workflow_id
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.worker import serving
from parkgate.settings import Settings
from parkgate.workspaces.worker_groups import WORKSPACE_ACTIVITIES
from tests.api.rig import ApiRig, api_rig
from tests.fixtures.temporal import (
    AUTO_ALL,
    PROMPT_WRITES,
    WorkerProcess,
    activity_workers,
    dev_client,
    make_pipeline,
)
from tests.workflows.test_restarts import kill_leftovers

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]


@contextlib.asynccontextmanager
async def host(rig: ApiRig, group: str) -> AsyncIterator[None]:
    """A worker that serves only `group` (it has that group's workspace)."""
    settings = rig.rig.settings.model_copy(
        update={"serve_main_queue": False, "serve_groups": [group]}
    )
    deps = Deps(settings=settings, pipeline=make_pipeline(settings), store=rig.repo)
    async with serving(rig.rig.client, settings, deps, identity=f"host-{group}"):
        yield


@contextlib.asynccontextmanager
async def grouped_api(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path, groups: list[str],
    policy: dict[str, Any] = AUTO_ALL,
) -> AsyncIterator[tuple[ApiRig, dict[str, Path]]]:
    roots = {g: tmp_path / f"host-{g}" for g in groups}
    for root in roots.values():
        root.mkdir()
    client = await dev_client(dev_server)
    async with api_rig(
        client, sqlite_repo, tmp_path, policy=policy,
        worker_groups={g: [root] for g, root in roots.items()},
    ) as rig:
        yield rig, roots


async def register(rig: ApiRig, sid: str, workspace: Path, group: str | None = None) -> Any:
    body: dict[str, Any] = {"session_id": sid, "workspace_path": str(workspace)}
    if group is not None:
        body["worker_group"] = group
    return await rig.http.post("/v1/sessions", json=body)


async def test_each_sessions_calls_run_only_on_its_groups_worker(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with grouped_api(dev_server, sqlite_repo, tmp_path, ["a", "b"]) as (rig, roots):
        for g in ("a", "b"):
            ws = roots[g] / "agent"
            ws.mkdir()
            (ws / "who.txt").write_text(f"workspace {g}\n")
            r = await register(rig, f"s-{g}", ws)
            assert r.status_code == 201, r.text
            assert r.json()["worker_group"] == g  # derived from the group's root
        async with host(rig, "a"), host(rig, "b"):
            for g in ("a", "b"):
                read = await rig.submit(f"s-{g}", "read_file", {"path": "who.txt"},
                                        call_id=f"tu-read-{g}", wait=30)
                assert read.json()["status"] == "succeeded", read.text
                assert f"workspace {g}" in str(read.json()["result"])
                write = await rig.submit(f"s-{g}", "write_file",
                                         {"path": "out.txt", "content": g},
                                         call_id=f"tu-write-{g}", wait=30)
                assert write.json()["status"] == "succeeded", write.text
            for g in ("a", "b"):
                assert (roots[g] / "agent" / "out.txt").read_text() == g
                for tid in (f"tu-read-{g}", f"tu-write-{g}"):
                    ran = await activity_workers(rig.rig.client, call_workflow_id(f"s-{g}", tid))
                    workspace_work = {k: v for k, v in ran.items() if k in WORKSPACE_ACTIVITIES}
                    assert "parkgate.classify" in workspace_work, ran
                    assert all(ids == {f"host-{g}"} for ids in workspace_work.values()), ran
                    # store writes may run on any main-queue worker, never on a host
                    others = set().union(*(v for k, v in ran.items() if k not in workspace_work))
                    assert not any(i.startswith("host-") for i in others), ran
            write_ran = await activity_workers(rig.rig.client,
                                               call_workflow_id("s-a", "tu-write-a"))
            assert write_ran["parkgate.execute"] == {"host-a"}


async def test_call_waits_for_its_group_and_says_so_then_runs(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with grouped_api(dev_server, sqlite_repo, tmp_path, ["a", "c"]) as (rig, _roots):
        # Explicit group on registration; the workspace is under workspace_roots.
        (rig.workspace / "note.txt").write_text("from c\n")
        r = await register(rig, "s-c", rig.workspace, group="c")
        assert r.status_code == 201, r.text
        assert r.json()["worker_group"] == "c"
        async with host(rig, "a"):  # a live worker, but of another group
            sub = await rig.submit("s-c", "read_file", {"path": "note.txt"}, call_id="tu-c")
            assert sub.status_code == 202, sub.text
            body: dict[str, Any] = {}
            for _ in range(100):
                body = (await rig.http.get("/v1/sessions/s-c/tool-calls/tu-c")).json()
                if body.get("waiting_for"):
                    break
                await asyncio.sleep(0.1)
            assert body["waiting_for"] == "worker group c", body
            assert body["status"] == "queued" and not body["finished"]
            await asyncio.sleep(1.0)  # still waiting: never picked up elsewhere
            again = (await rig.http.get("/v1/sessions/s-c/tool-calls/tu-c")).json()
            assert again["waiting_for"] == "worker group c" and not again["finished"]
            # A waiting call can still be cancelled, and it never ran.
            await rig.submit("s-c", "write_file", {"path": "never.txt", "content": "x"},
                             call_id="tu-cancel")
            cancel = await rig.http.post("/v1/sessions/s-c/tool-calls/tu-cancel/cancel")
            assert cancel.status_code in (200, 202), cancel.text
            gone = (await rig.http.get("/v1/sessions/s-c/tool-calls/tu-cancel",
                                       params={"wait": 20})).json()
            assert gone["status"] == "cancelled" and gone["finished"], gone
            assert not (rig.workspace / "never.txt").exists()
        async with host(rig, "c"):
            done = await rig.http.get("/v1/sessions/s-c/tool-calls/tu-c", params={"wait": 30})
            out = done.json()
            assert out["status"] == "succeeded", out
            assert "waiting_for" not in out or out["waiting_for"] is None
            assert "from c" in str(out["result"])
        ran = await activity_workers(rig.rig.client, call_workflow_id("s-c", "tu-c"))
        assert ran["parkgate.classify"] == {"host-c"}, ran


async def test_call_approved_while_its_group_is_down_says_it_waits(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The decision's store write goes with the execute, on the group's queue:
    until a worker of the group is back, the resource must not keep showing
    the call as awaiting a decision (the store's view), but as waiting."""
    async with grouped_api(dev_server, sqlite_repo, tmp_path, ["a"],
                           policy=PROMPT_WRITES) as (rig, roots):
        ws = roots["a"] / "agent"
        ws.mkdir()
        assert (await register(rig, "s-a", ws)).status_code == 201
        async with host(rig, "a"):
            sub = await rig.submit("s-a", "write_file", {"path": "out.txt", "content": "a"},
                                   call_id="tu-w")
            assert sub.status_code == 202, sub.text
            parked = await rig.wait_parked("s-a", "tu-w")
        # Host a is gone; the human approves.
        r = await rig.http.post(f"/v1/sessions/s-a/turns/t1/confirmations/{parked['request_id']}",
                                json={"decision": "allow"})
        assert r.status_code == 200, r.text
        body = await wait_for(rig, "s-a", "tu-w",
                              lambda b: b.get("waiting_for") == "worker group a", timeout=20)
        assert body["status"] != "parked" and not body["finished"], body
        assert not (ws / "out.txt").exists()
        async with host(rig, "a"):
            done = (await rig.http.get("/v1/sessions/s-a/tool-calls/tu-w",
                                       params={"wait": 30})).json()
        assert done["status"] == "succeeded", done
        assert (ws / "out.txt").read_text() == "a"


async def test_registration_validates_the_group(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with grouped_api(dev_server, sqlite_repo, tmp_path, ["a"]) as (rig, roots):
        r = await register(rig, "s-x", rig.workspace, group="nope")
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "unknown_worker_group"
        # The API need not have a grouped workspace: checked lexically only.
        remote = roots["a"] / "only-on-host-a"
        r = await register(rig, "s-remote", remote)
        assert r.status_code == 201, r.text
        assert r.json()["worker_group"] == "a"
        outside = await register(rig, "s-out", tmp_path / "elsewhere", group="a")
        assert outside.status_code == 422, outside.text
        # Same session, another explicit group: a conflict, not a silent move.
        r = await register(rig, "s-remote", remote, group="a")
        assert r.status_code == 200, r.text
        assert (await register(rig, "s-plain", rig.workspace)).json()["worker_group"] is None
        moved = await register(rig, "s-plain", rig.workspace, group="a")
        assert moved.status_code == 409, moved.text


def test_settings_reject_unknown_served_group(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown worker group 'b'"):
        Settings(data_dir=tmp_path, worker_groups={"a": [tmp_path]}, serve_groups=["b"])
    with pytest.raises(ValueError, match="worker group name"):
        Settings(data_dir=tmp_path, worker_groups={"a/b": [tmp_path]})
    with pytest.raises(ValueError, match="absolute"):
        Settings(data_dir=tmp_path, worker_groups={"a": ["relative/root"]})
    with pytest.raises(ValueError, match="poll nothing"):
        Settings(data_dir=tmp_path, serve_main_queue=False)


# ---------------------------------------------------------------------------
# Scale-out: hosts as real worker processes, one SIGKILLed mid-run
# ---------------------------------------------------------------------------


def pids(identities: set[str]) -> set[int]:
    return {int(i.split("@", 1)[0]) for i in identities}


async def wait_for(rig: ApiRig, sid: str, tid: str, check: Any, timeout: float = 60) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    body: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        body = (await rig.http.get(f"/v1/sessions/{sid}/tool-calls/{tid}")).json()
        if check(body):
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{sid}/{tid}: {body}")


@pytest.mark.slow
async def test_hosts_as_processes_killed_host_calls_wait_then_finish(
    dev_server: DevServer, sqlite_repo: Any, sqlite_url: str, tmp_path: Path
) -> None:
    marker = f"sleep 47{id(tmp_path) % 100:02d}"
    async with grouped_api(dev_server, sqlite_repo, tmp_path, ["a", "b"]) as (rig, roots):
        hosts: dict[str, WorkerProcess] = {}

        def start_host(group: str) -> WorkerProcess:
            settings = rig.rig.settings.model_copy(update={
                "database_url": sqlite_url,
                "temporal_address": dev_server.address,
                "serve_main_queue": False,
                "serve_groups": [group],
                "workspace_roots": [roots[group]],
                "execute_heartbeat_timeout_seconds": 3.0,
            })
            proc = WorkerProcess(settings, tmp_path / f"host-{group}-{len(hosts)}.log").start()
            hosts[group] = proc
            return proc

        try:
            for g in ("a", "b"):
                (roots[g] / "ws").mkdir()
                assert (await register(rig, f"s-{g}", roots[g] / "ws")).status_code == 201
                start_host(g)
            long = await rig.submit("s-a", "shell", {"command": f"echo run >> runs.txt; {marker}"},
                                    call_id="tu-long")
            assert long.status_code == 202, long.text
            await wait_for(rig, "s-a", "tu-long", lambda b: b["status"] == "running"
                           and not b.get("waiting_for"))
            while not (roots["a"] / "ws" / "runs.txt").exists():
                await asyncio.sleep(0.1)
            hosts["a"].kill()  # SIGKILL host a mid-run

            after = {}
            for g in ("a", "b"):
                r = await rig.submit(f"s-{g}", "write_file", {"path": "after.txt", "content": g},
                                     call_id="tu-after")
                assert r.status_code in (200, 202), r.text
                after[g] = r
            done_b = await wait_for(rig, "s-b", "tu-after", lambda b: b["finished"])
            assert done_b["status"] == "succeeded", done_b
            assert (roots["b"] / "ws" / "after.txt").read_text() == "b"
            # The call that was running on the dead host: outcome unknown, never re-run.
            lost = await wait_for(rig, "s-a", "tu-long", lambda b: b["finished"])
            assert lost["status"] == "failed", lost
            assert WORKER_LOST_TEXT in str(lost["result"]), lost
            # Host a's new call waits, and says what for; nothing ran it elsewhere.
            waiting = await wait_for(rig, "s-a", "tu-after",
                                     lambda b: b.get("waiting_for") == "worker group a")
            assert not waiting["finished"]
            assert not (roots["a"] / "ws" / "after.txt").exists()

            restarted = start_host("a")
            done_a = await wait_for(rig, "s-a", "tu-after", lambda b: b["finished"])
            assert done_a["status"] == "succeeded", done_a
            assert (roots["a"] / "ws" / "after.txt").read_text() == "a"
            assert (roots["a"] / "ws" / "runs.txt").read_text() == "run\n"  # at most once
            ran = await activity_workers(rig.rig.client, call_workflow_id("s-a", "tu-after"))
            # Default worker identity is "<pid>@<host>": each ran on its host's process.
            assert pids(ran["parkgate.execute"]) == {restarted.pid}
            ran_b = await activity_workers(rig.rig.client, call_workflow_id("s-b", "tu-after"))
            assert pids(ran_b["parkgate.execute"]) == {hosts["b"].pid}
        finally:
            for proc in hosts.values():
                proc.stop()
            kill_leftovers(marker)
