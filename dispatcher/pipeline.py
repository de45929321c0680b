"""The classify/execute spine.

``classify`` is pure decision — registry lookup, input validation, workspace
scope, before-hooks, budget pre-check, policy — and returns Execute | Deny |
NeedsApproval without side effects or events. ``execute`` runs an already
classified (and, if needed, approved) call: fresh instance, ToolContext,
timeout, cancellation, after-hooks, budget record, truncation for the model,
tool.called / tool.completed / tool.failed events. It never re-classifies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from parkgate.budget import Budget
from parkgate.context import ToolContext, current_call, install_open_audit
from parkgate.diffing import ImpactPreview, generic_preview, summarize_input
from parkgate.errors import ToolError
from parkgate.events import EventType, ToolEvent
from parkgate.hooks import HookHalt, hook_name, maybe_await
from parkgate.models import (
    Session,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolResultBlock,
    ToolUseBlock,
    input_hash,
    tool_timeout,
    utcnow,
)
from parkgate.policy import ConfirmationPolicy
from parkgate.registry import ToolRegistry
from parkgate.schema import validate_input
from parkgate.truncation import Limits, truncate_text
from parkgate.verdicts import (
    ApprovalInfo,
    Deny,
    Execute,
    NeedsApproval,
    PreparedCall,
    ToolRun,
    Verdict,
)
from parkgate.workspace import WorkspaceFileAPI, resolve_root

log = logging.getLogger("parkgate.pipeline")

Emit = Callable[[ToolEvent], Awaitable[None]]
#: Decides a sub-call's NeedsApproval (non-atomic composed tools): the prepared
#: call to run (possibly edited) or a Deny.
Approver = Callable[[NeedsApproval], Awaitable["PreparedCall | Deny"]]

GENERIC_FAILURE = "Tool '{name}' failed with an internal error; details are in the server log."


def deny_result(
    tool_use_id: str,
    error_class: ToolErrorClass,
    message: str,
    *,
    rule: str | None = None,
    event_type: EventType = "tool.failed",
    definition: ToolDefinition | None = None,
) -> Deny:
    """A Deny verdict carrying the error result the model will see."""
    return Deny(
        result=ToolResultBlock(
            tool_use_id=tool_use_id,
            content=[TextBlock(text=message)],
            is_error=True,
            error_class=error_class,
        ),
        error_class=error_class,
        rule=rule,
        event_type="tool.input_invalid" if event_type == "tool.input_invalid" else "tool.failed",
        side_effects=definition.side_effects if definition else None,
    )


def deny_event(
    call: ToolUseBlock, session: Session, deny: Deny, *, parent_tool_use_id: str | None = None
) -> ToolEvent:
    """The event to record for a Deny (tool.input_invalid or tool.failed)."""
    return ToolEvent(
        type=deny.event_type,
        session_id=session.session_id,
        turn_id=session.turn_id,
        tool_use_id=call.id,
        tool_name=call.name,
        side_effects=deny.side_effects,
        error_class=deny.error_class,
        message=deny.result.text,
        parent_tool_use_id=parent_tool_use_id,
        data={"rule": deny.rule, "input_summary": summarize_input(call.input)},
    )


def run_from_deny(deny: Deny) -> ToolRun:
    """A ToolRun for a call that never ran."""
    return ToolRun(result=deny.result, error_class=deny.error_class, metadata={"rule": deny.rule})


class Pipeline:
    """Registry + policy + hooks + budget + limits: the dispatcher's decision and run logic."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: ConfirmationPolicy | None = None,
        *,
        hooks: Iterable[Any] = (),
        budget: Budget | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy or ConfirmationPolicy()
        self.hooks: Sequence[Any] = tuple(hooks)
        self.budget = budget
        self.limits = limits or Limits()

    # ================================================================ classify
    async def classify(
        self, call: ToolUseBlock, session: Session, *, parent_tool_use_id: str | None = None
    ) -> Verdict:
        """Decide what happens to ``call``: Execute | Deny | NeedsApproval. No side effects."""
        definition = self.registry.get(call.name)
        if definition is None or not self.registry.visible_to(definition, session):
            available = [d.name for d in self.registry.definitions_for(session)]
            return deny_result(
                call.id,
                ToolErrorClass.NOT_FOUND,
                f"Tool '{call.name}' not found. Available: [{', '.join(available)}]",
                rule="registry",
            )
        checked = self._check_input(call, session, definition)
        if isinstance(checked, Deny):
            return checked
        relpaths = checked
        for hook in self.hooks:
            before = getattr(hook, "before", None)
            if before is None:
                continue
            try:
                outcome = await maybe_await(before(call, session, definition))
            except Exception:
                log.exception("before-hook %s raised on %s", hook_name(hook), call.name)
                return deny_result(
                    call.id,
                    ToolErrorClass.EXECUTION_ERROR,
                    f"A before-hook failed on tool '{call.name}'; the call was not run.",
                    rule=f"hook:{hook_name(hook)}",
                    definition=definition,
                )
            if isinstance(outcome, HookHalt):
                return deny_result(
                    call.id,
                    outcome.error_class,
                    outcome.message,
                    rule=f"hook:{hook_name(hook)}",
                    definition=definition,
                )
            if isinstance(outcome, ToolUseBlock):
                if outcome.name != call.name:
                    return deny_result(
                        call.id,
                        ToolErrorClass.EXECUTION_ERROR,
                        f"A before-hook tried to change the tool of this call "
                        f"from '{call.name}' to '{outcome.name}'.",
                        rule=f"hook:{hook_name(hook)}",
                        definition=definition,
                    )
                call = ToolUseBlock(id=call.id, name=call.name, input=outcome.input)
                checked = self._check_input(call, session, definition)
                if isinstance(checked, Deny):
                    return checked
                relpaths = checked
        if self.budget is not None:
            try:
                reason = self.budget.check(call, session, definition)
            except Exception:
                log.exception("budget check raised on %s", call.name)
                reason = "Budget check failed"
            if reason:
                return deny_result(
                    call.id,
                    ToolErrorClass.PERMISSION_DENIED,
                    reason,
                    rule="budget",
                    definition=definition,
                )
        decision = self.policy.decide(definition, call.input, session, relative_paths=relpaths)
        prepared = PreparedCall(
            call=call,
            session=session,
            definition=definition,
            input_hash=input_hash(call.name, call.input),
            rule=decision.rule,
            parent_tool_use_id=parent_tool_use_id,
        )
        if decision.mode == "deny":
            return deny_result(
                call.id,
                ToolErrorClass.PERMISSION_DENIED,
                f"Permission denied: tool '{call.name}' is disabled by policy "
                f"(rule: {decision.rule})",
                rule=decision.rule,
                definition=definition,
            )
        if decision.mode == "auto":
            return Execute(prepared=prepared)
        preview = self.preview(definition, call.input, session)
        # Escalation people not already named (with named approvers they may decide).
        escalate_only = [n for n in decision.escalate_to if n not in decision.approvers] \
            if decision.approvers else []
        info = ApprovalInfo(
            request_id=uuid.uuid4().hex,
            tool_name=call.name,
            tool_use_id=call.id,
            input_summary=summarize_input(call.input),
            side_effects=definition.side_effects,
            rule=decision.rule,
            input_hash=prepared.input_hash,
            projected_impact=preview.projected_impact,
            diff=preview.diff,
            sub_tools=list(definition.composed_of or []) if definition.atomic else [],
            mode=decision.mode,
            files=preview.files,
            parent_tool_use_id=parent_tool_use_id,
            approvers=decision.approvers + escalate_only,
            quorum=decision.quorum,
            self_approval=decision.self_approval,
            remind_after_seconds=decision.remind_after_seconds,
            escalate_after_seconds=decision.escalate_after_seconds,
            escalate_to=escalate_only if decision.approvers else decision.escalate_to,
        )
        return NeedsApproval(prepared=prepared, info=info)

    def _check_input(
        self, call: ToolUseBlock, session: Session, definition: ToolDefinition
    ) -> dict[str, str] | Deny:
        """Validation, tool-specific guards and the workspace scope check."""
        errors = validate_input(
            definition.input_schema,
            call.input,
            max_bytes=self.limits.max_input_bytes,
            max_depth=self.limits.max_input_depth,
        )
        if not errors:
            try:
                checker = getattr(self.registry.create(call.name), "check_input", None)
                errors = list(checker(call.input, self.limits)) if checker else []
            except Exception:
                log.exception("check_input of %s raised", call.name)
                errors = ["$: the tool could not check this input"]
        if errors:
            text = f"Invalid input for tool '{call.name}':\n" + "\n".join(f"- {e}" for e in errors)
            return deny_result(
                call.id,
                ToolErrorClass.VALIDATION_ERROR,
                text,
                rule="schema",
                event_type="tool.input_invalid",
                definition=definition,
            )
        relpaths: dict[str, str] = {}
        if not definition.requires_workspace:
            return relpaths
        root = resolve_root(session.workspace_path)
        if not os.path.isdir(root):
            return deny_result(
                call.id,
                ToolErrorClass.PERMISSION_DENIED,
                f"Workspace '{session.workspace_path}' is not an existing directory",
                rule="workspace",
                definition=definition,
            )
        files = WorkspaceFileAPI(root)
        for field in definition.path_fields:
            value = call.input.get(field)
            if value is None:
                continue
            try:
                relpaths[field] = files.relative(value)
            except ToolError as exc:
                return deny_result(
                    call.id,
                    ToolErrorClass.PERMISSION_DENIED,
                    exc.message,
                    rule="workspace",
                    definition=definition,
                )
        return relpaths

    def preview(
        self, definition: ToolDefinition, tool_input: dict[str, Any], session: Session
    ) -> ImpactPreview:
        """Projected impact (and diff) of a call, computed read-only."""
        files = WorkspaceFileAPI(session.workspace_path)
        try:
            tool = self.registry.create(definition.name)
            method = getattr(tool, "preview", None)
            result = method(tool_input, files) if method else None
            if isinstance(result, ImpactPreview):
                return result
        except Exception:
            log.warning(
                "preview of %s failed; using the generic impact", definition.name, exc_info=True
            )
        return generic_preview(definition, tool_input, files)

    def revalidate(self, prepared: PreparedCall, new_input: dict[str, Any]) -> PreparedCall | Deny:
        """Approve-with-edits: validate and re-scope the edited input (new input_hash)."""
        call = ToolUseBlock(id=prepared.call.id, name=prepared.call.name, input=new_input)
        checked = self._check_input(call, prepared.session, prepared.definition)
        if isinstance(checked, Deny):
            return checked
        return prepared.model_copy(
            update={
                "call": call,
                "input_hash": input_hash(call.name, new_input),
                "rule": f"{prepared.rule} (approved with edits)",
            }
        )

    # ================================================================ execute
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
        approver: Approver | None = None,
    ) -> ToolRun:
        """Run a classified call; always returns a ToolRun (errors are data)."""
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
                workspace_files=WorkspaceFileAPI(prepared.session.workspace_path),
                limits=self.limits,
                parent_tool_use_id=prepared.parent_tool_use_id,
            )
            if definition.composed_of:
                ctx.registry = SubCalls(self, prepared, cancel_event, emit, approver)
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


class SubCalls:
    """``ToolContext.registry`` for a composed tool: runs its declared sub-tools.

    Each sub-call is classified (validated, scoped, policy-checked) and executed
    with the parent's cancel event; its events carry ``parent_tool_use_id`` and
    a distinct tool_use_id ``<parent>.<n>``. An atomic parent's approval covers
    sub-calls that would prompt (never those policy denies); a non-atomic
    parent sends them to ``approver`` (or refuses them when there is none).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        parent: PreparedCall,
        cancel_event: asyncio.Event,
        emit: Emit | None,
        approver: Approver | None,
    ) -> None:
        self.pipeline = pipeline
        self.parent = parent
        self.cancel_event = cancel_event
        self.emit = emit
        self.approver = approver
        self._seq = 0

    async def _deny(self, call: ToolUseBlock, deny: Deny) -> ToolRun:
        if self.emit is not None:
            await self.emit(
                deny_event(call, self.parent.session, deny, parent_tool_use_id=self.parent.call.id)
            )
        return run_from_deny(deny)

    async def execute(self, name: str, input: dict[str, Any]) -> ToolRun:
        self._seq += 1
        parent_def = self.parent.definition
        call = ToolUseBlock(id=f"{self.parent.call.id}.{self._seq}", name=name, input=input)
        if name not in (parent_def.composed_of or []):
            return await self._deny(
                call,
                deny_result(
                    call.id,
                    ToolErrorClass.PERMISSION_DENIED,
                    f"Permission denied: composed tool '{parent_def.name}' may not call '{name}' "
                    f"(not declared in composed_of {parent_def.composed_of})",
                    rule="composition:undeclared",
                ),
            )
        if self.cancel_event.is_set():
            return await self._deny(
                call,
                deny_result(
                    call.id, ToolErrorClass.CANCELLED, "Tool call cancelled.", rule="cancelled"
                ),
            )
        verdict = await self.pipeline.classify(
            call, self.parent.session, parent_tool_use_id=self.parent.call.id
        )
        if isinstance(verdict, Deny):
            return await self._deny(call, verdict)
        if isinstance(verdict, NeedsApproval):
            if parent_def.atomic:
                prepared = verdict.prepared.model_copy(
                    update={
                        "rule": f"atomic:{parent_def.name} approval covers {verdict.prepared.rule}"
                    }
                )
            elif self.approver is not None:
                outcome = await self.approver(verdict)
                if isinstance(outcome, Deny):
                    return await self._deny(call, outcome)
                prepared = outcome
            else:
                return await self._deny(
                    call,
                    deny_result(
                        call.id,
                        ToolErrorClass.PERMISSION_DENIED,
                        f"Sub-call {name!r} needs approval ({verdict.prepared.rule}) "
                        "and no approver is available on this path",
                        rule=verdict.prepared.rule,
                    ),
                )
        else:
            prepared = verdict.prepared
        return await self.pipeline.execute(
            prepared, cancel_event=self.cancel_event, emit=self.emit, approver=self.approver
        )


# ---------------------------------------------------------------- wrappers
async def classify(call: ToolUseBlock, session: Session, pipeline: Pipeline) -> Verdict:
    """Module-level form of ``Pipeline.classify``."""
    return await pipeline.classify(call, session)


async def execute(prepared: PreparedCall, pipeline: Pipeline, **kwargs: Any) -> ToolRun:
    """Module-level form of ``Pipeline.execute``."""
    return await pipeline.execute(prepared, **kwargs)
