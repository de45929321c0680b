"""Claude Code's hook wire format: the endpoint, the key's variable and the
PreToolUse answer. Standard library only: the command hook (a process per
tool call) imports this and nothing heavier (parkgate.dialects.claude_code
re-exports it for everything else).
"""

from __future__ import annotations

from typing import Any, Literal

Decision = Literal["allow", "deny", "ask", "defer"]
#: The decisions a PreToolUse answer may carry.
DECISIONS = frozenset({"allow", "deny", "ask", "defer"})

HOOK_PATH = "/v1/hooks/claude-code"
HOOK_COMMAND = "parkgate hook claude-code"
KEY_ENV = "PARKGATE_API_KEY"
#: Seconds the hook's own timeout leaves beyond parkgate's wait.
TIMEOUT_MARGIN = 30
#: Of those, what the command hook leaves itself to print its answer.
COMMAND_MARGIN = 5
#: Query flag of the command hook: it starts an allowed call's claim itself,
#: just before it answers Claude Code (the answer then names the claim in
#: START_FIELD, which the hook removes).
CONFIRM_PARAM = "confirm"
START_FIELD = "parkgate_start"


def pre_tool_use(decision: Decision, reason: str | None = None,
                 updated_input: dict[str, Any] | None = None,
                 context: str | None = None) -> dict[str, Any]:
    """A PreToolUse answer: `hookSpecificOutput.permissionDecision` and its reason;
    `context` goes to the model (`additionalContext`: an allow's reason does not)."""
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason:
        out["permissionDecisionReason"] = reason
    if updated_input is not None:
        out["updatedInput"] = updated_input
    if context:
        out["additionalContext"] = context
    return {"hookSpecificOutput": out}


def is_decision(body: Any) -> bool:
    """`body` is a PreToolUse answer Claude Code acts on."""
    out = body.get("hookSpecificOutput") if isinstance(body, dict) else None
    return isinstance(out, dict) and out.get("hookEventName") == "PreToolUse" \
        and out.get("permissionDecision") in DECISIONS
