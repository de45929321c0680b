"""The execute activity's gate for a non-atomic composed tool's sub-calls.

A sub-call that policy prompts for is never waited for inside the activity (a
worker lost during the wait would end the call `outcome_unknown` though
nothing ran). Instead `DurableGate` stops the composed tool there
(SubCallParked): the activity returns the park, the call's workflow waits for
the decision durably (a SubCallApproval child workflow, workflows/subcall_park.py),
then runs the composed tool again. In that resumed run the gate answers every
sub-call that had already returned with its recorded result (it does not run
again) and applies the decision to the sub-call it parked at.
"""

from __future__ import annotations

from parkgate.durable.payloads import ExecuteInput, SubCallStep
from parkgate.durable.subcall_approvals import sub_call_request_id
from parkgate.models import ToolErrorClass, ToolUseBlock
from parkgate.pipeline import deny_result
from parkgate.pipeline.classification import run_from_deny
from parkgate.pipeline.subcall_runner import SubCallGate, SubCallParked, step_hash
from parkgate.verdicts import Deny, NeedsApproval, PreparedCall, ToolRun

#: A resumed run asked a recorded step for another tool or input: the composed
#: tool did not repeat itself, and what it did before is not done again.
DIVERGED = (
    "This step differs from the one the composed tool made before it waited for "
    "approval (tool or input changed); it was not run again."
)


class DurableGate(SubCallGate):
    """Replays the recorded steps of a resumed run; parks at an undecided sub-call."""

    def __init__(self, inp: ExecuteInput) -> None:
        self.recorded = {step.tool_use_id: step for step in inp.steps}
        #: Every step that returned, in order: the recorded ones, then the new ones.
        self.steps: list[SubCallStep] = list(inp.steps)
        self.decided = inp.sub_decided

    def replay(self, call: ToolUseBlock) -> ToolRun | None:
        step = self.recorded.get(call.id)
        if step is None:
            return None
        if step.step_hash != step_hash(call):
            return run_from_deny(deny_result(
                call.id, ToolErrorClass.EXECUTION_ERROR, DIVERGED, rule="composition:diverged"
            ))
        return step.run

    def keep(self, call: ToolUseBlock, run: ToolRun) -> None:
        if call.id not in self.recorded:
            self.steps.append(SubCallStep(tool_use_id=call.id, step_hash=step_hash(call), run=run))

    async def __call__(self, sub: NeedsApproval) -> PreparedCall | Deny:
        prepared = sub.prepared
        call = prepared.call
        request_id = sub_call_request_id(prepared.session.session_id, call.id)
        decided = self.decided
        if decided is None or decided.request_id != request_id:
            self.parked = sub.model_copy(
                update={"info": sub.info.model_copy(update={"request_id": request_id})}
            )
            raise SubCallParked(self.parked)
        rule = f"confirmation:{request_id}"

        def deny(error: ToolErrorClass, text: str) -> Deny:
            return deny_result(call.id, error, text, rule=rule, definition=prepared.definition)

        if decided.input_hash != prepared.input_hash:
            return deny(ToolErrorClass.PERMISSION_DENIED,
                        "Refusing to run: this sub-call's input differs from the one decided.")
        if decided.decision == "allow":
            return prepared.model_copy(update={"rule": rule})
        if decided.decision == "deny":
            text = "User denied this operation."
            if decided.reason:
                text += f" Reason: {decided.reason}"
            return deny(ToolErrorClass.USER_DENIED, text)
        if decided.decision == "expired":
            return deny(ToolErrorClass.CONFIRMATION_TIMEOUT,
                        "No decision before the approval request expired; "
                        "the sub-call did not run.")
        if decided.decision == "cancelled":
            return deny(ToolErrorClass.CANCELLED,
                        "The call was cancelled before this sub-call ran.")
        return deny(ToolErrorClass.EXECUTION_ERROR,
                    f"The sub-call's approval request could not be parked ({decided.reason}); "
                    "it did not run.")
