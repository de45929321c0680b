"""Execution: run an already classified (and, if needed, approved) call.

``Executor.execute`` runs it — fresh instance, ToolContext, timeout,
cancellation, after-hooks, budget record, truncation for the model,
tool.called / tool.completed / tool.failed events. It never re-classifies
the call itself; a composed tool's sub-calls are classified and run by the
`SubCallRunner` it installs as the tool's registry (subcall_runner.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from parkgate.calls.events import EventType, ToolEvent
from parkgate.context import ToolContext, current_call, install_open_audit
from parkgate.errors import ToolError
from parkgate.models import (
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolResultBlock,
    tool_timeout,
    utcnow,
)
from parkgate.pipeline.classification import Classifier
from parkgate.pipeline.subcall_runner import (
    Approver,
    Emit,
    SubCallGate,
    SubCallParked,
    SubCallRunner,
)
from parkgate.rules.hooks import hook_name, maybe_await
from parkgate.sandbox.paths import file_tool_limits
from parkgate.truncation import truncate_text
from parkgate.verdicts import PreparedCall, ToolRun
from parkgate.workspaces.diffing import summarize_input
from parkgate.workspaces.files import WorkspaceFileAPI, resolve_root

log = logging.getLogger("parkgate.pipeline")

GENERIC_FAILURE = "Tool '{name}' failed with an internal error; details are in the server log."


class Executor(Classifier):
    """The run half of a `Pipeline`; over Classifier because a composed tool's
    sub-calls are classified as they are asked for."""

    def timeout_for(self, definition: ToolDefinition) -> float:
        return tool_timeout(
            definition,
            default_seconds=self.limits.default_timeout_seconds,
            execute_seconds=self.limits.execute_timeout_seconds,
        )

    def event(self, prepared: PreparedCall, type_: EventType, **fields: Any) -> ToolEvent:
        """A ToolEvent about ``prepared`` (tagged with its parent for sub-calls)."""
        return ToolEvent(
            type=type_,
            session_id=prepared.session.session_id,
            turn_id=prepared.session.turn_id,
            tool_use_id=prepared.call.id,
            tool_name=prepared.call.name,
            side_effects=prepared.definition.side_effects,
            parent_tool_use_id=prepared.parent_tool_use_id,
            **fields,
        )

    async def execute(
        self,
        prepared: PreparedCall,
        *,
        cancel_event: asyncio.Event | None = None,
        emit: Emit | None = None,
        approver: Approver | SubCallGate | None = None,
    ) -> ToolRun:
        """Run a classified call; always returns a ToolRun (errors are data).

        The one exception: a composed tool whose sub-call waits for a decision
        through a `SubCallGate` raises SubCallParked (no final event: the call
        is not over, it resumes once decided)."""
        cancel_event = cancel_event if cancel_event is not None else asyncio.Event()
        definition = prepared.definition
        started_at = utcnow()
        t0 = time.monotonic()
        if emit is not None:
            await emit(
                self.event(
                    prepared,
                    "tool.called",
                    data={
                        "input_summary": summarize_input(prepared.call.input),
                        "rule": prepared.rule,
                        "input_hash": prepared.input_hash,
                        **({"approved_by": prepared.remembered_by,
                            "principal_id": prepared.remembered_principal}
                           if prepared.remembered_by else {}),
                    },
                )
            )
        output: ToolOutput | None = None
        error_class: ToolErrorClass | None = None
        message = ""
        abandoned = False
        try:
            tool = self.registry.create(definition.name)
        except Exception:
            log.exception("factory of %s failed", definition.name)
            error_class = ToolErrorClass.EXECUTION_ERROR
            message = GENERIC_FAILURE.format(name=definition.name)
        else:
            ctx = ToolContext(
                session_id=prepared.session.session_id,
                turn_id=prepared.session.turn_id,
                tool_use_id=prepared.call.id,
                workspace_path=resolve_root(prepared.session.workspace_path),
                cancel_event=cancel_event,
                logger=logging.LoggerAdapter(
                    logging.getLogger(f"parkgate.tools.{definition.name}"),
                    {"tool_use_id": prepared.call.id, "session_id": prepared.session.session_id},
                ),
                workspace_files=WorkspaceFileAPI(
                    prepared.session.workspace_path,
                    **file_tool_limits(self.limits.tool_hidden_paths),
                ),
                limits=self.limits,
                parent_tool_use_id=prepared.parent_tool_use_id,
                tool_name=definition.name,
                side_effects=definition.side_effects.value,
            )
            if definition.composed_of:
                ctx.registry = SubCallRunner(self, prepared, cancel_event, emit, approver)
            if cancel_event.is_set():
                await _cancel_stopped(tool, definition.name)  # spec §7: in every case
                error_class, message = (
                    ToolErrorClass.CANCELLED,
                    "Tool call cancelled before it started.",
                )
            else:
                output, error_class, message, abandoned = await self._run(
                    tool, prepared, ctx, cancel_event
                )
                if isinstance(approver, SubCallGate) and approver.parked is not None:
                    # Even if the tool caught the park and went on: nothing ran after it.
                    raise SubCallParked(approver.parked)
        run = self._to_run(prepared, output, error_class, message)
        run.started_at = started_at
        run.duration_ms = round((time.monotonic() - t0) * 1000, 3)
        run.metadata.update(
            {"rule": prepared.rule, "input_hash": prepared.input_hash, "abandoned": abandoned}
        )
        for hook in self.hooks:
            after = getattr(hook, "after", None)
            if after is None:
                continue
            try:
                replaced = await maybe_await(after(prepared, run))
            except Exception:
                log.exception("after-hook %s raised on %s", hook_name(hook), definition.name)
                continue
            if isinstance(replaced, ToolRun):
                run = replaced
        if self.budget is not None:
            try:
                self.budget.record(prepared, run)
            except Exception:
                log.exception("budget record raised on %s", definition.name)
        if emit is not None:
            await emit(self._final_event(prepared, run))
        return run

    async def _run(
        self, tool: Any, prepared: PreparedCall, ctx: ToolContext, cancel_event: asyncio.Event
    ) -> tuple[ToolOutput | None, ToolErrorClass | None, str, bool]:
        """Run under timeout and cancellation: (output, error_class, message, abandoned)."""
        name = prepared.definition.name
        timeout = self.timeout_for(prepared.definition)
        install_open_audit()
        token = current_call.set((name, prepared.call.id))
        try:  # the task copies the context, so opens inside the tool are attributed
            task: asyncio.Task[ToolOutput] = asyncio.create_task(
                _invoke(tool, dict(prepared.call.input), ctx)
            )
        finally:
            current_call.reset(token)
        waiter = asyncio.create_task(cancel_event.wait())
        try:
            done, _ = await asyncio.wait(
                {task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            # Our caller was cancelled (e.g. a Temporal activity): stop the tool, then go.
            cancel_event.set()
            await self._stop(tool, task, name)
            raise
        finally:
            waiter.cancel()
        stopped: ToolErrorClass | None = None
        abandoned = False
        if task not in done:
            stopped = ToolErrorClass.CANCELLED if cancel_event.is_set() else ToolErrorClass.TIMEOUT
            cancel_event.set()  # tools polling the event stop as well
            abandoned = await self._stop(tool, task, name)
        elif cancel_event.is_set():
            # Dispatcher spec §7: a cancellation sets cancel_event AND calls
            # tool.cancel(), also when the tool already stopped on the event
            # (cancel() then returns False: nothing left to stop).
            await _cancel_stopped(tool, name)
            if not _succeeded(task):
                stopped = ToolErrorClass.CANCELLED  # the tool noticed the event and stopped
        stop_message = (
            "Tool call cancelled."
            if stopped == ToolErrorClass.CANCELLED
            else f"Tool exceeded {timeout:g}s wall time limit."
        )
        if abandoned or not task.done() or task.cancelled():
            assert stopped is not None
            return None, stopped, stop_message + " The tool did not stop in time.", True
        exc = task.exception()
        if exc is None:
            output = task.result()
            if not isinstance(output, ToolOutput):
                log.error("tool %s returned %s instead of ToolOutput", name, type(output).__name__)
                return (
                    None,
                    ToolErrorClass.EXECUTION_ERROR,
                    GENERIC_FAILURE.format(name=name),
                    False,
                )
            if (stopped == ToolErrorClass.CANCELLED and output.success
                    and not prepared.definition.composed_of):
                # The tool finished its work before it saw the cancellation:
                # what it did stands, and the record must say so. (A composed
                # tool stays cancelled: its sub-calls carry their own records
                # of what ran and what was cancelled.)
                return output, None, "", False
            if stopped is not None:
                return output, stopped, stop_message, False
            if not output.success:
                return output, ToolErrorClass.EXECUTION_ERROR, "", False
            return output, None, "", False
        if isinstance(exc, SubCallParked) and stopped is None:
            raise exc
        if isinstance(exc, ToolError):
            cls_ = stopped or exc.error_class
            if stopped is not None:
                return None, cls_, stop_message, False
            text = exc.message if exc.is_user_visible else GENERIC_FAILURE.format(name=name)
            return None, cls_, text, False
        if stopped is not None:
            return None, stopped, stop_message, False
        log.error("tool %s raised an unexpected exception", name, exc_info=exc)
        return None, ToolErrorClass.EXECUTION_ERROR, GENERIC_FAILURE.format(name=name), False

    async def _stop(self, tool: Any, task: asyncio.Task[ToolOutput], name: str) -> bool:
        """Ask the tool to cancel and wait up to the grace period; True if abandoned."""
        canceller = asyncio.create_task(_call_cancel(tool, name))
        _, pending = await asyncio.wait({task}, timeout=self.limits.cancel_grace_seconds)
        if pending:
            log.warning(
                "tool %s did not stop within %ss of cancellation; abandoning it",
                name,
                self.limits.cancel_grace_seconds,
            )
            task.cancel()
            return True
        if not canceller.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(canceller, timeout=1.0)
        return False

    def _to_run(
        self,
        prepared: PreparedCall,
        output: ToolOutput | None,
        error_class: ToolErrorClass | None,
        message: str,
    ) -> ToolRun:
        blocks: list[Any] = []
        if message:
            blocks.append(TextBlock(text=message))
        if output is not None:
            for block in output.content:
                if isinstance(block, TextBlock):
                    blocks.append(TextBlock(text=truncate_text(block.text, self.limits.text_chars)))
                else:
                    blocks.append(block)
        if not blocks:
            blocks.append(
                TextBlock(
                    text="(no output)"
                    if error_class is None
                    else f"Tool '{prepared.call.name}' failed."
                )
            )
        result = ToolResultBlock(
            tool_use_id=prepared.call.id,
            content=blocks,
            is_error=error_class is not None,
            error_class=error_class,
        )
        return ToolRun(result=result, error_class=error_class, output=output)

    def _final_event(self, prepared: PreparedCall, run: ToolRun) -> ToolEvent:
        data: dict[str, Any] = {"duration_ms": run.duration_ms}
        if run.output is not None:
            data["files_modified"] = run.output.files_modified
            data["command_executed"] = run.output.command_executed
        if run.error_class is None:
            return self.event(prepared, "tool.completed", data=data)
        if run.error_class in (ToolErrorClass.CANCELLED, ToolErrorClass.TIMEOUT) and run.output:
            partial = "\n".join(b.text for b in run.output.content if isinstance(b, TextBlock))
            data["partial_output"] = truncate_text(partial, 4000)
        return self.event(
            prepared,
            "tool.failed",
            error_class=run.error_class,
            message=truncate_text(run.result.text, 2000),
            data=data,
        )


async def _invoke(tool: Any, tool_input: dict[str, Any], ctx: ToolContext) -> Any:
    """Call tool.execute inside the task, so even a sync or raising call is contained."""
    return await maybe_await(tool.execute(tool_input, ctx))


def _succeeded(task: asyncio.Task[ToolOutput]) -> bool:
    if task.cancelled() or task.exception() is not None:
        return False
    result = task.result()
    return isinstance(result, ToolOutput) and result.success


async def _call_cancel(tool: Any, name: str) -> None:
    try:
        await tool.cancel()
    except Exception:
        log.exception("cancel() of tool %s raised", name)


async def _cancel_stopped(tool: Any, name: str) -> None:
    """tool.cancel() for a tool that is not running (any more): bounded, never raises."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(_call_cancel(tool, name), timeout=1.0)
