"""Classification: what happens to a call, decided without side effects.

``Classifier.classify`` is pure decision — registry lookup, input validation,
workspace scope, before-hooks, budget pre-check, policy — and returns
Execute | Deny | NeedsApproval without side effects or events. The Deny
helpers here build the error result and event of a call that never ran.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from parkgate.approvals.access import DEFAULT_PROJECT
from parkgate.calls.events import EventType, ToolEvent
from parkgate.client_tools.confinement import command_paths, inside, tool_paths
from parkgate.dialects import agent_preview
from parkgate.dialects import names as dialect_names
from parkgate.dialects.claude_code import file_preview
from parkgate.errors import ToolError
from parkgate.models import (
    Session,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolResultBlock,
    ToolUseBlock,
    input_hash,
)
from parkgate.registry import ToolRegistry
from parkgate.rules.budgets import EPOCH, BudgetError, BudgetSpec, BudgetState, charges_for
from parkgate.rules.call_caps import Budget
from parkgate.rules.cedar import RULE_PREFIX as CEDAR_PREFIX
from parkgate.rules.cedar import UNKNOWN_KEY, CedarPolicies, CedarRequest
from parkgate.rules.hooks import HookHalt, hook_name, maybe_await
from parkgate.rules.policy import (
    COMMAND_FIELDS,
    ConfirmationPolicy,
    PolicyDecision,
    strictness,
)
from parkgate.rules.shellwords import parse
from parkgate.sandbox.paths import file_tool_limits
from parkgate.schema import validate_input
from parkgate.truncation import Limits
from parkgate.verdicts import (
    ApprovalInfo,
    Deny,
    Execute,
    NeedsApproval,
    PreparedCall,
    ToolRun,
    Verdict,
)
from parkgate.workspaces.diffing import ImpactPreview, generic_preview, summarize_input
from parkgate.workspaces.files import WorkspaceFileAPI, resolve_root

log = logging.getLogger("parkgate.pipeline")

#: The turn id of Claude Code's hook sessions (parkgate.api.agents.claude_code_hook.TURN_ID):
#: their client tools are Claude Code's (`agent` in a Cedar request).
CLAUDE_CODE_TURN = "claude-code"


def _hook_agents() -> frozenset[str]:
    """The turn ids an agent hook files its calls under: Claude Code's and each
    registered dialect's name (Cedar's `resource.agent`)."""
    return frozenset({CLAUDE_CODE_TURN, *dialect_names()})


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


class Classifier:
    """The decision half of a `Pipeline` (its attributes are set by Pipeline)."""

    registry: ToolRegistry
    policy: ConfirmationPolicy
    hooks: Sequence[Any]
    budget: Budget | None
    limits: Limits
    cedar: CedarPolicies | None
    #: The settings' named budgets (their state reaches Cedar as context.budgets).
    budgets: Mapping[str, BudgetSpec]

    async def classify(
        self,
        call: ToolUseBlock,
        session: Session,
        *,
        parent_tool_use_id: str | None = None,
        client_tool: ToolDefinition | None = None,
        key_name: str | None = None,
        project: str | None = None,
        budgets: Mapping[str, BudgetState] | None = None,
    ) -> Verdict:
        """Decide what happens to ``call``: Execute | Deny | NeedsApproval. No side effects.

        `client_tool`: the session's declaration of a tool its client runs
        (`parkgate.client_tools.declared`); it stands in for the registry's entry.
        `key_name`, `project`: who submitted it, for Cedar policies (the
        activity reads them from the store; None: unknown / the default project).
        `budgets`: the budgets' states before this call (None: nothing used);
        whether the call fits them is the caller's (parkgate.pipeline.budget_gate).
        """
        definition = client_tool or self.registry.get(call.name)
        if definition is None or not self.registry.visible_to(definition, session):
            available = [d.name for d in self.registry.definitions_for(session)]
            return deny_result(
                call.id,
                ToolErrorClass.NOT_FOUND,
                f"Tool '{call.name}' not found. Available: [{', '.join(available)}]",
                rule="registry",
            )
        if definition.confined:
            # The agent's hook found a path no agent tool may reach: whatever
            # policy, a hook, a budget or a remembered decision would say.
            return deny_result(
                call.id,
                ToolErrorClass.PERMISSION_DENIED,
                f"Permission denied: {definition.confined}",
                rule=f"confine: {definition.confined}",
                definition=definition,
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
        if self.cedar is not None:
            decision = self._with_cedar(decision, call, session, definition, relpaths,
                                        key_name, project, budgets)
        if definition.human_decides and decision.mode != "deny" and (
                decision.mode in ("auto", "prompt_once") or decision.self_approval):
            # Policy alone never lets it through (parkgate.client_tools.confinement).
            decision = decision.model_copy(update={
                "mode": "prompt", "self_approval": False,
                "rule": f"confine: {definition.human_decides} (policy: {decision.rule})"})
        prepared = PreparedCall(
            call=call,
            session=session,
            definition=definition,
            input_hash=input_hash(call.name, call.input),
            rule=decision.rule,
            parent_tool_use_id=parent_tool_use_id,
        )
        if decision.mode == "deny":
            refused = (f"Permission denied: Cedar policy {decision.rule} refuses tool "
                       f"'{call.name}' here" if decision.rule.startswith(CEDAR_PREFIX) else
                       f"Permission denied: tool '{call.name}' is disabled by policy "
                       f"(rule: {decision.rule})")
            return deny_result(
                call.id,
                ToolErrorClass.PERMISSION_DENIED,
                refused,
                rule=decision.rule,
                definition=definition,
            )
        if decision.mode == "auto":
            return Execute(prepared=prepared)
        return self.approval(prepared, decision)

    def approval(self, prepared: PreparedCall, decision: PolicyDecision) -> NeedsApproval:
        """The approval request of a call `decision` parks (its preview and people)."""
        call, session, definition = prepared.call, prepared.session, prepared.definition
        parent_tool_use_id = prepared.parent_tool_use_id
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
            client_executed=definition.client_executed,
        )
        return NeedsApproval(prepared=prepared, info=info)

    def _with_cedar(
        self, decision: PolicyDecision, call: ToolUseBlock, session: Session,
        definition: ToolDefinition, relpaths: dict[str, str],
        key_name: str | None, project: str | None,
        budgets: Mapping[str, BudgetState] | None = None,
    ) -> PolicyDecision:
        """The YAML decision combined with the Cedar policies': strictest wins;
        between equals the YAML decision stands and the rule names both. No
        matching policy leaves the YAML decision as it is."""
        assert self.cedar is not None
        request = self.cedar_request(call, session, definition, relpaths, key_name, project,
                                     budgets)
        cedar = self.cedar.decide(request)
        if cedar is None:
            return decision
        if strictness(cedar) > strictness(decision):
            return cedar
        if strictness(cedar) == strictness(decision):
            return decision.model_copy(update={"rule": f"{decision.rule}, {cedar.rule}"})
        return decision

    def cedar_request(
        self, call: ToolUseBlock, session: Session, definition: ToolDefinition,
        relpaths: dict[str, str], key_name: str | None, project: str | None,
        budgets: Mapping[str, BudgetState] | None = None,
    ) -> CedarRequest:
        """What Cedar policies see of a call (docs/POLICY.md, the request model).

        `programs` are read by the same tokenizer and wrappers as the YAML shell
        rules, every command of every reading (nested ones too), by basename.
        """
        wrappers = self.policy.wrappers()
        programs = {
            command.name
            for field, value in call.input.items()
            if field in COMMAND_FIELDS and isinstance(value, str)
            for command in parse(value, wrappers).commands
        }
        root = resolve_root(session.workspace_path)
        home = os.path.expanduser("~")
        if definition.client_executed:
            paths, _ = tool_paths(call.name, call.input, root, home)
        else:
            paths = [os.path.realpath(os.path.join(root, rel)) for rel in relpaths.values()]
        for field, value in call.input.items():
            if field in COMMAND_FIELDS and isinstance(value, str):
                # Every word that may be a path, as confinement reads a command (a superset).
                paths += command_paths(value, root, home)[0]
        if definition.client_executed:
            # A hook's calls run in a turn named for its agent (claude-code, codex ...).
            agent = session.turn_id if session.turn_id in _hook_agents() else "client"
        else:
            agent = "api"
        return CedarRequest(
            key_name=key_name or UNKNOWN_KEY, project=project or DEFAULT_PROJECT,
            tool=definition, agent=agent, tool_input=call.input,
            programs=frozenset(programs), paths=frozenset(paths),
            inside_workspace=all(inside(p, root) for p in paths),
            session=session.session_id, workspace=session.workspace_path,
            hour=datetime.now(UTC).hour,
            budgets={name: (budgets or {}).get(name, BudgetState(0, spec.limit_units)).cedar()
                     for name, spec in self.budgets.items()},
        )

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
        if not errors and not definition.client_executed:
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
        files = WorkspaceFileAPI(root, **file_tool_limits(self.limits.tool_hidden_paths))
        writes = definition.side_effects not in (SideEffects.NONE, SideEffects.READ)
        for field in definition.path_fields:
            value = call.input.get(field)
            if value is None:
                continue
            try:
                relpaths[field] = files.relative(value)
                if writes:
                    files.check_writable(value)
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
        limits = file_tool_limits(self.limits.tool_hidden_paths)
        if definition.client_executed:  # runs on the client's side
            # Claude Code's file tools, another agent's writes and patches
            # (parkgate.dialects): the diff against the file on disk.
            shown = file_preview(definition.name, tool_input, session.workspace_path,
                                 limits["off_limits"]) \
                or agent_preview(definition.name, tool_input, session.workspace_path,
                                 limits["off_limits"])
            return shown or generic_preview(definition, tool_input, None)
        files = WorkspaceFileAPI(session.workspace_path, **limits)
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
        try:  # the edit is charged instead (activities/budgets.py): it must count
            charges_for(self.budgets, call.name, new_input, "", "", "", EPOCH)
        except BudgetError as exc:
            return deny_result(call.id, ToolErrorClass.VALIDATION_ERROR,
                               f"Invalid input for tool '{call.name}': {exc}",
                               definition=prepared.definition)
        return prepared.model_copy(
            update={
                "call": call,
                "input_hash": input_hash(call.name, new_input),
                "rule": f"{prepared.rule} (approved with edits)",
            }
        )
