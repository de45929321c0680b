"""parkgate.cli.process_exit: a process that started the Temporal runtime ends
with its command's code and its output flushed, without the interpreter
teardown that can abort it (temporalio/sdk-python#300); others exit normally."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from parkgate.cli.process_exit import exit_code_of

SCRIPT = textwrap.dedent(
    """
    import atexit, sys
    from parkgate.cli.process_exit import finish, temporal_runtime_started
    if sys.argv[1] == "runtime":
        from temporalio.runtime import Runtime
        Runtime.default()
    atexit.register(lambda: print("teardown ran"))
    print("started" if temporal_runtime_started() else "no runtime", end="")
    sys.stderr.write("partial line")
    finish(int(sys.argv[2]))
    """
)


def run(mode: str, code: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode, str(code)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("code", [0, 3])
def test_after_the_runtime_started_the_code_and_output_survive_without_teardown(code: int) -> None:
    done = run("runtime", code)
    assert done.returncode == code, done
    assert done.stdout == "started", done.stdout  # flushed, though unterminated
    assert done.stderr == "partial line"
    # No interpreter teardown: atexit handlers (and the runtime's threads
    # calling into a finalizing interpreter) never run.
    assert "teardown ran" not in done.stdout


def test_without_the_runtime_the_process_exits_the_ordinary_way() -> None:
    done = run("plain", 2)
    assert done.returncode == 2, done
    assert done.stdout == "no runtimeteardown ran\n"


def test_exit_codes_as_sys_exit_gives_them() -> None:
    assert exit_code_of(SystemExit()) == 0
    assert exit_code_of(SystemExit(None)) == 0
    assert exit_code_of(SystemExit(5)) == 5
    assert exit_code_of(SystemExit("a message")) == 1
