"""Issue 40 (6), client-executed calls: after "Approve with edits" the result
the model reads (and the one parkgate records) begins with the note naming the
changed fields, the hosted path's wording; the function ran with the edit.
Real API, worker, Temporal dev server and database; sync and async gates."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Literal

from temporalio.client import Client

from parkgate.agent_client import (
    AsyncParkgateClient,
    ParkedError,
    ParkgateClient,
    gate,
    tool_gate,
)
from parkgate.approvals.edits import NOTE_HEAD
from parkgate.store.repository import Repository
from tests.agent_client.test_gate import parked, sid, stack

EDIT_LINE = '- path: "draft.txt" -> "final.txt"'


async def test_the_async_gate_tells_the_model_and_records_the_note(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[dict[str, str]] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        gates = tool_gate(agent, s, str(api.workspace))

        @gates.gate(side_effects="write")
        async def save(path: str, text: str) -> str:
            """Save a text."""
            runs.append({"path": path, "text": text})
            if path == "boom.txt":
                raise OSError("disk full")
            return f"saved {path}"

        sent = {"path": "draft.txt", "text": "hello"}
        decisions: tuple[tuple[str, Literal["allow", "allow_with_edits"]], ...] = (
            ("en-edit", "allow_with_edits"), ("en-plain", "allow"))
        for call_id, decision in decisions:
            task = asyncio.create_task(save.call(sent, tool_use_id=call_id))
            await parked(human, s, call_id)
            await human.decide(s, call_id, decision, edited_input={
                "path": "final.txt", "text": "hello"} if decision == "allow_with_edits" else None)
            result = await asyncio.wait_for(task, 60)
            stored = await agent.get_call(s, call_id)
            assert stored.result == result  # what the model read is what was recorded
            if decision == "allow":
                assert runs[-1] == sent and result.text == "saved draft.txt"
                continue
            assert runs[-1] == {"path": "final.txt", "text": "hello"}
            note, output = result.content[0].text, result.text.rsplit("\n", 1)[-1]  # type: ignore[union-attr]
            assert note.startswith(NOTE_HEAD) and EDIT_LINE in note and "text" not in \
                note.split("Changed:", 1)[1]
            assert output == "saved final.txt" and not result.is_error

        # The function raised on the edited input: the error follows the note.
        failing = asyncio.create_task(save.call(sent, tool_use_id="en-raise"))
        await parked(human, s, "en-raise")
        await human.decide(s, "en-raise", "allow_with_edits",
                           edited_input={"path": "boom.txt", "text": "hello"})
        try:
            await asyncio.wait_for(failing, 60)
        except OSError:
            pass
        else:
            raise AssertionError("the function's exception was not raised again")
        errored = await agent.get_call(s, "en-raise")
        assert errored.result is not None and errored.result.is_error
        assert errored.result.text.startswith(NOTE_HEAD) and "OSError: disk full" in \
            errored.result.text


async def test_an_agent_back_after_the_edit_is_told_too(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Released while nobody waited (the agent stopped at ParkedError): the
    submit of its return claims the edited call, and the note comes with it."""
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        ran: list[str] = []

        def saving(path: str) -> str:
            ran.append(path)
            return f"saved {path}"

        save = gate(saving, client=agent, session=s,
                    side_effects="write", name="save", description="Save.",
                    workspace=str(api.workspace), wait=0)
        try:
            await save.call({"path": "draft.txt"}, tool_use_id="en-back")
        except ParkedError:
            pass
        else:
            raise AssertionError("the call did not park")
        await human.decide(s, "en-back", "allow_with_edits", edited_input={"path": "final.txt"})
        # The agent is back once the release is recorded (the decision's answer
        # comes before the workflow's release write; a return in between is told
        # it is still parked, since it asked not to wait).
        deadline = asyncio.get_running_loop().time() + 30
        while (await agent.get_call(s, "en-back")).status.value == "parked":
            assert asyncio.get_running_loop().time() < deadline, "never released"
            await asyncio.sleep(0.1)
        result = await save.call({"path": "draft.txt"}, tool_use_id="en-back")
        assert ran == ["final.txt"]
        assert result.text.startswith(NOTE_HEAD) and EDIT_LINE in result.text
        assert result.text.endswith("saved final.txt")


async def test_the_blocking_gate_tells_the_model(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        ran: list[str] = []

        def agent_thread() -> str:
            with ParkgateClient(base, api.key) as pg:
                @gate(client=pg, session=s, side_effects="write", workspace=str(api.workspace))
                def save(path: str) -> str:
                    """Save."""
                    ran.append(path)
                    return f"saved {path}"

                return save.call({"path": "draft.txt"}, tool_use_id="en-sync").text

        task = asyncio.create_task(asyncio.to_thread(agent_thread))
        await parked(human, s, "en-sync")
        await human.decide(s, "en-sync", "allow_with_edits", edited_input={"path": "final.txt"})
        text = await asyncio.wait_for(task, 60)
        assert ran == ["final.txt"]
        assert text.startswith(NOTE_HEAD) and EDIT_LINE in text and text.endswith("saved final.txt")
