"""Issue 40 (6): after "Approve with edits" the model is told its input was
changed, and how, before the tool's own output (the result it gets and the one
stored); a plain approval adds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from parkgate.approvals.edits import edit_note
from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock
from tests.fixtures.temporal import durable_rig


def _texts(result: Any) -> list[str]:
    return [getattr(block, "text", "") for block in result.content]


async def test_an_edited_call_tells_the_model_what_changed(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        sent = {"path": "notes.txt", "content": "line one\nline two\n"}
        edited = {"path": "notes.txt", "content": "line one\nline 2\n"}
        for call_id, decision in (("tu_edit", "allow_with_edits"), ("tu_plain", "allow")):
            call = ToolUseBlock(id=call_id, name="write_file", input=sent)
            handle = await rig.dispatcher.start(call, session)
            request_id = await rig.wait_parked(session.session_id, call_id)
            decided = await rig.dispatcher.decide(
                request_id, decision, decided_by="carol",
                edited_input=edited if decision == "allow_with_edits" else None)
            assert decided.accepted
            outcome = await handle.result()
            assert outcome.status == CallStatus.SUCCEEDED
            stored = await sqlite_repo.get_call(session.session_id, call_id)
            assert stored.result == outcome.result  # the model's result is the stored one
            texts = _texts(outcome.result)
            if decision == "allow":
                assert not any("approver changed" in t for t in texts)
                continue
            assert (rig.workspace / "notes.txt").read_text() == "line one\nline 2\n"
            note, *output = texts
            assert note.startswith("Note: the approver changed this call's input")
            assert "- content: changed" in note and "-line two" in note and "+line 2" in note
            assert "path" not in note.split("Changed:", 1)[1]  # unchanged fields stay out
            assert output and "notes.txt" in " ".join(output)  # the tool's own output follows


def test_the_note_names_fields_and_hides_secrets() -> None:
    note = edit_note({"url": "https://a.example", "api_key": "k1", "retries": 3},
                     {"url": "https://b.example", "api_key": "k2", "timeout": 5})
    assert note is not None
    assert '- url: "https://a.example" -> "https://b.example"' in note
    assert "- api_key: [REDACTED] -> [REDACTED]" in note and "k2" not in note
    assert "- retries: removed (was 3)" in note and "- timeout: added 5" in note
    assert edit_note({"a": 1}, {"a": 1}) is None
    big = edit_note({"content": "x\n" * 100_000}, {"content": "y\n" * 100_000})
    assert big is not None and "- content: changed (200000 -> 200000 characters)" in big
