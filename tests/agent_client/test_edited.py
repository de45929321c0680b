"""parkgate.agent_client.edited on its own: when a note is due, where it goes
in the reported content, and what an adapter hands its framework."""

from __future__ import annotations

from parkgate.agent_client.edited import is_noted, model_value, note_for, with_note
from parkgate.approvals.edits import NOTE_HEAD
from parkgate.calls.records import CallStatus
from parkgate.calls.wire import CallLinks, CallResource
from parkgate.models import TextBlock, ToolResultBlock


def _resource(decision: str | None) -> CallResource:
    return CallResource(tool_use_id="t1", session_id="s1", status=CallStatus.RELEASED,
                        decision=decision, links=CallLinks.of("s1", "t1"))


def test_a_note_only_for_an_approver_edit_that_changed_something() -> None:
    sent, edited = {"path": "a.txt"}, {"path": "b.txt"}
    note = note_for(_resource("allow_with_edits"), sent, edited)
    assert note is not None and note.startswith(NOTE_HEAD) and '- path: "a.txt" -> "b.txt"' in note
    assert note_for(_resource("allow"), sent, edited) is None  # not an approver's edit
    assert note_for(_resource(None), sent, edited) is None  # policy released it
    assert note_for(_resource("allow_with_edits"), sent, dict(sent)) is None  # restated


def test_the_note_leads_the_reported_content() -> None:
    assert with_note("out", None) == "out"
    assert with_note("out", "N") == [{"type": "text", "text": "N"}, {"type": "text", "text": "out"}]
    assert with_note("", "N") == [{"type": "text", "text": "N"}]  # an empty return adds nothing
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    assert with_note([image], "N") == [{"type": "text", "text": "N"}, image]


def test_an_adapter_returns_the_bare_value_unless_the_result_is_noted() -> None:
    plain = ToolResultBlock(tool_use_id="t1", content=[TextBlock(text="wrote k2")])
    noted = ToolResultBlock(tool_use_id="t1", content=[
        TextBlock(text=f"{NOTE_HEAD} (approve with edits) ..."), TextBlock(text="wrote k2")])
    assert not is_noted(plain) and is_noted(noted)
    assert model_value([{"k": 2}], plain) == {"k": 2}  # the tool's own value
    assert model_value([{"k": 2}], noted) == noted.text  # the note, then the output
    assert model_value([], plain) == "wrote k2"  # ran elsewhere: the recorded text
