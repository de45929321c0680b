"""An approver's edit told to the model on a client-executed call.

A call the agent runs itself gets its released input in the claim answer; when
an approver changed it ("Approve with edits") the function runs with other
arguments than the model sent, and the model would read the output as that of
its own input. The gate puts the same note a hosted call gets
(parkgate.approvals.edits) before the output it reports, so the result the
model reads, and the one parkgate records, say so; the adapters hand that text
to their framework instead of the tool's bare value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parkgate.approvals.edits import NOTE_HEAD, edit_note
from parkgate.calls.wire import CallResource
from parkgate.models import TextBlock, ToolResultBlock

#: The decision that carries an approver's replacement input.
EDITED = "allow_with_edits"


def note_for(resource: CallResource, sent: Mapping[str, Any],
             released: Mapping[str, Any]) -> str | None:
    """The note for a call released with an approver's edit (None otherwise:
    a plain approval, a policy release, an edit that restates the input)."""
    if resource.decision != EDITED:
        return None
    return edit_note(dict(sent), dict(released))


def with_note(content: str | list[dict[str, Any]],
              note: str | None) -> str | list[dict[str, Any]]:
    """`content` (as reported) with the note as its first text block."""
    if note is None:
        return content
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return [{"type": "text", "text": note},
            *(b for b in blocks if b != {"type": "text", "text": ""})]


def is_noted(result: ToolResultBlock) -> bool:
    """The result begins with an approver-edit note."""
    first = result.content[0] if result.content else None
    return isinstance(first, TextBlock) and first.text.startswith(NOTE_HEAD)


def model_value(ran: list[Any], result: ToolResultBlock) -> Any:
    """What an adapter returns to its framework for a call that did not fail:
    the tool's own value when it ran here with the model's input, else the
    recorded text (which begins with the note when an approver edited it)."""
    if ran and not is_noted(result):
        return ran[0]
    return result.text
