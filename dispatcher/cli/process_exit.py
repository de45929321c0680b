"""How the `parkgate` process ends once a command is done.

A process that started the Temporal SDK's runtime (any command that connected
to Temporal: `cancel`, `decide`, `worker`, `serve`...) keeps that runtime's
Rust threads until the interpreter tears down, and one of them can still call
into Python while CPython finalizes: the process then dies of SIGABRT
("PyGILState_Release: thread state ... must be current when releasing") after
the command had finished and printed its answer (temporalio/sdk-python#300,
open; seen here as `parkgate cancel` exiting -6 in the README test). The
command's own work (clients closed, rows committed, children stopped) is done
when it returns, so such a process skips the teardown: logging and the
standard streams are flushed, then `os._exit` with the command's code. A
process that never started the runtime exits the ordinary way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def temporal_runtime_started() -> bool:
    """Whether this process created the Temporal SDK's default runtime."""
    runtime = sys.modules.get("temporalio.runtime")
    if runtime is None:
        return False
    ref = getattr(runtime, "_runtime_ref", None)
    # An SDK that keeps it elsewhere: assume the runtime may be running.
    return getattr(ref, "_default_runtime", True) is not None


def exit_code_of(exc: SystemExit) -> int:
    """The process exit status `sys.exit(...)` would give for `exc`."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    sys.stderr.write(f"{exc.code}\n")
    return 1


def finish(code: int) -> NoReturn:
    """End the process with `code` (see the module docstring)."""
    if not temporal_runtime_started():
        sys.exit(code)
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with `code` without CPython's teardown, once logging and
    the standard streams (a closed one too) are flushed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
