"""`--profile`: where the time and CPU of one call go (issue 27).

A phase run under `--profile` (the `client` and `claude_code` phases hand
their measured calls over) is seen three ways at once, in the one process
that holds the agent's client, the API and the worker (as `parkgate serve`):

- **counters** (bench-only wrappers on the run's own objects, nothing
  patched in parkgate): the history store's public methods and its
  transactions (reads, writes), the payload codec and payload converter
  (payloads and time), the Temporal client's RPCs (start, update, query,
  history long-poll) — each per measured call;
- **durable steps** from the Temporal histories of the measured calls:
  workflow tasks, regular and local activities, updates, timers per call,
  and the median gap between consecutive history events (where a call's
  wall time goes on the Temporal side: dispatch, store write, task round
  trips);
- **CPU samples** of every thread of this process (py-spy, sampling without
  pausing the process), grouped by what the stack is in (store/SQL, codec,
  serialization, workflow sandbox, API framework, HTTP client, ...) with the
  hottest functions. py-spy comes with the dev extra; without it (or without
  the right to read this process) that part says so and the rest stands.

The result is printed as Markdown after the table and kept in the JSON
(`setup.profile`); PARKGATE_BENCH_SPY_RAW=<path prefix> also keeps py-spy's
raw stacks (for a flame graph). Profiling slows the calls down: the timed rows of a
profiled run are not the figures to quote.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

#: py-spy's sampling rate (per second, per thread).
RATE = 250
#: CPU categories, first match wins (a substring of any frame of the stack).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("payload codec (AES-GCM)", ("durable/codec.py", "cryptography")),
    ("store: SQL (SQLAlchemy, sqlite3/psycopg)", ("sqlalchemy", "sqlite3", "psycopg",
                                                  "aiosqlite")),
    ("workflow sandbox (per-run module imports, restrictions)", ("workflow_sandbox",)),
    ("workflow code + SDK workflow instance", ("_workflow_instance", "parkgate/workflows")),
    ("serialization (pydantic, JSON, converter)", ("pydantic", "temporalio/converter",
                                                   "json/", "google/protobuf")),
    ("API framework (uvicorn, starlette, fastapi)", ("uvicorn", "starlette", "fastapi")),
    ("HTTP client (the agent's httpx)", ("httpx", "httpcore", "h11")),
    ("API handlers (parkgate.api)", ("parkgate/api", "dispatcher/api")),
    ("activities (parkgate.activities)", ("parkgate/activities", "/activities/")),
    ("Temporal SDK (worker, client, bridge)", ("temporalio",)),
    ("asyncio event loop", ("asyncio",)),
)

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("bench_probe_inside",
                                                               default=False)


class Tally:
    """Counts and total milliseconds by name."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.ms: defaultdict[str, float] = defaultdict(float)

    def add(self, name: str, ms: float, n: int = 1) -> None:
        self.count[name] += n
        self.ms[name] += ms

    def rows(self, calls: int) -> list[dict[str, Any]]:
        return [{"name": k, "per_call": self.count[k] / calls,
                 "ms_per_call": self.ms[k] / calls}
                for k in sorted(self.count, key=lambda k: -self.ms[k])]


class Probe:
    """Bench-only wrappers on the run's store, data converter and Temporal client."""

    def __init__(self, client: Client, store: Any) -> None:
        self.client, self.store = client, store
        self.on = False
        self.store_methods, self.transactions = Tally(), Tally()
        self.codec, self.converter, self.rpcs = Tally(), Tally(), Tally()
        self.workflow_ids: list[str] = []
        #: (wall start, ms, what) of every counted step of the current call.
        self.trace: list[tuple[float, float, str]] = []
        self._call_start = 0.0
        self._undo: list[Callable[[], None]] = []

    # ---------------------------------------------------------- installing
    def install(self) -> Probe:
        store = self.store
        for name in dir(type(store)):
            if name.startswith("_"):
                continue
            attr = getattr(store, name, None)
            if callable(attr) and _is_coroutine_function(attr):
                self._wrap_async(store, name, self.store_methods, name, outer_only=True)
        self._wrap_async(store, "_in_write", self.transactions, "write transaction")
        self._wrap_async(store, "_first_row", self.transactions, "one-row read")
        self._wrap_cm(store, "_read", self.transactions, "read transaction")
        dc = self.client.data_converter
        if dc.payload_codec is not None:
            self._wrap_async(dc.payload_codec, "encode", self.codec, "encode", payloads=True)
            self._wrap_async(dc.payload_codec, "decode", self.codec, "decode", payloads=True)
        self._wrap_sync(dc.payload_converter, "to_payloads", self.converter, "to_payloads")
        self._wrap_sync(dc.payload_converter, "from_payloads", self.converter, "from_payloads")
        service = self.client.service_client
        original = service._rpc_call

        async def rpc(rpc: str, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await original(rpc, *args, **kwargs)
            finally:
                if self.on:
                    ms = (time.perf_counter() - t0) * 1000
                    self.rpcs.add(rpc, ms)
                    self._traced(f"RPC {rpc}", t0, ms)

        service._rpc_call = rpc  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(service, "_rpc_call", original))
        return self

    def next_call(self) -> None:
        """A measured call starts: the trace keeps this one only."""
        self.trace.clear()
        self._call_start = time.time()

    def note(self, label: str, ms: float) -> None:
        """A step that just ended, `ms` long (e.g. an HTTP request of the agent)."""
        if self.on:
            self.trace.append((time.time() - ms / 1000, ms, label))

    def _traced(self, label: str, t0: float, ms: float) -> None:
        self.trace.append((time.time() - ms / 1000, ms, label))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _wrap_async(self, obj: Any, name: str, tally: Tally, label: str, *,
                    outer_only: bool = False, payloads: bool = False) -> None:
        original = getattr(obj, name)

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if outer_only and _inside.get():
                return await original(*args, **kwargs)
            token = _inside.set(True) if outer_only else None
            t0 = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                if token is not None:
                    _inside.reset(token)
                if self.on:
                    n = len(args[0]) if payloads and args else 1
                    ms = (time.perf_counter() - t0) * 1000
                    tally.add(label, ms, n)
                    if outer_only:
                        self._traced(f"store {label}", t0, ms)

        setattr(obj, name, wrapped)
        self._undo.append(lambda: _restore(obj, name, original))

    def _wrap_sync(self, obj: Any, name: str, tally: Tally, label: str) -> None:
        original = getattr(obj, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if self.on:
                    tally.add(label, (time.perf_counter() - t0) * 1000)

        setattr(obj, name, wrapped)
        self._undo.append(lambda: _restore(obj, name, original))

    def _wrap_cm(self, obj: Any, name: str, tally: Tally, label: str) -> None:
        original = getattr(obj, name)

        @contextlib.asynccontextmanager
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                async with original(*args, **kwargs) as value:
                    yield value
            finally:
                if self.on:
                    tally.add(label, (time.perf_counter() - t0) * 1000)

        setattr(obj, name, wrapped)
        self._undo.append(lambda: _restore(obj, name, original))

    # ------------------------------------------------------------ measuring
    @contextlib.contextmanager
    def measuring(self) -> Iterator[Sampler]:
        """Count (and sample the CPU) while the measured calls run."""
        sampler = Sampler()
        sampler.start()
        self.on = True
        try:
            yield sampler
        finally:
            self.on = False
            sampler.stop()

    async def breakdown(self, section: str, calls: int, wall_s: float,
                        sampler: Sampler) -> dict[str, Any]:
        """The whole picture of `calls` measured calls, as JSON-able data."""
        steps = await durable_steps(self.client, self.workflow_ids)
        timeline = await self._timeline()
        return {
            "timeline": timeline,
            "section": section, "calls": calls, "wall_ms_per_call": wall_s * 1000 / calls,
            "store_methods": self.store_methods.rows(calls),
            "store_transactions": self.transactions.rows(calls),
            "codec": self.codec.rows(calls),
            "payload_converter": self.converter.rows(calls),
            "temporal_rpcs": self.rpcs.rows(calls),
            "durable": steps,
            "cpu": sampler.summary(calls),
        }


    async def _timeline(self) -> list[dict[str, Any]]:
        """The last measured call, step by step: this process's store calls and
        Temporal RPCs merged with its workflow's history events (one clock)."""
        if not self.workflow_ids:
            return []
        rows = [(t, ms, what) for t, ms, what in self.trace]
        history = await self.client.get_workflow_handle(self.workflow_ids[-1]).fetch_history()
        for ev in history.events:
            rows.append((ev.event_time.ToDatetime(tzinfo=UTC).timestamp(), 0.0,
                         f"history: {_name(ev)}"))
        rows.sort()
        return [{"at_ms": (t - self._call_start) * 1000, "ms": ms, "what": what}
                for t, ms, what in rows]


def _restore(obj: Any, name: str, original: Any) -> None:
    if getattr(type(obj), name, None) is not None and name in vars(obj):
        delattr(obj, name)
    else:
        setattr(obj, name, original)


def _is_coroutine_function(fn: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


# ------------------------------------------------------------ durable steps
_COUNTED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "workflow tasks",
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "regular activities",
    EventType.EVENT_TYPE_MARKER_RECORDED: "local activities (markers)",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "updates accepted",
    EventType.EVENT_TYPE_TIMER_STARTED: "timers",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signals",
}


async def durable_steps(client: Client, workflow_ids: list[str]) -> dict[str, Any]:
    """Per call, from its Temporal history: what it cost in durable steps, and
    the median time between consecutive events (by the pair's names)."""
    counts: Counter[str] = Counter()
    activities: Counter[str] = Counter()
    gaps: defaultdict[str, list[float]] = defaultdict(list)
    order: dict[str, int] = {}
    totals: list[float] = []
    for wid in workflow_ids:
        history = await client.get_workflow_handle(wid).fetch_history()
        events = list(history.events)
        for ev in events:
            label = _COUNTED.get(ev.event_type)
            if label:
                counts[label] += 1
            if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                activities[ev.activity_task_scheduled_event_attributes.activity_type.name] += 1
        for prev, ev in itertools.pairwise(events):
            key = f"{_name(prev)} → {_name(ev)}"
            order.setdefault(key, len(order))
            gaps[key].append((ev.event_time.ToDatetime() - prev.event_time.ToDatetime())
                             .total_seconds() * 1000)
        if len(events) > 1:
            totals.append((events[-1].event_time.ToDatetime()
                           - events[0].event_time.ToDatetime()).total_seconds() * 1000)
    n = max(len(workflow_ids), 1)
    return {
        "calls": len(workflow_ids),
        "per_call": {k: v / n for k, v in counts.items()},
        "activities_per_call": {k: v / n for k, v in activities.items()},
        "history_ms_p50": statistics.median(totals) if totals else None,
        "gaps": [{"between": k, "per_call": len(gaps[k]) / n,
                  "p50_ms": statistics.median(gaps[k])}
                 for k in sorted(gaps, key=order.__getitem__)],
    }


def _name(ev: Any) -> str:
    name = EventType.Name(ev.event_type).removeprefix("EVENT_TYPE_").lower()
    if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        name += f"({ev.activity_task_scheduled_event_attributes.activity_type.name})"
    return name


# ------------------------------------------------------------- CPU samples
class Sampler:
    """py-spy over this process, every thread, not pausing it."""

    def __init__(self) -> None:
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.out = Path(tempfile.mkstemp(prefix="parkgate-bench-spy-", suffix=".txt")[1])
        self.proc: subprocess.Popen[bytes] | None = None
        self.problem: str | None = None
        self.seconds = 0.0
        self._t0 = 0.0

    def start(self) -> None:
        if not os.path.exists(self.exe):
            self.problem = "py-spy is not installed (pip install 'parkgate[dev]')"
            return
        self.proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(os.getpid()), "--rate", str(RATE), "--gil",
             "--format", "raw", "--nonblocking", "-o", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)  # attached before the first measured call
        if self.proc.poll() is not None:
            err = (self.proc.stderr.read() if self.proc.stderr else b"").decode()[-300:]
            self.problem = f"py-spy could not sample this process: {err.strip()}"
            self.proc = None
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self._t0
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.problem = "py-spy did not stop"

    def summary(self, calls: int) -> dict[str, Any]:
        if self.problem is not None or not self.out.exists():
            return {"problem": self.problem or "no samples"}
        by_category: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        total = 0
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            total += n
            by_category[_category(stack)] += n
            leaves[_short(stack.rsplit(";", 1)[-1])] += n
        keep = os.environ.get("PARKGATE_BENCH_SPY_RAW")  # keep the raw stacks (a path prefix)
        if keep:
            shutil.move(str(self.out), f"{keep}-{os.getpid()}-{int(time.time())}.txt")
        else:
            self.out.unlink(missing_ok=True)
        per_sample_ms = 1000 / RATE
        return {
            "rate": RATE, "samples": total, "seconds": self.seconds,
            "cpu_ms_per_call": total * per_sample_ms / calls,
            "categories": [{"name": k, "share": v / total, "ms_per_call":
                            v * per_sample_ms / calls}
                           for k, v in by_category.most_common()] if total else [],
            "hottest": [{"frame": k, "share": v / total} for k, v in leaves.most_common(12)]
            if total else [],
        }


def _category(stack: str) -> str:
    for name, markers in CATEGORIES:
        if any(m in stack for m in markers):
            return name
    return "other"


def _short(frame: str) -> str:
    """`fn (path/to/site-packages/pkg/mod.py:12)` → `fn (pkg/mod.py:12)`."""
    fn, _, where = frame.partition(" (")
    for marker in ("site-packages/", "/dispatcher/", "/workflows/", "/activities/",
                   "/bench/", "/lib/python"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{fn} ({where}" if where else fn


# ---------------------------------------------------------------- markdown
def markdown(profile: dict[str, Any]) -> str:
    """One section per profiled phase: the breakdown as Markdown."""
    out = [f"### Profile: {profile['section']} ({profile['calls']} calls, "
           f"{profile['wall_ms_per_call']:.1f} ms wall per call under the profiler)", ""]
    d = profile["durable"]
    counted = ", ".join(f"{v:g} {k}" for k, v in sorted(d["per_call"].items()))
    acts = ", ".join(f"{k} {v:g}" for k, v in sorted(d["activities_per_call"].items()))
    out += [f"Durable steps per call: {counted or 'none'}; regular activities by type: "
            f"{acts or 'none'}; first → last history event p50 "
            f"{_ms(d['history_ms_p50'])} ms.", ""]
    out += ["| between history events | per call | p50 ms |", "|---|---:|---:|"]
    out += [f"| {g['between']} | {g['per_call']:g} | {g['p50_ms']:.1f} |" for g in d["gaps"]]
    out += ["", "| per call | count | ms |", "|---|---:|---:|"]
    for title, key in (("store", "store_methods"), ("store txn", "store_transactions"),
                       ("codec", "codec"), ("converter", "payload_converter"),
                       ("Temporal RPC", "temporal_rpcs")):
        out += [f"| {title}: {r['name']} | {r['per_call']:.2f} | {r['ms_per_call']:.2f} |"
                for r in profile[key]]
    if profile.get("timeline"):
        out += ["", "One call (the last measured), on one clock: this process's store calls "
                "and Temporal RPCs (start, duration) and its workflow's history events.", "",
                "| at ms | took ms | step |", "|---:|---:|---|"]
        out += [f"| {r['at_ms']:.1f} | {r['ms']:.1f} | {r['what']} |"
                for r in profile["timeline"]]
    cpu = profile["cpu"]
    out.append("")
    if "problem" in cpu:
        out.append(f"CPU samples: {cpu['problem']}")
        return "\n".join(out)
    out += [f"CPU of this process (agent client + API + worker, every thread): "
            f"{cpu['cpu_ms_per_call']:.1f} ms per call ({cpu['samples']} samples at "
            f"{cpu['rate']}/s).", "", "| CPU by what the stack is in | share | ms/call |",
            "|---|---:|---:|"]
    out += [f"| {c['name']} | {c['share']:.0%} | {c['ms_per_call']:.1f} |"
            for c in cpu["categories"]]
    out += ["", "| hottest frames (self) | share |", "|---|---:|"]
    out += [f"| `{h['frame']}` | {h['share']:.1%} |" for h in cpu["hottest"]]
    return "\n".join(out)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"

