"""`python -m bench.sandbox [-n N]`: what the tool sandbox costs per spawned process.

Five ways to run `true`, each N times one after another (after a warm-up):

  exec            asyncio.create_subprocess_exec("true")          the floor
  sandbox exec    the same, wrapped by parkgate.sandbox.launch.sandboxed (unshare with
                  a network namespace, the workspace root covered around the
                  workspace, tmpfs over the hidden paths, parkgate's code
                  read-only, setpriv); once more sharing the host network
  shell tool      ShellTool.execute({"command": "true"}), tool_sandbox=off
  shell tool+sbx  the same with tool_sandbox=auto (sandbox on)

Prints one Markdown table (median, p95, mean in ms, and the extra median cost
of the sandbox). Wall-clock on a shared machine: read the medians, and the
difference between rows rather than the absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.report import Machine, percentile
from parkgate import Limits, ToolContext, WorkspaceFileAPI
from parkgate.sandbox.launch import plan_for, probe, sandboxed
from parkgate.tools import ShellTool


def _context(workspace: str, limits: Limits) -> ToolContext:
    return ToolContext(
        session_id="bench", turn_id="t", tool_use_id="b", workspace_path=workspace,
        cancel_event=asyncio.Event(), logger=logging.getLogger("bench.sandbox"),
        workspace_files=WorkspaceFileAPI(workspace), limits=limits,
    )


async def _spawn(command: Callable[[], list[str]], cwd: str) -> None:
    """Build the command (its mount plan included) and run it, as a tool call does."""
    argv = command()
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env={"PATH": os.defpath})
    if await proc.wait() != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}")


async def _tool(workspace: str, limits: Limits) -> None:
    out = await ShellTool().execute({"command": "true"}, _context(workspace, limits))
    if not out.success:
        raise RuntimeError(f"shell tool failed: {out.metadata}")


async def _measure(run: Callable[[], Awaitable[None]], n: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await run()
    samples: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def measure(n: int, warmup: int) -> list[tuple[str, list[float]]]:
    """(row name, samples in ms) for each way of running `true`."""
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        workspace, hidden = Path(tmp) / "ws", Path(tmp) / "data"
        workspace.mkdir()
        hidden.mkdir(mode=0o700)
        (hidden / "link-secret").write_text("x")
        paths = (str(hidden),)
        off = Limits(tool_sandbox="off")
        on = Limits(tool_sandbox="required", tool_hidden_paths=paths,
                    tool_workspace_roots=(tmp,))
        ws = str(workspace)
        def plain() -> list[str]:
            return ["true"]

        def wrapped() -> list[str]:  # the workspace root covered around ws, and more
            return sandboxed(["true"], plan_for(on, ws), isolate_network=True)

        def host_net() -> list[str]:
            return sandboxed(["true"], plan_for(on, ws))

        return [
            ("exec `true`", await _measure(lambda: _spawn(plain, ws), n, warmup)),
            ("sandbox exec `true`", await _measure(lambda: _spawn(wrapped, ws), n, warmup)),
            ("sandbox exec `true`, host network",
             await _measure(lambda: _spawn(host_net, ws), n, warmup)),
            ("shell tool `true`, sandbox off", await _measure(lambda: _tool(ws, off), n, warmup)),
            ("shell tool `true`, sandbox on", await _measure(lambda: _tool(ws, on), n, warmup)),
        ]


def table(rows: list[tuple[str, list[float]]]) -> str:
    """The Markdown table; 'sandbox +ms' is the median minus its unsandboxed twin's."""
    medians = {name: statistics.median(s) for name, s in rows}
    twin = {"sandbox exec `true`": "exec `true`",
            "sandbox exec `true`, host network": "exec `true`",
            "shell tool `true`, sandbox on": "shell tool `true`, sandbox off"}
    lines = ["| spawn | n | median ms | p95 ms | mean ms | sandbox +ms (median) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, samples in rows:
        extra = f"{medians[name] - medians[twin[name]]:.2f}" if name in twin else "-"
        lines.append(
            f"| {name} | {len(samples)} | {statistics.median(samples):.2f} | "
            f"{percentile(samples, 95):.2f} | {statistics.fmean(samples):.2f} | {extra} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200, help="spawns per row (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured spawns first")
    args = parser.parse_args(argv)
    if args.n < 2 or args.warmup < 0:
        parser.error("-n must be >= 2 and --warmup >= 0")
    reason = probe()
    if reason is not None:
        print(f"python -m bench.sandbox: the sandbox does not work here: {reason}",
              file=sys.stderr)
        return 1
    rows = asyncio.run(measure(args.n, args.warmup))
    machine = Machine.here()
    who = "root" if os.geteuid() == 0 else "unprivileged (user namespace)"
    print(f"Tool sandbox cost per spawn ({machine.cores} cores, {machine.cpu}, "
          f"{machine.system}, as {who}, load {machine.load_at_start[0]})\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
