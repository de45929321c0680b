"""`parkgate.classify` and `parkgate.revalidate`: pure decisions, run as local activities."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from parkgate.activities.budgets import budget_states, charge_call
from parkgate.activities.deps import Deps
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.plan import plan_for
from parkgate.approvals import proof
from parkgate.approvals.access import DEFAULT_PROJECT
from parkgate.calls.records import HistoryStore
from parkgate.durable.payloads import (
    ACT_CLASSIFY,
    ACT_REVALIDATE,
    ClassifyInput,
    ClassifyOutput,
    ExecPlan,
    ExecuteInput,
    RevalidateInput,
    RevalidateOutput,
    with_prepared,
)
from parkgate.models import Session, ToolErrorClass, utcnow
from parkgate.pipeline import deny_result
from parkgate.rules.remembered import RULE_PREFIX, matching_rule, rest_hash
from parkgate.rules.shellwords import WrapperShape
from parkgate.store.errors import is_unreachable
from parkgate.verdicts import Deny, Execute, NeedsApproval, PreparedCall, Verdict

#: Attempts a classification that fails for any reason but a store outage gets
#: (the workflow's retry policy has no cap: `parkgate.workflows.call_record.CLASSIFY_RETRY`);
#: the last one answers a Deny, so the call ends with an error outcome.
CLASSIFY_ATTEMPTS = 5
#: What the model is told then.
UNCLASSIFIABLE = "The call could not be classified; it did not run."
#: ApplicationError type of a classification the store did not answer: retried
#: until it does, so a history outage delays a call, never fails it.
STORE_UNREACHABLE = "StoreUnreachable"


def _workflow_id(inp: ClassifyInput) -> str:
    """The call's workflow id (what a claim's proof is bound to)."""
    try:
        return activity.info().workflow_id or ""
    except RuntimeError:  # called directly, not as an activity
        return inp.ref.workflow_id or "" if inp.ref is not None else ""


async def remembered_verdict(
    store: HistoryStore, verdict: NeedsApproval, session: Session,
    wrappers: Mapping[str, WrapperShape] | None = None,
) -> Verdict:
    """Execute when an active remembered rule allows this call, else `verdict`.

    Quorum requests are never remembered (one approver cannot stand for
    several). A rule counts only for calls its maker could decide: the call's
    named approvers, never the submitting key's own calls.
    """
    lookup = getattr(store, "active_remembered", None)
    info = verdict.info
    if lookup is None or info.quorum > 1 or verdict.prepared.definition.human_decides:
        return verdict  # a call a person must decide (parkgate.client_tools.confinement) too
    get_session = getattr(store, "get_session", None)
    row = None if get_session is None else await get_session(session.session_id)
    project = row.project if row is not None else DEFAULT_PROJECT
    now = utcnow()
    call = verdict.prepared.call
    # Only rules that can match: the same input, or (prefix rules) the same other fields.
    hashes = [verdict.prepared.input_hash, rest_hash(call.name, call.input)]
    rules = await lookup(project=project, tool_name=call.name, session_id=session.session_id,
                         workspace_path=session.workspace_path, now=now, hashes=hashes)
    if not rules:
        return verdict
    get_submitter = getattr(store, "get_submitter", None)
    submitter = None if get_submitter is None else await get_submitter(
        session.session_id, call.id)
    rule = matching_rule(
        rules, session_id=session.session_id, workspace_path=session.workspace_path,
        tool_name=call.name, tool_input=call.input, now=now, approvers=info.approvers,
        submitter_key=None if submitter is None or info.self_approval
        else f"key:{submitter.key_id}",
        wrappers=wrappers,
    )
    if rule is None:
        return verdict
    return Execute(prepared=verdict.prepared.model_copy(update={
        "rule": f"{RULE_PREFIX}{rule.rule_id}",
        "remembered_by": rule.created_by,
        "remembered_principal": rule.principal_id,
    }))


class ClassifyActivities:
    """Wraps Pipeline.classify / Pipeline.revalidate (no side effects, safe to retry).

    An auto-approved NONE/READ call is also run here when the workflow asks
    (`ClassifyInput.ref`): reads are idempotent, and one local activity
    instead of two saves a round through the workflow per call.
    """

    def __init__(self, deps: Deps, runner: ExecuteActivities | None = None) -> None:
        self.deps = deps
        self.runner = runner or ExecuteActivities(deps)

    @activity.defn(name=ACT_CLASSIFY)
    async def classify(self, inp: ClassifyInput) -> ClassifyOutput:
        """Classify (and maybe run) one call. The workflow retries this without a
        cap; a failure the store's outage did not cause is retried until the
        CLASSIFY_ATTEMPTS-th attempt, which answers a Deny instead of raising: a
        local activity's final failure reaches the workflow as an ApplicationError
        it does not catch, and would fail the workflow with no outcome."""
        try:
            return await self._classify(inp)
        except Exception as exc:
            if isinstance(exc, ApplicationError) and exc.type == STORE_UNREACHABLE:
                raise
            if activity.in_activity() and activity.info().attempt >= CLASSIFY_ATTEMPTS:
                activity.logger.exception("classify failed for good; the call is denied")
                return ClassifyOutput(
                    verdict=deny_result(inp.call.id, ToolErrorClass.EXECUTION_ERROR,
                                        UNCLASSIFIABLE, rule="classify"),
                    plan=plan_for(None, self.deps.settings))
            raise

    async def _classify(self, inp: ClassifyInput) -> ClassifyOutput:
        key_name, project = await self._caller(inp)
        pipeline, store, now = self.deps.pipeline, self.deps.store, utcnow()
        try:
            before = await budget_states(store, pipeline.budgets, inp.session, key_name,
                                         project, now) if pipeline.budgets else None
            verdict = await pipeline.classify(inp.call, inp.session,
                                              client_tool=inp.client_tool,
                                              key_name=key_name, project=project,
                                              budgets=before)
            if isinstance(verdict, NeedsApproval):
                verdict = await remembered_verdict(store, verdict, inp.session,
                                                   pipeline.policy.wrappers())
            # Idempotent by the call (activities/budgets.py): a retry reserves nothing twice.
            verdict = await charge_call(pipeline, store, verdict, inp.call, inp.session,
                                        key_name, project, now)
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            activity.logger.warning("store unreachable while classifying; retrying: %s",
                                    type(exc).__name__)
            raise ApplicationError(f"the store did not answer: {type(exc).__name__}",
                                   type=STORE_UNREACHABLE) from exc
        definition = None if isinstance(verdict, Deny) else verdict.prepared.definition
        out = ClassifyOutput(verdict=verdict, plan=plan_for(definition, self.deps.settings))
        if inp.claim is not None:
            # Checked here, once: the verdict is recorded with this result, so a
            # replay under other keys takes the same path (issue 37).
            out.claim_checked = True
            out.claim_problem = proof.problem(inp.claim, proof.KIND_CLAIM_AT_RELEASE,
                                              _workflow_id(inp))
        # A client tool is never run here: it is released to its client.
        runs = (inp.ref is not None or inp.run_row is not None) and inp.client_tool is None
        if runs and isinstance(verdict, Execute) and self._runs_here(out.plan):
            out.executed = await self.runner.run_local(self._run_input(inp, verdict))
        return out

    async def _caller(self, inp: ClassifyInput) -> tuple[str | None, str | None]:
        """The submitting key's name and the session's project, read only when
        Cedar policies or budgets are loaded (the request's principal, the
        budgets' scopes)."""
        pipeline = self.deps.pipeline
        if getattr(pipeline, "cedar", None) is None and not pipeline.budgets:
            return None, None
        store = self.deps.store
        get_submitter = getattr(store, "get_submitter", None)
        get_session = getattr(store, "get_session", None)
        try:
            submitter = None if get_submitter is None else await get_submitter(
                inp.session.session_id, inp.call.id)
            row = None if get_session is None else await get_session(inp.session.session_id)
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            raise ApplicationError(f"the store did not answer: {type(exc).__name__}",
                                   type=STORE_UNREACHABLE) from exc
        return (None if submitter is None else submitter.key_name,
                None if row is None else row.project)

    @staticmethod
    def _run_input(inp: ClassifyInput, verdict: Execute) -> ExecuteInput:
        """The run of an auto-approved read: recorded as `inp.ref`'s call."""
        prepared = verdict.prepared
        if inp.run_row is not None:  # an older history: a whole row
            row = with_prepared(inp.run_row, prepared)
            return ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash,
                                workflow_id=row.workflow_id or "", initial=row, final=row)
        assert inp.ref is not None
        return ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash,
                            workflow_id=inp.ref.workflow_id or "", ref=inp.ref)

    @staticmethod
    def _runs_here(plan: ExecPlan) -> bool:
        """A local run whose time limit fits in what is left of this activity's."""
        if not plan.local:
            return False
        try:
            info = activity.info()
        except RuntimeError:  # called directly, not as an activity
            return True
        if info.start_to_close_timeout is None:
            return True
        elapsed = (utcnow() - info.started_time).total_seconds()
        return plan.start_to_close_seconds <= info.start_to_close_timeout.total_seconds() - elapsed

    @activity.defn(name=ACT_REVALIDATE)
    async def revalidate(self, inp: RevalidateInput) -> RevalidateOutput:
        """Re-validate and re-scope an approver's edited input."""
        checked = self.deps.pipeline.revalidate(inp.prepared, inp.new_input)
        if inspect.isawaitable(checked):
            checked = await checked
        if isinstance(checked, PreparedCall):
            return RevalidateOutput(prepared=checked)
        assert isinstance(checked, Deny)
        return RevalidateOutput(error=checked.result.text, error_class=checked.error_class)
