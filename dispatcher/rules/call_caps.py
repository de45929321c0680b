"""Call caps held in this process: a pure pre-check in classify, a record in execute.

For an in-process pipeline (`parkgate.LocalDispatcher`, `CallBudget`): counts
live as long as the process. The durable named budgets of the `budgets`
setting (windows, amounts, kept in the store) are parkgate.rules.budgets.

The pipeline asks ``check`` before policy (a call over its cap is denied with
permission_denied, rule "budget") and calls ``record`` once a call has run.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from parkgate.models import Session, ToolDefinition, ToolUseBlock
from parkgate.verdicts import PreparedCall, ToolRun


class Budget(Protocol):
    def check(self, call: ToolUseBlock, session: Session, definition: ToolDefinition) -> str | None:
        """None if the call fits the budget, else the reason it does not."""
        ...

    def record(self, prepared: PreparedCall, run: ToolRun) -> None:
        """Account for a call that ran."""
        ...


class CallBudget:
    """Caps the number of executed calls per session (overall and per tool)."""

    def __init__(
        self, max_calls: int | None = None, per_tool: dict[str, int] | None = None
    ) -> None:
        self.max_calls = max_calls
        self.per_tool = dict(per_tool or {})
        self._calls: Counter[str] = Counter()
        self._tool_calls: Counter[tuple[str, str]] = Counter()

    def check(self, call: ToolUseBlock, session: Session, definition: ToolDefinition) -> str | None:
        used = self._calls[session.session_id]
        if self.max_calls is not None and used >= self.max_calls:
            return f"Budget exceeded: session already ran {used} of {self.max_calls} calls"
        cap = self.per_tool.get(call.name)
        tool_used = self._tool_calls[(session.session_id, call.name)]
        if cap is not None and tool_used >= cap:
            return f"Budget exceeded: tool '{call.name}' already ran {tool_used} of {cap} times"
        return None

    def record(self, prepared: PreparedCall, run: ToolRun) -> None:
        self._calls[prepared.session.session_id] += 1
        self._tool_calls[(prepared.session.session_id, prepared.call.name)] += 1
