"""Phase `claude_code`: what parkgate adds to a Claude Code tool call allowed by policy.

Claude Code's PreToolUse hook posts a Read to `POST /v1/hooks/claude-code`:
parkgate registers the tool, starts the call's workflow, classifies it (READ:
auto), releases it, and the hook claims it before answering `allow`.
Measured: that request, end to end over HTTP, then the PostToolUse request
that records the outcome (Claude Code does not wait on the latter's answer
for the model, but it runs before the next step). Compared with the serial
empty-workflow floor timed after each call on the same worker
(`bench.serial_floor.PairedFloor`; not in a `--profile` run).
"""

from __future__ import annotations

import contextlib
import time
import uuid

from bench.profile import Probe
from bench.progress import Reporter
from bench.report import Report, Row
from bench.serial_floor import PairedFloor
from bench.stack import Api, Stack, durable_dispatcher, in_process_worker, serve_api
from parkgate.durable.payloads import call_workflow_id

#: Target: the allow answer within this multiple of the serial floor.
HOOK_TARGET = 1.0


async def one_call(api: Api, sid: str, cwd: str, file: str,
                   ids: list[str] | None = None) -> tuple[float, float]:
    """(PreToolUse -> allow, PostToolUse recorded) in ms for one Read."""
    tuid = f"toolu_{uuid.uuid4().hex[:16]}"
    if ids is not None:
        ids.append(call_workflow_id(sid, tuid))
    event = {"session_id": sid, "cwd": cwd, "tool_name": "Read", "prompt_id": "bench",
             "tool_input": {"file_path": file}, "tool_use_id": tuid}
    t0 = time.perf_counter()
    pre = await api.http.post("/v1/hooks/claude-code",
                              json={**event, "hook_event_name": "PreToolUse"})
    t1 = time.perf_counter()
    decision = pre.json().get("hookSpecificOutput", {}).get("permissionDecision")
    if pre.status_code != 200 or decision != "allow":
        raise RuntimeError(f"PreToolUse was not allowed: {pre.status_code} {pre.text}")
    post = await api.http.post("/v1/hooks/claude-code", json={
        **event, "hook_event_name": "PostToolUse", "tool_response": "bench\n"})
    t2 = time.perf_counter()
    if post.status_code != 200:
        raise RuntimeError(f"PostToolUse failed: {post.status_code} {post.text}")
    return (t1 - t0) * 1000, (t2 - t1) * 1000


async def run(stack: Stack, report: Report, ui: Reporter, *, samples: int,
              profile: bool = False) -> None:
    settings = stack.settings(stack.task_queue("claude-code"))
    worker, pipeline = in_process_worker(stack, settings)
    dispatcher = durable_dispatcher(stack, settings, pipeline.registry, eager=True)
    target = stack.workspace / "claude-code-bench.txt"
    target.write_text("bench\n")
    async with worker, serve_api(stack, settings, pipeline.registry, dispatcher=dispatcher) as api:
        floor = PairedFloor(stack, settings.temporal_task_queue, "claude_code")
        await floor.warm_up()
        sid = f"claude-code-{stack.run}"
        for _ in range(3):  # warm up (the first also registers the session and the tool)
            await one_call(api, sid, str(stack.workspace), str(target))
        step = ui.step("Claude Code hook calls", samples)
        pres: list[float] = []
        posts: list[float] = []
        probe = Probe(stack.client, stack.store).install() if profile else None
        ids: list[str] = []
        start = time.perf_counter()
        with probe.measuring() if probe else contextlib.nullcontext() as sampler:
            for _ in range(samples):
                if probe is not None:
                    probe.next_call()
                pre, post = await one_call(api, sid, str(stack.workspace), str(target), ids)
                if probe is not None:
                    probe.note("HTTP PostToolUse (ended)", post)
                pres.append(pre)
                posts.append(post)
                if probe is None:  # a profiled run times nothing against the floor
                    await floor.one()
                step.advance()
        if probe is not None:
            probe.uninstall()
            probe.workflow_ids = ids
            assert sampler is not None
            report.setup.setdefault("profile", []).append(
                await probe.breakdown("claude_code", samples, time.perf_counter() - start,
                                      sampler))
    floor_p50 = floor.add_row(report)
    row = Row.latency("claude_code", "PreToolUse (Read, allowed by policy) → allow", pres,
                      concurrency=1)
    if floor_p50 and row.p50_ms is not None:
        row.x_floor = row.p50_ms / floor_p50
        row.target = f"p50 ≤ {HOOK_TARGET:g}x floor"
        row.met = row.x_floor <= HOOK_TARGET
    report.add(row)
    report.add(Row.latency("claude_code", "PostToolUse → outcome recorded", posts,
                           concurrency=1))
