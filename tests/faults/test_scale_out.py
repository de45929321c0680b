"""Scale-out: two API processes and three workspace hosts on PostgreSQL and one
Temporal server, every piece a real process; one host SIGKILLed mid-run.

Shape (the docker-compose shape, docs/OPERATIONS.md "Worker groups"):

- `api-1`, `api-2`: `parkgate api`, the same settings, one database; the agent
  and the human alternate between them for every step.
- `host-a`, `host-b`, `host-c`: `parkgate worker` with `serve_groups: [host-x]`,
  `serve_main_queue: false` and `workspace_roots` = that host's root only,
  standing in for three machines that each hold their agents' workspaces.
- `worker-1`: the shared worker (main queue: call workflows, approvals, store
  writes). A fourth process rather than one host doing it too: a host is an
  agent's machine that comes and goes, and if it also ran workflows its crash
  would stall every host's calls (workflow tasks on its sticky queue, store
  writes in flight), not only its own. Its `workspace_roots` hold none of the
  hosts' workspaces, so a grouped step that ran there would fail.

Where each step ran is read back twice: from Temporal history (the worker
identity, `<pid>@<hostname>`, on every ActivityTaskStarted) and from the
files: each shell call appends the name of the host whose worker ran it
(`$SCALEOUT_HOST`, passed to tools by `tool_env_passthrough`) to its own marker
file, so a marker's lines count real runs and say where they happened.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from temporalio.client import Client

from parkgate.durable.payloads import WORKER_LOST_TEXT, call_workflow_id
from parkgate.workspaces.worker_groups import WORKSPACE_ACTIVITIES
from tests.faults.conftest import StackFactory
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall, check, result_text
from tests.faults.harness.ports import free_port, wait_port_async
from tests.faults.harness.procs import ManagedProcess
from tests.faults.harness.stack import CLI, START_TIMEOUT, Stack
from tests.faults.harness.temporal import DevServer
from tests.fixtures.db import fresh_pg_database
from tests.fixtures.temporal import activity_workers

pytestmark = [pytest.mark.postgres, pytest.mark.devserver, pytest.mark.slow,
              pytest.mark.timeout(300)]

HOSTS = ("host-a", "host-b", "host-c")
#: Calls per host in the first batch: auto shell, auto write_file, approved shell.
AUTO_SHELL, AUTO_WRITE, APPROVED = 4, 2, 3
#: Seconds without a heartbeat before a running tool's worker counts as lost.
HEARTBEAT_TIMEOUT = 3
CALL_TIMEOUT = 60.0


# ---------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------


@dataclass
class HostCall(PlannedCall):
    """A planned call for one host's session; its marker names who ran it."""

    host: str = ""
    write: bool = False
    #: Seconds the shell lingers after its marker line (a string: it is also
    #: how leftover `sleep`s are found and killed).
    linger: str = ""

    def block(self) -> dict[str, Any]:
        if self.write:
            return {"id": self.tool_use_id, "name": "write_file",
                    "input": {"path": f"markers/{self.tool_use_id}", "content": f"{self.host}\n"}}
        command = f'echo "$SCALEOUT_HOST" >> markers/{self.tool_use_id}'
        if self.linger:
            command += f"; sleep {self.linger}"
        return {"id": self.tool_use_id, "name": "shell", "input": {"command": command}}

    def marker_lines(self) -> list[str]:
        try:
            return self.marker.read_text().splitlines()
        except FileNotFoundError:
            return []


class Hosts:
    """Three workspace roots, one per host, each with an auto and a review workspace."""

    def __init__(self, root: Path) -> None:
        self.roots = {h: (root / h).resolve() for h in HOSTS}
        for h in HOSTS:
            for kind in ("auto", "review"):
                (self.workspace(h, kind) / "markers").mkdir(parents=True, exist_ok=True)

    def workspace(self, host: str, kind: str) -> Path:
        return self.roots[host] / kind

    @staticmethod
    def session(host: str, kind: str) -> str:
        return f"s-{host}-{kind}"

    def policy(self) -> dict[str, Any]:
        """Side effects prompt, except in each host's `auto` workspace."""
        return {
            "default": {"NONE": "auto", "READ": "auto", "WRITE": "prompt",
                        "EXECUTE": "prompt", "NETWORK": "prompt"},
            "trusted_workspaces": [str(self.workspace(h, "auto")) for h in HOSTS],
            "trusted_workspace_overrides": {"WRITE": "auto", "EXECUTE": "auto"},
        }

    def call(self, host: str, kind: str, name: str, *, write: bool = False,
             linger: str = "") -> HostCall:
        ws = "auto" if kind == "auto" else "review"
        return HostCall(kind=kind, session_id=self.session(host, ws), turn_id="t1",
                        tool_use_id=f"tu_{host}_{name}", workspace=self.workspace(host, ws),
                        host=host, write=write, linger=linger)


# ---------------------------------------------------------------------------
# Processes beyond the harness's one API and one worker
# ---------------------------------------------------------------------------


def host_env(stack: Stack, hosts: Hosts, host: str) -> dict[str, str]:
    """A host's worker: only its group's queue, only its own workspace root."""
    return {
        **stack.env(),
        "PARKGATE_SERVE_GROUPS": json.dumps([host]),
        "PARKGATE_SERVE_MAIN_QUEUE": "false",
        "PARKGATE_WORKSPACE_ROOTS": json.dumps([str(hosts.roots[host])]),
        "PARKGATE_TOOL_ENV_PASSTHROUGH": json.dumps(["SCALEOUT_HOST"]),
        "SCALEOUT_HOST": host,
    }


def start_host(stack: Stack, hosts: Hosts, host: str) -> ManagedProcess:
    return ManagedProcess(host, [*CLI, "worker"], log_dir=stack.log_dir,
                          env=host_env(stack, hosts, host), cwd=stack.root).start()


async def start_second_api(stack: Stack) -> tuple[ManagedProcess, str]:
    """Another `parkgate api` on its own port: same settings, same database."""
    port = free_port()
    proc = ManagedProcess("api-2", [*CLI, "api", "--host", "127.0.0.1", "--port", str(port)],
                          log_dir=stack.log_dir, env=stack.env(), cwd=stack.root).start()
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_port_async(port, START_TIMEOUT)
    except TimeoutError:
        proc.assert_alive()
        raise
    deadline = time.monotonic() + START_TIMEOUT
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        while True:
            proc.assert_alive()
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("api-2 not healthy")
            await asyncio.sleep(0.2)


def kill_leftovers(token: str) -> None:
    """Tools run in their own session, so a SIGKILLed worker's `sleep` outlives it."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if token in " ".join(proc.info["cmdline"] or []):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


# ---------------------------------------------------------------------------
# Reading back
# ---------------------------------------------------------------------------


async def started_by(client: Client, workflow_id: str) -> dict[str, set[int]]:
    """Activity type -> pids of the workers that started it (from history; a
    worker's default identity is "<pid>@<host>")."""
    ran = await activity_workers(client, workflow_id)
    return {name: {int(i.split("@", 1)[0]) for i in ids} for name, ids in ran.items()}


async def placement(client: Client, call: HostCall) -> tuple[set[int], set[int], set[int]]:
    """(pids that ran workspace steps, pids that ran parkgate.execute, pids of the rest)."""
    ran = await started_by(client, call_workflow_id(call.session_id, call.tool_use_id))
    workspace = {k: v for k, v in ran.items() if k in WORKSPACE_ACTIVITIES}
    assert "parkgate.classify" in workspace, (call.tool_use_id, ran)
    rest = [v for k, v in ran.items() if k not in WORKSPACE_ACTIVITIES]
    return set().union(*workspace.values()), ran.get("parkgate.execute", set()), \
        set().union(*rest)


# ---------------------------------------------------------------------------
# Driving: the agent and the human use either API
# ---------------------------------------------------------------------------


async def submit_and_park(call: HostCall, agent: AgentClient, human: AgentClient) -> dict:
    """Submit through `agent`'s API; for a call that parks, see it parked through the other."""
    res = await agent.submit(call.session_id, call.turn_id, call.block(), timeout=CALL_TIMEOUT)
    call.history.append(str(res.get("status")))
    if not call.parks:
        return res
    res = await human.wait_status(call.session_id, call.tool_use_id, {"parked"},
                                  timeout=CALL_TIMEOUT)
    call.history.append(str(res.get("status")))
    assert res.get("status") == "parked", res
    return res


async def approve(call: HostCall, parked: dict, human: AgentClient) -> None:
    request_id = await human.request_id(call.session_id, parked)
    await human.decide(call.session_id, call.turn_id, request_id, "allow",
                       timeout=CALL_TIMEOUT)
    call.history.append("approved")


async def finish(call: HostCall, client: AgentClient, timeout: float = CALL_TIMEOUT) -> None:
    call.final = await client.wait_status(call.session_id, call.tool_use_id, TERMINAL,
                                          timeout=timeout)
    call.history.append(str(call.final.get("status")))


async def drive(call: HostCall, agent: AgentClient, human: AgentClient) -> None:
    parked = await submit_and_park(call, agent, human)
    if call.parks:
        await approve(call, parked, human)
    await finish(call, agent)


async def wait_waiting(call: HostCall, client: AgentClient, group: str) -> dict:
    """Poll until the call resource says it waits for `group`'s workers."""
    deadline = time.monotonic() + 30
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = await client.get(call.session_id, call.tool_use_id)
        if body.get("waiting_for") == f"worker group {group}":
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{call.tool_use_id} never said it waits for {group}: {body}")


# ---------------------------------------------------------------------------
# The scenario
# ---------------------------------------------------------------------------


@pytest.fixture
async def scale_pg(pg_available: bool) -> AsyncIterator[str]:
    """A fresh PostgreSQL database on the local server; the stack migrates it."""
    async with fresh_pg_database("parkgate_scale") as url:
        yield url


async def test_scale_out_two_apis_three_hosts_one_killed(
    scale_pg: str, fault_root: Path, devserver: DevServer, make_stack: StackFactory
) -> None:
    t0 = time.monotonic()
    hosts = Hosts(fault_root / "hosts")
    stack = await make_stack(
        workers=1, database_url=scale_pg, policy=hosts.policy(),
        extra_env={
            "PARKGATE_WORKER_GROUPS": json.dumps({h: [str(r)] for h, r in hosts.roots.items()}),
            "PARKGATE_EXECUTE_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT_TIMEOUT),
        },
    )
    main_pid = stack.workers[0].pid
    procs: dict[str, ManagedProcess] = {h: start_host(stack, hosts, h) for h in HOSTS}
    api2, api2_url = await start_second_api(stack)
    apis = [AgentClient(url, stack.api_key or "", human_key=stack.human_key)
            for url in (stack.base_url, api2_url)]
    temporal = await Client.connect(devserver.address)
    slow_sleep = f"25.{secrets.randbelow(10**6):06d}1"  # unique to this run
    timings: dict[str, float] = {"up": time.monotonic() - t0}
    try:
        # -- sessions, registered through alternating APIs ------------------------
        i = 0
        for h in HOSTS:
            for kind in ("auto", "review"):
                r = await apis[i % 2].request(
                    "POST", "/v1/sessions", deadline=time.monotonic() + 30,
                    json={"session_id": hosts.session(h, kind),
                          "workspace_path": str(hosts.workspace(h, kind)), "kind": "main"})
                assert r.status_code == 201, r.text
                assert r.json()["worker_group"] == h, r.json()  # from the host's root
                i += 1

        # -- a batch per host: auto shell/write, approved shell -------------------
        batch: list[HostCall] = []
        for h in HOSTS:
            batch += [hosts.call(h, "auto", f"auto{n}") for n in range(AUTO_SHELL)]
            batch += [hosts.call(h, "auto", f"write{n}", write=True) for n in range(AUTO_WRITE)]
            batch += [hosts.call(h, "approve", f"approve{n}") for n in range(APPROVED)]
        # host-b's calls approved later, while host-b is down
        late = [hosts.call("host-b", "approve", f"late{n}") for n in range(2)]
        parked_late = await asyncio.gather(*(
            submit_and_park(c, apis[n % 2], apis[(n + 1) % 2]) for n, c in enumerate(late)))
        await asyncio.gather(*(drive(c, apis[n % 2], apis[(n + 1) % 2])
                               for n, c in enumerate(batch)))
        timings["batch"] = time.monotonic() - t0 - sum(timings.values())

        pid_of = {h: procs[h].pid for h in HOSTS}
        host_pids = set(pid_of.values())
        for c in batch:
            assert (c.final or {}).get("status") == "succeeded", (c.tool_use_id, c.final)
            assert c.marker_lines() == [c.host], (c.tool_use_id, c.marker_lines())
            ws_pids, exec_pids, rest = await placement(temporal, c)
            assert ws_pids == exec_pids == {pid_of[c.host]}, (c.tool_use_id, ws_pids, pid_of)
            assert rest <= {main_pid} and not rest & host_pids, (c.tool_use_id, rest)
        for c in late:
            assert not c.marker.exists()

        # -- host-b SIGKILLed while its slow call runs --------------------------------
        slow = hosts.call("host-b", "auto", "slow", linger=slow_sleep)
        await apis[1].submit(slow.session_id, slow.turn_id, slow.block())
        deadline = time.monotonic() + 30
        while not slow.marker_lines():
            assert time.monotonic() < deadline, "the slow call never started on host-b"
            await asyncio.sleep(0.1)
        old_b = pid_of["host-b"]
        await procs["host-b"].akill()
        t_kill = time.monotonic()

        # Approvals and new calls while host-b is down; the other hosts carry on.
        await asyncio.gather(*(approve(c, p, apis[(n + 1) % 2])
                               for n, (c, p) in enumerate(zip(late, parked_late, strict=True))))
        fresh_b = [hosts.call("host-b", "auto", f"after{n}") for n in range(2)]
        for n, c in enumerate(fresh_b):
            await apis[n % 2].submit(c.session_id, c.turn_id, c.block())
        others = [hosts.call(h, "auto", "during") for h in ("host-a", "host-c")]
        await asyncio.gather(*(drive(c, apis[n % 2], apis[(n + 1) % 2])
                               for n, c in enumerate(others)))
        for c in others:
            assert (c.final or {}).get("status") == "succeeded", c.final
            assert c.marker_lines() == [c.host]
        waiting = [*late, *fresh_b]
        for n, c in enumerate(waiting):
            body = await wait_waiting(c, apis[n % 2], "host-b")
            assert not body["finished"], body
            # Approved: shown as decided, not as still awaiting a decision.
            assert body["status"] != "parked", body
        await asyncio.sleep(1.5)  # still waiting: nobody else picks them up
        for n, c in enumerate(waiting):
            body = await wait_waiting(c, apis[(n + 1) % 2], "host-b")
            assert not body["finished"] and not c.marker.exists(), body
        timings["outage"] = time.monotonic() - t_kill

        # -- host-b returns ---------------------------------------------------------
        procs["host-b"].start()
        new_b = procs["host-b"].pid
        t_back = time.monotonic()
        await asyncio.gather(*(finish(c, apis[n % 2]) for n, c in enumerate([*waiting, slow])))
        timings["drain after restart"] = time.monotonic() - t_back
        for c in waiting:
            assert (c.final or {}).get("status") == "succeeded", (c.tool_use_id, c.final)
            assert c.marker_lines() == ["host-b"], (c.tool_use_id, c.marker_lines())
            ws_pids, exec_pids, rest = await placement(temporal, c)
            assert exec_pids == {new_b}, (c.tool_use_id, exec_pids, new_b)
            assert ws_pids <= {old_b, new_b}, (c.tool_use_id, ws_pids)
            assert not rest & (host_pids | {new_b}), (c.tool_use_id, rest)
        # The call that was running on the dead host: outcome unknown, never re-run.
        assert slow.final is not None and slow.final["status"] == "failed", slow.final
        assert WORKER_LOST_TEXT in result_text(slow.final), slow.final
        assert slow.marker_lines() == ["host-b"], slow.marker_lines()
        _ws, slow_exec, _rest = await placement(temporal, slow)
        assert slow_exec == {old_b}, slow_exec

        # -- nothing lost, nothing twice, no 5xx, the history chain intact ----------
        everything = [*batch, *late, *fresh_b, *others, slow]
        verdict = check(everything)
        assert not verdict.lost and not verdict.duplicates and not verdict.wrong, (
            verdict.problems() + "\n" + stack.logs())
        assert verdict.outcome_unknown == 1, verdict
        for client in apis:
            assert not client.errors.unexpected, client.errors.unexpected[:5]
        audit = await stack.acli("audit", "verify")
        assert audit.returncode == 0, f"{audit.stdout}\n{audit.stderr}"
        timings["total"] = time.monotonic() - t0
        summary.add(calls_run=len(everything), faults_injected=1, lost=len(verdict.lost),
                    duplicate_executions=len(verdict.duplicates),
                    server_errors=sum(len(c.errors.unexpected) for c in apis))
        print(f"\nscale-out: calls={len(everything)} "
              + " ".join(f"{k}={v:.1f}s" for k, v in timings.items()))
    finally:
        for client in apis:
            await client.aclose()
        await asyncio.gather(*(p.astop(timeout=10) for p in [*procs.values(), api2]))
        kill_leftovers(f"sleep {slow_sleep}")
