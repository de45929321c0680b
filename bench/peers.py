"""Peers phase: the same work on LangGraph (PostgreSQL checkpointer) and on DBOS.

The work, as parkgate does it: classify a tool call, then either run it
(an auto-approved read_file of the bench workspace's README.md) or park it for
a human, and on approval execute it (write_file under approve/). Measured
for each system, in this process, on the same machine:
- auto read: p50 at concurrency 1 and calls/s at each concurrency level;
- approval: from the decision being handed to the system until the result
  is back (c=1, serial).

LangGraph: a graph classify → run (read) | approval → execute (write), where
the approval node calls `interrupt()` and is resumed with
`Command(resume=...)`; every step is checkpointed in PostgreSQL
(`AsyncPostgresSaver` over a connection pool). On resume LangGraph re-runs
the interrupted node from its start. DBOS: a workflow with a `classify`
step, `DBOS.recv` waiting for the decision that the approver sends with
`DBOS.send`, and an `execute` step; DBOS's system database is PostgreSQL.
Each system gets its own throwaway database on `admin_url`.

parkgate's rows come from the same stack as the other phases: the durable
read through `DurableDispatcher` with the worker in this process (as the
peers run in-process), and the approval round trip over HTTP (decision POST
→ the agent's long-poll returns; parkgate has no in-process resume call).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

from bench.approval import round_trip
from bench.history_inserts import throwaway_db
from bench.latency import Call, Load, run_load
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Stack, durable_dispatcher, in_process_worker, serve_api
from parkgate.models import Session, ToolUseBlock

#: Modules the phase imports, by the package that provides them (the bench-peers extra).
EXTRA = {
    "langgraph": "langgraph",
    "langgraph.checkpoint.postgres": "langgraph-checkpoint-postgres",
    "psycopg": "psycopg[binary]",
    "psycopg_pool": "psycopg-pool",
    "dbos": "dbos",
}


def missing_extra() -> str:
    """The packages of parkgate[bench-peers] that are not importable, or ''."""
    missing = []
    for module, package in EXTRA.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(package)
    return ", ".join(missing)


# --- the shared work: classify, read, write ----------------------------------------------


def classify(workspace: str, tool: str, path: str) -> str:
    """'auto' or 'prompt' by the bench policy (writes under approve/ park), inside the workspace."""
    root = Path(workspace).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"{path} is outside the workspace")
    return "prompt" if tool == "write_file" and path.startswith("approve/") else "auto"


def read_file(workspace: str, path: str) -> str:
    return (Path(workspace) / path).read_text()


def write_file(workspace: str, path: str, content: str) -> str:
    target = Path(workspace) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {len(content)} bytes to {path}"


# --- LangGraph ---------------------------------------------------------------------------


class CallState(TypedDict, total=False):
    workspace: str
    tool: str
    path: str
    content: str
    mode: str
    decision: str
    result: str


def build_graph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def classify_node(s: CallState) -> CallState:
        return {"mode": classify(s["workspace"], s["tool"], s["path"])}

    def run_node(s: CallState) -> CallState:
        return {"result": read_file(s["workspace"], s["path"])}

    def approval_node(s: CallState) -> CallState:
        # Re-run from here on resume: interrupt() then returns the resume value.
        return {"decision": interrupt({"tool": s["tool"], "path": s["path"]})}

    def execute_node(s: CallState) -> CallState:
        if s["decision"] != "allow":
            return {"result": "denied"}
        return {"result": write_file(s["workspace"], s["path"], s["content"])}

    g: Any = StateGraph(CallState)
    g.add_node("classify", classify_node)
    g.add_node("run", run_node)
    g.add_node("approval", approval_node)
    g.add_node("execute", execute_node)
    g.add_edge(START, "classify")
    g.add_conditional_edges("classify", lambda s: "run" if s["mode"] == "auto" else "approval")
    g.add_edge("run", END)
    g.add_edge("approval", "execute")
    g.add_edge("execute", END)
    return g.compile(checkpointer=checkpointer)


async def langgraph_peer(url: str, workspace: str, run: Callable[[Peer], Awaitable[None]]) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.types import Command
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(
        url, max_size=40, open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    ) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        graph = build_graph(saver)

        async def read(tag: str) -> object:
            out = await graph.ainvoke(
                {"workspace": workspace, "tool": "read_file", "path": "README.md"},
                {"configurable": {"thread_id": tag}},
            )
            if not out.get("result"):
                raise RuntimeError(f"langgraph read returned {out}")
            return out

        async def park(tag: str) -> Callable[[], Awaitable[object]]:
            config = {"configurable": {"thread_id": tag}}
            path = f"approve/langgraph/{tag}.txt"
            out = await graph.ainvoke(
                {"workspace": workspace, "tool": "write_file", "path": path,
                 "content": f"{tag}\n"}, config,
            )
            if "__interrupt__" not in out:
                raise RuntimeError(f"langgraph write did not interrupt: {out}")

            async def approve() -> object:
                done = await graph.ainvoke(Command(resume="allow"), config)
                if not str(done.get("result", "")).startswith("wrote"):
                    raise RuntimeError(f"langgraph resume returned {done}")
                return done

            return approve

        await run(Peer("LangGraph + PostgresSaver", read, park))


# --- DBOS --------------------------------------------------------------------------------


def _dbos_workflow() -> Any:
    """The DBOS call workflow and its steps (DBOS registers functions once per process)."""
    from dbos import DBOS

    global _DBOS_WORKFLOW
    if _DBOS_WORKFLOW is not None:
        return _DBOS_WORKFLOW

    @DBOS.step(name="bench.classify")
    async def classify_step(workspace: str, tool: str, path: str) -> str:
        return classify(workspace, tool, path)

    @DBOS.step(name="bench.read")
    async def read_step(workspace: str, path: str) -> str:
        return read_file(workspace, path)

    @DBOS.step(name="bench.execute")
    async def execute_step(workspace: str, path: str, content: str) -> str:
        return write_file(workspace, path, content)

    @DBOS.workflow(name="bench.call")
    async def call_workflow(workspace: str, tool: str, path: str, content: str) -> str:
        mode = await classify_step(workspace, tool, path)
        if mode == "auto":
            return await read_step(workspace, path)
        decision = await DBOS.recv_async("decision", timeout_seconds=300)
        if decision != "allow":
            return "denied"
        return await execute_step(workspace, path, content)

    _DBOS_WORKFLOW = call_workflow
    return call_workflow


_DBOS_WORKFLOW: Any = None


async def dbos_peer(url: str, workspace: str, run: Callable[[Peer], Awaitable[None]]) -> None:
    from dbos import DBOS, SetWorkflowID

    call_workflow = _dbos_workflow()
    DBOS(config={"name": "parkgate-bench", "system_database_url": url,
                 "sys_db_pool_size": 40, "log_level": "WARNING"})
    await asyncio.to_thread(DBOS.launch)
    try:

        async def start(tag: str, tool: str, path: str, content: str) -> Any:
            with SetWorkflowID(tag):
                return await DBOS.start_workflow_async(call_workflow, workspace, tool, path,
                                                       content)

        async def read(tag: str) -> object:
            handle = await start(tag, "read_file", "README.md", "")
            result = await handle.get_result()
            if not result:
                raise RuntimeError("dbos read returned nothing")
            return result

        async def park(tag: str) -> Callable[[], Awaitable[object]]:
            handle = await start(tag, "write_file", f"approve/dbos/{tag}.txt", f"{tag}\n")

            async def approve() -> object:
                await DBOS.send_async(tag, "allow", "decision")
                result = await handle.get_result()
                if not str(result).startswith("wrote"):
                    raise RuntimeError(f"dbos workflow returned {result}")
                return result

            return approve

        await run(Peer("DBOS (PostgreSQL system DB)", read, park))
    finally:
        await asyncio.to_thread(DBOS.destroy, destroy_registry=False)


# --- measuring ---------------------------------------------------------------------------


class Peer:
    """One system's two operations: an auto read, and park (→ approve, timed)."""

    def __init__(self, name: str, read: Callable[[str], Awaitable[object]],
                 park: Callable[[str], Awaitable[Callable[[], Awaitable[object]]]]) -> None:
        self.name = name
        self.read = read
        self.park = park


async def measure(
    peer: Peer, report: Report, ui: Reporter, *, concurrencies: list[int], calls: int,
    approvals: int, run_id: str,
) -> None:
    for c in concurrencies:
        total = max(calls, 2 * c)

        def call(prefix: str, c: int = c) -> Call:
            async def one(lane: int, i: int) -> object:
                return await peer.read(f"{run_id}-{prefix}-c{c}-{i}")

            return one

        await run_load(call("warm"), max(3, c), c, lambda: None)
        step = ui.step(f"peers: {peer.name} read c={c}", total)
        load = await run_load(call("read"), total, c, step.advance)
        report.add(Row.latency("peers", f"{peer.name}: auto read_file", load.samples_ms,
                               concurrency=c, wall_s=load.wall_s))
    trips: list[float] = []
    step = ui.step(f"peers: {peer.name} approvals", approvals)
    for i in range(approvals + 2):
        approve = await peer.park(f"{run_id}-approve-{i}")
        await asyncio.sleep(0.05)
        t0 = time.perf_counter()
        await approve()
        if i >= 2:  # the first two warm up
            trips.append((time.perf_counter() - t0) * 1000)
            step.advance()
    report.add(Row.latency("peers", f"{peer.name}: approval → result (in-process resume)",
                           trips, concurrency=1))


async def parkgate_rows(
    stack: Stack, report: Report, ui: Reporter, *, concurrencies: list[int], calls: int,
    approvals: int,
) -> None:
    settings = stack.settings(stack.task_queue("peers"))
    worker, pipeline = in_process_worker(stack, settings)
    durable = durable_dispatcher(stack, settings, pipeline.registry, eager=True)
    ws = str(stack.workspace)
    async with worker, serve_api(stack, settings, pipeline.registry, dispatcher=durable) as api:
        for c in concurrencies:
            total = max(calls, 2 * c)

            def call(prefix: str, c: int = c) -> Call:
                async def one(lane: int, i: int) -> object:
                    session = Session(session_id=f"peers-{stack.run}-c{c}-{lane}", turn_id="t",
                                      workspace_path=ws)
                    block = ToolUseBlock(id=f"{prefix}-{i}", name="read_file",
                                         input={"path": "README.md"})
                    result = await durable.dispatch(block, session)
                    if result.is_error:
                        raise RuntimeError(f"parkgate read failed: {result.text}")
                    return result

                return one

            await run_load(call("warm"), max(3, c), c, lambda: None)
            step = ui.step(f"peers: parkgate read c={c}", total)
            load: Load = await run_load(call("read"), total, c, step.advance)
            report.add(Row.latency("peers", "parkgate (DurableDispatcher, eager): auto read_file",
                                   load.samples_ms, concurrency=c, wall_s=load.wall_s))
        sid = f"peers-approval-{stack.run}"
        await api.register(sid, stack.workspace)
        for i in range(2):
            await round_trip(api, sid, "t", f"warm-{i}")
        trips = [(await round_trip(api, sid, "t", f"call-{i}"))[0] for i in range(approvals)]
    report.add(Row.latency("peers", "parkgate: approval → result (decision POST → long-poll 200)",
                           trips, concurrency=1))


async def run(
    stack: Stack, report: Report, ui: Reporter, *, admin_url: str, concurrencies: list[int],
    calls: int, approvals: int,
) -> None:
    missing = missing_extra()
    if missing:
        raise RuntimeError(f"phase peers needs {missing}: pip install 'parkgate[bench-peers]'")
    run_id = uuid.uuid4().hex[:6]
    ws = str(stack.workspace)
    await parkgate_rows(stack, report, ui, concurrencies=concurrencies, calls=calls,
                        approvals=approvals)

    async def body(peer: Peer) -> None:
        await measure(peer, report, ui, concurrencies=concurrencies, calls=calls,
                      approvals=approvals, run_id=run_id)

    async with throwaway_db(admin_url) as url:
        await langgraph_peer(url, ws, body)
    async with throwaway_db(admin_url) as url:
        await dbos_peer(url, ws, body)
