"""Phase `command_hook`: a command hook answering a call allowed by policy, end
to end, process start included (issue 38 item 5).

Codex and Gemini CLI run a command hook process for every tool call, Claude
Code's `--command` install too: what the agent waits for is that process
starting (`parkgate hook <agent>`, the standard library and the wire format
only), posting the event, parkgate classifying, releasing and claiming the
call, the process starting the claim and printing the answer. Measured per
agent: the pre-tool event of a read allowed by policy (Codex `read_file`,
Claude Code `Read`, Gemini `read_file`), from spawning the process to its
exit, then the post-tool event that records the outcome (a second process).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Api, Stack, durable_dispatcher, in_process_worker, serve_api

#: Target: a command hook answering an auto-allowed call, p50.
TARGET_MS = 150.0
PARKGATE = Path(sys.executable).parent / "parkgate"
#: (agent, its pre/post event names, the read tool it calls, the input field).
AGENTS = (("codex", "PreToolUse", "PostToolUse", "read_file", True),
          ("claude-code", "PreToolUse", "PostToolUse", "Read", True),
          ("gemini", "BeforeTool", "AfterTool", "read_file", False))


def _events(agent: str, pre: str, post: str, tool: str, ids: bool, sid: str, cwd: str,
            file: str) -> tuple[bytes, bytes]:
    event: dict[str, Any] = {"session_id": sid, "cwd": cwd, "tool_name": tool,
                             "tool_input": {"file_path": file}}
    if ids:
        event["tool_use_id"] = f"call_{uuid.uuid4().hex[:16]}"
    if agent == "codex":
        event.update(turn_id="bench", model="m", permission_mode="default",
                     transcript_path=None)
    after = {**event, "hook_event_name": post,
             "tool_response": {"llmContent": "bench\n"} if agent == "gemini" else "bench\n"}
    return (json.dumps({**event, "hook_event_name": pre}).encode(), json.dumps(after).encode())


async def _hook(agent: str, api: Api, stdin: bytes) -> tuple[float, bytes]:
    """One hook process: (wall ms from spawn to exit, its stdout)."""
    env = {**os.environ, "PARKGATE_API_KEY": api.key}
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        str(PARKGATE), "hook", agent, "--url", api.base_url, "--timeout", "60", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin)
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"parkgate hook {agent} exited {proc.returncode}: {err.decode()}")
    return ms, out


def _allowed(agent: str, out: bytes) -> bool:
    body = json.loads(out)
    if agent == "codex":
        return bool(body == {})
    if agent == "gemini":
        return bool(body.get("decision") == "allow")
    return bool(body.get("hookSpecificOutput", {}).get("permissionDecision") == "allow")


async def run(stack: Stack, report: Report, ui: Reporter, *, samples: int) -> None:
    settings = stack.settings(stack.task_queue("command-hook"))
    worker, pipeline = in_process_worker(stack, settings)
    dispatcher = durable_dispatcher(stack, settings, pipeline.registry, eager=True)
    target = stack.workspace / "command-hook-bench.txt"
    target.write_text("bench\n")
    async with worker, serve_api(stack, settings, pipeline.registry, dispatcher=dispatcher) as api:
        for agent, pre_name, post_name, tool, ids in AGENTS:
            sid = f"{agent}-{stack.run}"
            step = ui.step(f"parkgate hook {agent}", samples)
            pres: list[float] = []
            posts: list[float] = []
            for i in range(samples + 2):  # two warm-up calls (the first declares the tool)
                pre, post = _events(agent, pre_name, post_name, tool, ids, sid,
                                    str(stack.workspace), str(target))
                ms, out = await _hook(agent, api, pre)
                if not _allowed(agent, out):
                    raise RuntimeError(f"{agent} {pre_name} was not allowed: {out!r}")
                after_ms, _ = await _hook(agent, api, post)
                if i >= 2:
                    pres.append(ms)
                    posts.append(after_ms)
                    step.advance()
            row = Row.latency("command_hook", f"parkgate hook {agent}: {pre_name} ({tool}, "
                              "allowed by policy) → allow, process start included", pres,
                              concurrency=1)
            if row.p50_ms is not None:
                row.target = f"p50 ≤ {TARGET_MS:g} ms"
                row.met = row.p50_ms <= TARGET_MS
            report.add(row)
            report.add(Row.latency("command_hook", f"parkgate hook {agent}: {post_name} → "
                                   "outcome recorded", posts, concurrency=1))
