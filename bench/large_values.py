"""`python -m bench.large_values`: large values through the real HTTP API.

The whole stack is real (bench.stack): dev server, migrated SQLite history,
the production worker and the app in uvicorn. It times, per repetition:
- POST of a 1 MiB write_file (the largest input the API accepts) with
  `?wait=30` until the 200 with the finished call;
- POST of a read_file of a 10 MB file (the model gets 12 000 characters);
- GET of that call's whole output (`/output?format=text`, 10 MB), hash-checked;
and prints the largest event of the write's Temporal history.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from bench.stack import in_process_worker, open_stack, serve_api


def _content(size: int, tag: int) -> str:
    overhead = len('{"path":"big-00.txt","content":""}')
    return (f"{tag:02d}" + "0123456789abcdef" * (size // 16))[: size - overhead]


async def run(reps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pg-bench-large-") as tmp:
        async with open_stack(Path(tmp), database_url=None, temporal_memory=False) as stack:
            settings = stack.settings(stack.task_queue("large"))
            worker, pipeline = in_process_worker(stack, settings)
            line = "the quick brown fox jumps over the lazy dog 0123456789\n"
            text = line * (10_000_000 // len(line) + 1)
            (stack.workspace / "huge.log").write_text(text)
            want = hashlib.sha256(text.encode()).hexdigest()
            rows: dict[str, list[float]] = {"POST 1 MiB write_file": [],
                                            "POST read_file of 10 MB": [],
                                            "GET 10 MB output": []}
            async with worker, serve_api(stack, settings, pipeline.registry) as api:
                await api.register("large", stack.workspace)
                largest = 0
                for i in range(reps):
                    body = {"id": f"w{i}", "name": "write_file",
                            "input": {"path": f"big-{i:02d}.txt",
                                      "content": _content(1024 * 1024, i)}}
                    t0 = time.perf_counter()
                    r = await api.http.post("/v1/sessions/large/turns/t/tool-calls",
                                            params={"wait": 30}, json=body)
                    rows["POST 1 MiB write_file"].append(time.perf_counter() - t0)
                    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
                    history = await stack.client.get_workflow_handle(
                        f"call/large/w{i}").fetch_history()
                    largest = max(largest, *(e.ByteSize() for e in history.events))
                    t0 = time.perf_counter()
                    r = await api.http.post("/v1/sessions/large/turns/t/tool-calls",
                                            params={"wait": 30},
                                            json={"id": f"r{i}", "name": "read_file",
                                                  "input": {"path": "huge.log"}})
                    rows["POST read_file of 10 MB"].append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
                    t0 = time.perf_counter()
                    r = await api.http.get(f"/v1/sessions/large/tool-calls/r{i}/output")
                    rows["GET 10 MB output"].append(time.perf_counter() - t0)
                    assert hashlib.sha256(r.content).hexdigest() == want
    print(f"{'operation':<26} {'n':>3} {'p50 ms':>8} {'max ms':>8}")
    for name, values in rows.items():
        print(f"{name:<26} {len(values):>3} {statistics.median(values) * 1000:>8.1f} "
              f"{max(values) * 1000:>8.1f}")
    print(f"largest Temporal history event of a 1 MiB write: {largest} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    asyncio.run(run(parser.parse_args().reps))


if __name__ == "__main__":
    main()
