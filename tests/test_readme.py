"""Every `bash` and `python` block of README.md runs, as written, against one real
`parkgate serve` (a throwaway stack: its own data directory, HOME and port, as
the README's "Where state lives" shows), in document order.

- A block after `<!-- not-run: why -->` is skipped (it starts the stack, runs
  the whole suite, or needs a model).
- A block after `<!-- expected-output -->` is what the python block before it
  must print.
- `# -> ... "status": "X"` comments in a bash block are checked against what
  the block printed.
- Two things differ from the reader's terminal, and only these: the stack's
  port replaces 8420, and lines that export a pasted value (`export KEY=pgk_...`)
  take the keys this stack printed.

bash blocks share one shell state (exports carry over); each runs in the
repository root (the README's `.venv/bin/parkgate`), python blocks in a
scratch directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from parkgate.runtime.ports import free_port
from tests.cli.conftest import parkgate_argv
from tests.fixtures.serve import Serve

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
README_PORT = "127.0.0.1:8420"
#: `export NAME=pgk_...`: a value the reader pastes from the banner.
PASTED = re.compile(r"^export (\w+)=\S*\.\.\.(\s|$)")
STATUS = re.compile(r'"status":\s*"(\w+)"')


@dataclass
class Block:
    line: int
    lang: str
    body: str
    marker: str | None  # the HTML comment right before it, if any


def readme_blocks(text: str) -> list[Block]:
    """Fenced blocks (also indented ones, in list items) with their marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    marker: str | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            indent = len(lines[i]) - len(lines[i].lstrip())
            start, lang, body = i + 1, stripped[3:].strip(), []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            blocks.append(Block(start, lang, "\n".join(body) + "\n", marker))
            marker = None
        elif stripped.startswith("<!--"):
            marker = stripped
        elif stripped:
            marker = None
        i += 1
    return blocks


def skipped(block: Block) -> bool:
    return block.marker is not None and block.marker.startswith("<!-- not-run")


def test_the_readme_blocks_are_found_and_marked() -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text())
    runnable = [b for b in blocks if b.lang in ("bash", "python") and not skipped(b)]
    assert sum(b.lang == "bash" for b in runnable) >= 7
    assert sum(b.lang == "python" for b in runnable) >= 3
    for block in blocks:
        if block.marker and block.marker.startswith("<!-- not-run"):
            assert re.match(r"<!-- not-run: \S.* -->", block.marker), block  # says why
    expected = [b for b in blocks if b.marker == "<!-- expected-output -->"]
    assert expected and all(b.lang == "" for b in expected)


def test_readme_pytest_commands_install_what_they_need() -> None:
    """A block that runs pytest from the venv installs the dev extras first: the
    README's own install (`pip install .`) has no pytest, and a reader who copies
    the quick stage after it got `No module named pytest`."""
    blocks = readme_blocks((ROOT / "README.md").read_text())
    runs_pytest = [b for b in blocks if b.lang == "bash" and "-m pytest" in b.body]
    assert runs_pytest
    for block in runs_pytest:
        before = block.body.split("-m pytest", 1)[0]
        assert re.search(r"pip install -e '\.\[dev\]'", before), block


def _statuses(body: str) -> list[str]:
    """Statuses the block's `# ->` comments promise."""
    return [m for line in body.splitlines() if line.lstrip().startswith("# ->")
            for m in STATUS.findall(line)]


@pytest.mark.slow
def test_every_readme_snippet_runs_against_a_real_stack(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env.update(HOME=str(home), PARKGATE_DATA_DIR=str(tmp_path / "data"),
               PYTHONUNBUFFERED="1", COLUMNS="200")
    port = free_port()
    stack = Serve(env, port, tmp_path / "serve.log")
    try:
        urls = stack.wait_ready()
        approver = re.search(r"PARKGATE_APPROVER_KEY=(\S+)", stack.text())
        assert approver is not None, stack.text()
        env.update(KEY=urls["key"], HUMAN=approver.group(1))
        # Short default key names: they show in every listing and decision.
        assert re.search(r"Key name\s+serve-[0-9a-f]{4}\s", stack.text()), stack.text()
        _run_blocks(env, port, tmp_path)
        _approver_day(env, urls["api"], urls["key"])
        assert stack.interrupt() == 0, stack.text()
    finally:
        if stack.proc.poll() is None:
            stack.kill()


def _run_blocks(env: dict[str, str], port: int, tmp_path: Path) -> None:
    state = tmp_path / "shell-state.sh"
    state.write_text("")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    last_output: str | None = None
    for block in readme_blocks((ROOT / "README.md").read_text()):
        where = f"README.md line {block.line}"
        if block.marker == "<!-- expected-output -->":
            assert last_output == block.body, f"{where}: printed\n{last_output}"
            continue
        if block.lang not in ("bash", "python") or skipped(block):
            continue
        body = block.body.replace(README_PORT, f"127.0.0.1:{port}")
        if block.lang == "bash":
            lines = [f': "${{{m.group(1)}:?}}"' if (m := PASTED.match(line)) else line
                     for line in body.splitlines()]
            script = (f"set -eo pipefail\nsource {state}\n" + "\n".join(lines)
                      + f"\nexport -p > {state}\n")
            run = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, f"{where}: exit {run.returncode}\n{run.stdout}{run.stderr}"
            squeezed = re.sub(r"\s+", "", run.stdout)
            for status in _statuses(body):
                assert f'"status":"{status}"' in squeezed, f"{where}: no {status}\n{run.stdout}"
            last_output = run.stdout
        else:
            path = scratch / f"readme_{block.line}.py"
            path.write_text(body)
            run = subprocess.run([sys.executable, str(path)], cwd=scratch, env=env,
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, f"{where}: exit {run.returncode}\n{run.stderr}"
            last_output = run.stdout
    assert (Path(env["HOME"]) / "parkgate-demo" / "hello.txt").read_text() == (
        "hello from parkgate\n")


def _approver_day(env: dict[str, str], api: str, key: str) -> None:
    """On the same stack: a parked call's request id in `calls list`, and
    `cancel` saying what it cancelled."""
    import httpx

    def cli(*args: str) -> str:
        run = subprocess.run([*parkgate_argv(), *args], env=env, capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 0, f"{args}: {run.stderr}"
        return run.stdout

    headers = {"Authorization": f"Bearer {key}"}
    body = {"id": "call-2", "name": "write_file", "input": {"path": "b.txt", "content": "b"}}
    parked = httpx.post(f"{api}/v1/sessions/demo/turns/turn-2/tool-calls", json=body,
                        headers=headers, timeout=30).json()
    deadline = time.monotonic() + 30
    while parked["status"] != "parked" and time.monotonic() < deadline:
        time.sleep(0.1)  # a long-poll would wait its whole `wait` on a parked call
        parked = httpx.get(f"{api}/v1/sessions/demo/tool-calls/call-2", headers=headers,
                           timeout=30).json()
    assert parked["status"] == "parked", parked
    listed = json.loads(cli("calls", "list", "--status", "parked", "-o", "json"))["calls"]
    assert [(c["tool_use_id"], c["request_id"]) for c in listed] == [
        ("call-2", parked["request_id"])]
    assert parked["request_id"] in cli("calls", "list", "--status", "parked")
    assert cli("cancel", "demo").strip() == "cancelled 1 parked call of session demo"
