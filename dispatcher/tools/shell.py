"""Built-in shell tool: one command in the workspace, in its own process group.

The child starts through parkgate.sandbox.launch (allowlisted environment; on Linux
a namespace sandbox hiding the data directory and secret files).

Cancellation (cancel_event or cancel()) sends SIGTERM to the whole group, then
SIGKILL after a grace period (3 s by default), and returns what the command had
printed so far with success=False.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import unicodedata
from typing import Any

from parkgate.context import ToolContext
from parkgate.errors import ToolExecutionError, ToolValidationError
from parkgate.models import SideEffects, TextBlock, ToolDefinition, ToolOutput
from parkgate.rules.shell_lex import is_control
from parkgate.rules.shellwords import parse
from parkgate.sandbox.launch import spawn_tool_process
from parkgate.tools.base import BaseTool
from parkgate.truncation import Limits, truncate_text
from parkgate.workspaces.diffing import ImpactPreview
from parkgate.workspaces.files import WorkspaceFileAPI

_CHAR_NAMES = {
    "\r": "carriage return", "\x0b": "vertical tab", "\x0c": "form feed", "\x1b": "escape",
    "\x7f": "delete", "\x08": "backspace", "\x07": "bell",
}


def describe_char(ch: str) -> str:
    """``U+000D (carriage return)``: a character the model can find and remove."""
    name = _CHAR_NAMES.get(ch) or unicodedata.name(ch, "").lower() or "control character"
    return f"U+{ord(ch):04X} ({name})"


def shell_guard(command: Any, max_chars: int) -> list[str]:
    """Reasons to refuse ``command`` before it ever reaches a shell ([] if fine)."""
    if not isinstance(command, str):
        return ["$.command: must be a string"]
    problems: list[str] = []
    if not command.strip():
        problems.append("$.command: must not be empty")
    if "\x00" in command:
        problems.append("$.command: contains a NUL byte")
    if "\n" in command:
        # One command line only (OpenRath shell rules): /bin/sh runs each line as
        # its own command, so a newline could carry a second command past a
        # reviewer. A script goes in a file and runs as one command.
        problems.append(
            "$.command: contains a line break; multiline commands are rejected "
            "(write the script to a file with write_file, then run `sh script.sh`, "
            "or join commands with `&&` on one line)"
        )
    odd = next(((i, c) for i, c in enumerate(command) if c not in "\x00\n" and is_control(c)),
               None)
    if odd is not None:
        at, ch = odd
        problems.append(
            f"$.command: contains the control character {describe_char(ch)} at position {at}; "
            "only printable characters and tab are allowed, because /bin/sh reads such "
            "characters differently from the people and rules that approve commands (to "
            "produce such bytes, use printf escapes such as printf '\\r', or a file)"
        )
    if len(command) > max_chars:
        problems.append(
            f"$.command: is {len(command)} characters, over the {max_chars}-character limit"
        )
    return problems


def command_notes(command: str) -> list[str]:
    """What the approver should know about how rules read ``command``: programs
    named by a path (matched by their basename) and why a line cannot be read
    with certainty (then no allow rule applies to it)."""
    parsed = parse(command)
    notes = [
        f"runs `{c.program}` (rules see it as `{c.name}`)"
        for c in parsed.commands if c.has_path and not c.nested
    ]
    if not parsed.certain:
        notes.append(
            "parkgate cannot read this command with certainty ("
            + ", ".join(parsed.reasons) + "): no allow rule applies to it"
        )
    return notes


class _Capture:
    """Accumulates one stream, keeping at most ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    async def pump(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            room = self.cap - len(self.data)
            if room > 0:
                self.data.extend(chunk[:room])
            self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class ShellTool(BaseTool):
    definition = ToolDefinition(
        name="shell",
        description=(
            "Run a shell command (/bin/sh) in the workspace directory. Returns exit code, "
            "stdout and stderr."
        ),
        input_schema={
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line."}},
            "required": ["command"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.EXECUTE,
    )

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._kill_after = 3.0
        self._terminating: asyncio.Task[None] | None = None
        self._cancelled = False

    def check_input(self, input: dict[str, Any], limits: Limits) -> list[str]:
        return shell_guard(input.get("command"), limits.shell_max_command_chars)

    def preview(self, input: dict[str, Any], files: WorkspaceFileAPI) -> ImpactPreview | None:
        return ImpactPreview(
            projected_impact=[
                f"will run `{input['command']}` in {files.workspace_root}",
                *command_notes(input["command"]),
            ]
        )

    # ------------------------------------------------------------------ run
    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        command = input["command"]
        problems = self.check_input(input, context.limits)
        if problems:
            raise ToolValidationError("; ".join(problems), validation_errors=problems)
        self.check_cancelled(context)
        self._kill_after = context.limits.shell_kill_after_seconds
        started = time.monotonic()
        try:
            proc = await spawn_tool_process(
                ["/bin/sh", "-c", command],
                context,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ToolExecutionError(f"Could not start the shell: {exc.strerror}") from None
        self._proc = proc
        out = _Capture(context.limits.shell_capture_bytes)
        err = _Capture(context.limits.shell_capture_bytes)
        readers = [
            asyncio.create_task(out.pump(proc.stdout)),
            asyncio.create_task(err.pump(proc.stderr)),
        ]
        try:
            # Poll the exit status: proc.wait() would also wait for pipes that
            # background children may hold open.
            while proc.returncode is None and not context.cancel_event.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(context.cancel_event.wait(), timeout=0.05)
            if proc.returncode is None:
                await self.cancel()
            exit_code = await self._exit_status()
            # Background children may keep the pipes open: give them a moment, then
            # clean up the whole group.
            _, pending = await asyncio.wait(readers, timeout=1.0)
            if pending:
                self._signal_group(signal.SIGKILL)
                _, pending = await asyncio.wait(readers, timeout=1.0)
                for task in pending:
                    task.cancel()
        finally:
            if proc.returncode is None:  # abandoned by the pipeline: never leak the group
                self._signal_group(signal.SIGKILL)
            for task in readers:
                if not task.done():
                    task.cancel()
        return self._output(
            command, exit_code, out, err, time.monotonic() - started, context.limits
        )

    def _output(
        self,
        command: str,
        exit_code: int,
        out: _Capture,
        err: _Capture,
        elapsed: float,
        limits: Limits,
    ) -> ToolOutput:
        stdout, stderr = out.text(), err.text()
        err_budget = min(len(stderr), limits.text_chars // 4)
        shown_out = truncate_text(stdout, max(1, limits.text_chars - err_budget))
        shown_err = truncate_text(stderr, max(1, err_budget)) if stderr else ""
        head = (
            f"Command cancelled (exit code {exit_code}); partial output below."
            if self._cancelled
            else f"Exit code: {exit_code}"
        )
        parts = [head]
        if stdout:
            parts.append(f"--- stdout ---\n{shown_out}")
        if stderr:
            parts.append(f"--- stderr ---\n{shown_err}")
        if not stdout and not stderr:
            parts.append("(no output)")
        return ToolOutput(
            content=[TextBlock(text="\n".join(parts))],
            success=exit_code == 0 and not self._cancelled,
            metadata={
                "exit_code": exit_code,
                "stdout": stdout,
                "stderr": stderr,
                "stdout_dropped_bytes": out.dropped,
                "stderr_dropped_bytes": err.dropped,
                "cancelled": self._cancelled,
                "elapsed_ms": round(elapsed * 1000, 1),
            },
            command_executed=command,
        )

    # --------------------------------------------------------------- cancel
    def _signal_group(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    async def _exit_status(self, timeout: float | None = None) -> int:
        """The shell's exit code once it has exited (polled; None-safe within timeout)."""
        proc = self._proc
        assert proc is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while proc.returncode is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            await asyncio.sleep(0.02)
        return proc.returncode

    async def _terminate(self) -> None:
        self._signal_group(signal.SIGTERM)
        try:
            await self._exit_status(timeout=self._kill_after)
        except TimeoutError:
            self._signal_group(signal.SIGKILL)
            await self._exit_status(timeout=10)

    async def cancel(self) -> bool:
        """SIGTERM the process group, SIGKILL after the grace period. Idempotent."""
        if self._proc is None or (self._proc.returncode is not None and not self._cancelled):
            return False
        self._cancelled = True
        if self._terminating is None:
            self._terminating = asyncio.create_task(self._terminate())
        await asyncio.shield(self._terminating)
        return True
