"""The real Claude Code CLI behind parkgate's hooks (offline, scripted model)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from parkgate.approvals.edits import NOTE_HEAD
from tests.claude_code.conftest import Stack, new_session, until
from tests.claude_code.fake_anthropic import FakeAnthropic, TextStep, ToolStep
from tests.claude_code.test_hook_endpoint import audit_page


async def call_row(stack: Stack, sid: str, cid: str) -> Any:
    return await stack.api.repo.get_call(sid, cid)


async def parked(stack: Stack, sid: str, cid: str) -> dict[str, Any]:
    """The parked call as stored: until its row is written the API answers from
    the workflow, parked but with no turn id yet (the decision URL needs it)."""
    async def look() -> dict[str, Any] | None:
        r = await stack.api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}")
        body = r.json() if r.status_code in (200, 202) else {}
        return dict(body) if body.get("status") == "parked" and body.get("turn_id") else None
    return dict(await until(look))


async def decide(stack: Stack, sid: str, call: dict[str, Any], body: dict[str, Any]) -> None:
    r = await stack.api.http.post(
        f"/v1/sessions/{sid}/turns/{call['turn_id']}/confirmations/{call['request_id']}",
        json=body)
    assert r.status_code == 200, r.text


async def test_read_allowed_at_once_and_recorded(stack: Any) -> None:
    async with stack() as s:
        (s.api.workspace / "hello.txt").write_text("hi there\n")
        read = ToolStep("Read", {"file_path": str(s.api.workspace / "hello.txt")})
        fake = FakeAnthropic([read, TextStep("read it")])
        sid = new_session()
        async with fake.running():
            run = await s.claude(fake, sid, prompt="read hello.txt for me")
        assert run.returncode == 0, run.stderr
        assert run.result["result"] == "read it"
        assert "hi there" in fake.result_text(read.id)
        row = await call_row(s, sid, read.id)
        assert row is not None and row.tool_name == "Read"
        assert row.status.value == "succeeded"  # PostToolUse reported the outcome
        assert "hi there" in row.result.text
        session = await s.api.repo.get_session(sid)
        assert session is not None and session.workspace_path == str(s.api.workspace)
        # UserPromptSubmit recorded the prompt of the call's turn: the audit shows it.
        page = await audit_page(s.api, sid)
        assert 'data-testid="turn-prompt">read hello.txt for me' in page
        assert 'data-testid="permission-mode">' in page


async def test_write_parks_and_is_approved_while_the_cli_waits(stack: Any) -> None:
    async with stack() as s:
        target = s.api.workspace / "notes.txt"
        target.write_text("old line\n")
        write = ToolStep("Write", {"file_path": str(target), "content": "new line\n"})
        fake = FakeAnthropic([write, TextStep("wrote it")])
        sid = new_session()
        async with fake.running():
            run_task = asyncio.create_task(s.claude(fake, sid, wait_seconds=60))
            call = await parked(s, sid, write.id)
            assert target.read_text() == "old line\n"  # not run while parked
            approval = await s.api.repo.get_approval(call["request_id"])
            assert approval is not None
            diff = approval.info.get("diff") or ""
            assert "-old line" in diff and "+new line" in diff, approval.info
            await decide(s, sid, call, {"decision": "allow", "decided_by": "alice"})
            run = await run_task
        assert run.returncode == 0, run.stderr
        assert target.read_text() == "new line\n"
        row = await call_row(s, sid, write.id)
        assert row.status.value == "succeeded", row


async def test_denial_reason_reaches_the_model(stack: Any) -> None:
    async with stack() as s:
        target = s.api.workspace / "prod.cfg"
        write = ToolStep("Write", {"file_path": str(target), "content": "danger\n"})
        fake = FakeAnthropic([write, TextStep("ok, not writing")])
        sid = new_session()
        async with fake.running():
            run_task = asyncio.create_task(s.claude(fake, sid, wait_seconds=60))
            call = await parked(s, sid, write.id)
            await decide(s, sid, call, {"decision": "deny", "reason": "use the staging config"})
            run = await run_task
        assert run.returncode == 0, run.stderr
        assert not target.exists()
        assert "use the staging config" in fake.result_text(write.id)
        assert (await call_row(s, sid, write.id)).status.value == "denied"


async def test_edited_input_is_what_runs(stack: Any) -> None:
    async with stack() as s:
        target = s.api.workspace / "app.txt"
        write = ToolStep("Write", {"file_path": str(target), "content": "version 1\n"})
        fake = FakeAnthropic([write, TextStep("done")])
        sid = new_session()
        async with fake.running():
            run_task = asyncio.create_task(s.claude(fake, sid, wait_seconds=60))
            call = await parked(s, sid, write.id)
            await decide(s, sid, call, {"decision": "allow_with_edits", "edited_input":
                                        {"file_path": str(target), "content": "version 2\n"}})
            run = await run_task
        assert run.returncode == 0, run.stderr
        assert target.read_text() == "version 2\n"
        assert (await call_row(s, sid, write.id)).status.value == "succeeded"
        # The model is told its input was changed (the hook's additionalContext):
        # the request after the Write carries the note, naming the field.
        after = json.dumps(fake.requests[-1].get("messages"))
        assert NOTE_HEAD in after and "- content: changed" in after, after[-2000:]


BASH_LS_AUTO = {"rules": [{"tool": "Bash", "command_pattern": r"ls( .*)?", "mode": "auto"}]}


async def test_bash_chain_hiding_a_dangerous_command_parks(stack: Any) -> None:
    async with stack(policy=BASH_LS_AUTO, claude_code_wait_seconds=0.5) as s:
        victim = s.api.workspace / "x"
        victim.mkdir()
        ls = ToolStep("Bash", {"command": "ls"})
        chain = ToolStep("Bash", {"command": f"ls && rm -rf {victim}"})
        fake = FakeAnthropic([ls, chain, TextStep("stopped")])
        sid = new_session()
        async with fake.running():
            run = await s.claude(fake, sid, wait_seconds=0.5)
        assert run.returncode == 0, run.stderr
        assert (await call_row(s, sid, ls.id)).status.value == "succeeded"  # plain ls: auto
        assert victim.is_dir()  # the chain did not run
        parked_row = await call_row(s, sid, chain.id)
        assert parked_row.status.value == "parked"
        # Both calls answer the same user prompt: its prompt_id is their turn.
        assert parked_row.turn_id == (await call_row(s, sid, ls.id)).turn_id != "claude-code"
        text = fake.result_text(chain.id)
        assert "waiting for a human approval" in text and "call the tool again" in text.lower()


async def test_fallback_ask_does_not_run_the_call(stack: Any) -> None:
    for mode in ("ask",):
        async with stack(claude_code_wait_seconds=0.5, claude_code_fallback=mode) as s:
            target = s.api.workspace / f"{mode}.txt"
            write = ToolStep("Write", {"file_path": str(target), "content": "x\n"})
            fake = FakeAnthropic([write, TextStep("waited")])
            sid = new_session()
            async with fake.running():
                run = await s.claude(fake, sid, wait_seconds=0.5)
            assert not target.exists(), mode
            assert (await call_row(s, sid, write.id)).status.value == "parked", mode
            assert run.returncode == 0, run.stderr
            # -p has no one to ask: Claude Code refuses the call, the model is told.
            assert fake.result_for(write.id) is not None


async def test_call_again_picks_up_the_decision(stack: Any) -> None:
    """Fallback `deny` tells the model to call again; the same input under a new
    tool_use_id attaches to the parked call and runs once it was approved."""
    async with stack(claude_code_wait_seconds=0.5) as s:
        target = s.api.workspace / "later.txt"
        args = {"file_path": str(target), "content": "approved later\n"}
        first = ToolStep("Write", args)
        again = ToolStep("Write", dict(args), hold=asyncio.Event())
        fake = FakeAnthropic([first, again, TextStep("done")])
        sid = new_session()
        async with fake.running():
            run_task = asyncio.create_task(s.claude(fake, sid, wait_seconds=0.5))
            call = await parked(s, sid, first.id)
            await until(lambda: asyncio.sleep(0, fake.result_for(first.id)))
            assert not target.exists()
            await decide(s, sid, call, {"decision": "allow"})
            again.hold.set()  # type: ignore[union-attr]
            run = await run_task
        assert run.returncode == 0, run.stderr
        assert "call the tool again" in fake.result_text(first.id).lower()
        assert target.read_text() == "approved later\n"
        row = await call_row(s, sid, first.id)
        assert row.status.value == "succeeded", row  # the second hook's run reported it
        assert await call_row(s, sid, again.id) is None  # one call, not two


async def test_failed_tool_is_recorded_as_failed(stack: Any) -> None:
    async with stack() as s:
        missing = ToolStep("Read", {"file_path": str(s.api.workspace / "nope.txt")})
        fake = FakeAnthropic([missing, TextStep("no such file")])
        sid = new_session()
        async with fake.running():
            run = await s.claude(fake, sid)
        assert run.returncode == 0, run.stderr
        row = await until(lambda: call_row(s, sid, missing.id))
        assert row.status.value == "failed", row
        assert row.result.is_error


async def test_command_hook_parks_and_runs_once_approved(stack: Any) -> None:
    """`parkgate hook claude-code` (a command hook) answers like the HTTP hook."""
    async with stack() as s:
        target = s.api.workspace / "cmd.txt"
        write = ToolStep("Write", {"file_path": str(target), "content": "via command\n"})
        fake = FakeAnthropic([write, TextStep("done")])
        sid = new_session()
        async with fake.running():
            run_task = asyncio.create_task(
                s.claude(fake, sid, wait_seconds=60, install=("--command",)))
            call = await parked(s, sid, write.id)
            await decide(s, sid, call, {"decision": "allow"})
            run = await run_task
        assert run.returncode == 0, run.stderr
        assert target.read_text() == "via command\n"
        assert (await call_row(s, sid, write.id)).status.value == "succeeded"


async def test_unreachable_parkgate_blocks_the_call(stack: Any) -> None:
    """Installed hooks fail closed: nothing answering at the URL blocks the call."""
    from tests.api.rig import closed_port_url

    async with stack() as s:
        s.url = closed_port_url().removesuffix("/hook")
        target = s.api.workspace / "blocked.txt"
        write = ToolStep("Write", {"file_path": str(target), "content": "x\n"})
        fake = FakeAnthropic([write, TextStep("blocked")])
        async with fake.running():
            for extra in ((), ("--command",)):
                await s.claude(fake, new_session(), wait_seconds=1, install=extra)
                assert not target.exists(), extra
                fake.tool_results.clear()


async def test_defer_then_resume_gets_the_decision_made_meanwhile(stack: Any) -> None:
    async with stack(claude_code_wait_seconds=0.5, claude_code_fallback="defer") as s:
        target = s.api.workspace / "deferred.txt"
        write = ToolStep("Write", {"file_path": str(target), "content": "after resume\n"})
        fake = FakeAnthropic([write, TextStep("done")])
        sid = new_session()
        async with fake.running():
            first = await s.claude(fake, sid, wait_seconds=0.5)
            assert first.result["stop_reason"] == "tool_deferred", first.stdout
            assert first.result["deferred_tool_use"]["id"] == write.id
            assert not target.exists()
            call = await parked(s, sid, write.id)
            await decide(s, sid, call, {"decision": "allow"})
            second = await s.claude(fake, sid, wait_seconds=5, resume=True, prompt="")
            assert second.returncode == 0, second.stderr
        assert target.read_text() == "after resume\n"
        assert (await call_row(s, sid, write.id)).status.value == "succeeded"
