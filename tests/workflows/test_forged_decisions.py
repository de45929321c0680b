"""Only the API decides (issue 28): a direct Temporal client cannot decide a call.

A hostile client (tests/fixtures/forger.py) connected to the same Temporal
server sends the call workflow's `decide` update and signal with an identity
it chose, plaintext and codec-encrypted, without a proof, with a made-up one,
with a genuine proof made for another workflow or another kind, or over
altered fields. Nothing runs, the call stays parked, the store and its audit
name no invented approver, forged quorum votes are not counted, a forged
`remember` plants no rule, and a genuine API decision still works afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from parkgate.approvals.decisions import DecideInput
from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import call_workflow_id
from parkgate.models import ToolErrorClass, ToolUseBlock
from parkgate.rules.remember_spec import RememberSpec
from tests.fixtures.forger import FORGED_NAMES, Forger
from tests.fixtures.temporal import DurableRig, durable_rig
from tests.workflows.test_quorum import PEOPLE, POLICY


def assert_all_refused(forger: Forger) -> None:
    updates = [a for a in forger.attempts if a.kind == "update"]
    assert updates, "no forged update was sent"
    assert not forger.accepted(), forger.accepted()
    for attempt in updates:
        assert attempt.answer.startswith("refused"), attempt
        if attempt.shape.startswith("sealed"):
            # A readable forgery is refused for its proof, before anything else.
            assert attempt.reason == "unproven", attempt
        else:
            # Plaintext never reaches the validator: the codec refuses it.
            assert "decoding" in attempt.answer or "refused" in attempt.answer, attempt


async def assert_no_invented_names(rig: DurableRig, repo: Any, session_id: str,
                                   tool_use_id: str) -> None:
    """Neither the call's row, its approval nor any event names a forged decider."""
    row = await repo.get_call(session_id, tool_use_id)
    events = [e.event.model_dump(mode="json")
              for e in await repo.timeline(session_id, tool_use_id)]
    text = json.dumps({"row": row.model_dump(mode="json") if row else None, "events": events})
    for name in FORGED_NAMES:
        assert name not in text, f"{name} appears in the store: {text[:2000]}"
    assert "key:admin" not in text


async def test_forged_decisions_leave_the_call_parked_and_a_genuine_one_still_works(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_f", name="write_file",
                            input={"path": "f.txt", "content": "forged"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_f")
        forger = Forger.on(temporal_env.client.service_client, temporal_env.client.namespace)
        wf = call_workflow_id(session.session_id, "tu_f")
        await forger.forge_all(wf, rid, decision="allow")
        await forger.forge_all(wf, rid, decision="allow_with_edits",
                               edited_input={"path": "f.txt", "content": "planted"})
        assert_all_refused(forger)

        # The signals were delivered before this update: had one counted, the
        # genuine decision below would be refused as "already decided".
        view = await rig.dispatcher.status(session.session_id, "tu_f")
        assert view.status == CallStatus.PARKED and view.decision is None
        assert not (rig.workspace / "f.txt").exists()
        stored = await sqlite_repo.get_approval(rid)
        assert stored.decision is None and stored.decided_by is None

        won = await rig.dispatcher.decide(rid, "allow", decided_by="ann", via="api",
                                          principal_id="key:ann-key")
        assert won.accepted and won.winner is not None, won
        assert won.winner.decided_by == "ann"
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "f.txt").read_text() == "forged"
        stored = await sqlite_repo.get_approval(rid)
        assert (stored.decided_by, stored.via, stored.principal_id) == (
            "ann", "api", "key:ann-key")
        await assert_no_invented_names(rig, sqlite_repo, session.session_id, "tu_f")


async def test_a_forged_deny_does_not_end_the_call(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_x", name="write_file", input={"path": "x.txt", "content": "x"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_x")
        forger = Forger.on(temporal_env.client.service_client, temporal_env.client.namespace)
        await forger.forge_all(call_workflow_id(session.session_id, "tu_x"), rid,
                               decision="deny", reason="forged deny")
        assert_all_refused(forger)
        won = await rig.dispatcher.decide(rid, "deny", decided_by="ann", reason="genuine")
        assert won.accepted and won.winner is not None and won.winner.decided_by == "ann"
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.USER_DENIED
        assert "genuine" in outcome.result.text and "forged" not in outcome.result.text
        await assert_no_invented_names(rig, sqlite_repo, session.session_id, "tu_x")


async def test_forged_quorum_votes_are_not_counted(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path, policy=POLICY,
                           **PEOPLE) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_q", name="write_file", input={"path": "q.txt", "content": "q"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_q")
        forger = Forger.on(temporal_env.client.service_client, temporal_env.client.namespace)
        wf = call_workflow_id(session.session_id, "tu_q")
        for who in ("alice", "bob", "carol"):
            await forger.forge_all(wf, rid, decided_by=who, approver=who,
                                   principal_id=f"approver:{who}")
        assert not forger.accepted()
        assert all(a.reason == "unproven" for a in forger.attempts
                   if a.kind == "update" and a.shape.startswith("sealed"))

        # One genuine vote: counted alone (no forged vote before it).
        first = await rig.dispatcher.decide(rid, "allow", decided_by="alice", via="link",
                                            principal_id="approver:alice", approver="alice")
        assert first.accepted and first.winner is None, first
        assert first.votes == ["alice"]
        view = await rig.dispatcher.status(session.session_id, "tu_q")
        assert view.status == CallStatus.PARKED and view.votes == ["alice"]
        assert not (rig.workspace / "q.txt").exists()

        second = await rig.dispatcher.decide(rid, "allow", decided_by="bob", via="link",
                                             principal_id="approver:bob", approver="bob")
        assert second.winner is not None and second.winner.votes == ["alice", "bob"]
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text


async def test_a_forged_remember_plants_no_rule(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_r", name="shell",
                            input={"command": "python3 -c 'print(1)'"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_r")
        forger = Forger.on(temporal_env.client.service_client, temporal_env.client.namespace)
        remember = RememberSpec(scope="workspace", ttl_seconds=30 * 24 * 3600,
                                command_prefix="python3")
        await forger.forge_all(call_workflow_id(session.session_id, "tu_r"), rid,
                               remember=remember.model_dump(mode="json"))
        assert_all_refused(forger)

        won = await rig.dispatcher.decide(rid, "deny", decided_by="ann", reason="no")
        assert won.accepted and won.winner is not None and won.winner.remember is None
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.USER_DENIED
        assert await sqlite_repo.list_remembered(project="default") == []
        await assert_no_invented_names(rig, sqlite_repo, session.session_id, "tu_r")


async def test_a_client_without_proof_keys_is_refused_with_a_clear_reason(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """A dispatcher whose client has the codec but no proof keys (a deployment
    whose API and workers disagree) is told why, with a typed reason."""
    from temporalio.client import Client

    from parkgate.approvals.decisions import RejectReason
    from parkgate.durable.dispatcher import DurableDispatcher
    from tests.fixtures.temporal import TEST_CONVERTER

    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_k", name="write_file", input={"path": "k.txt", "content": "k"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_k")
        bare = Client(temporal_env.client.service_client,
                      namespace=temporal_env.client.namespace, data_converter=TEST_CONVERTER)
        outsider = DurableDispatcher(bare, rig.settings, approvals=sqlite_repo)
        refused = await outsider.decide(rid, "allow", decided_by="ann")
        assert not refused.accepted and refused.reason == RejectReason.UNPROVEN
        assert "proof" in refused.message
        won = await rig.dispatcher.decide(rid, "deny", decided_by="ann")
        assert won.accepted
        assert (await handle.result()).error_class == ToolErrorClass.USER_DENIED


ATTACK = '''
import asyncio, sys
from temporalio.client import Client, WorkflowUpdateFailedError

async def main():
    address, workflow_id, request_id = sys.argv[1:4]
    try:
        client = await Client.connect(address)
    except Exception as exc:
        print("UNREACHABLE", type(exc).__name__)
        return
    forged = {"request_id": request_id, "decision": "allow", "decided_by": "alice",
              "via": "api", "principal_id": "key:admin", "approver": "alice",
              "remember": {"scope": "workspace", "ttl_seconds": 2592000,
                           "command_prefix": "python3"}}
    handle = client.get_workflow_handle(workflow_id)
    try:
        await handle.signal("decide", forged)
        print("SIGNAL-SENT")
    except Exception as exc:
        print("SIGNAL-FAILED", type(exc).__name__)
    try:
        print("ACCEPTED", await handle.execute_update("decide", forged))
    except WorkflowUpdateFailedError as exc:
        print("REFUSED", exc.cause)
    except Exception as exc:
        print("FAILED", type(exc).__name__, exc)

asyncio.run(asyncio.wait_for(main(), 60))
'''


async def test_an_approved_shell_command_cannot_decide_another_call(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The issue's repro as a tool runs it: one approved shell command uses the
    Temporal SDK against the frontend to approve a parked write (and plant a
    `python3` rule). Whether it reaches the port (same network) or not (a
    network namespace), nothing it sends is accepted."""
    # Real time: while the shell runs, skipped time must not end the parked call.
    with temporal_env.auto_time_skipping_disabled():
        await _shell_attack(temporal_env, sqlite_repo, tmp_path)


async def _shell_attack(temporal_env: WorkflowEnvironment, sqlite_repo: Any,
                        tmp_path: Path) -> None:
    import sys

    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path,
                           approval_expiry_seconds=0) as rig:
        session = rig.session()
        target = ToolUseBlock(id="tu_t", name="write_file",
                              input={"path": "t.txt", "content": "planted"})
        parked = await rig.dispatcher.start(target, session)
        rid = await rig.wait_parked(session.session_id, "tu_t")

        (rig.workspace / "attack.py").write_text(ATTACK)
        address = temporal_env.client.service_client.config.target_host
        command = (f"{sys.executable} attack.py {address} "
                   f"{call_workflow_id(session.session_id, 'tu_t')} {rid}")
        shell = ToolUseBlock(id="tu_sh", name="shell", input={"command": command})
        ran = await rig.dispatcher.start(shell, session)
        shell_rid = await rig.wait_parked(session.session_id, "tu_sh")
        assert (await rig.dispatcher.decide(shell_rid, "allow", decided_by="ann")).accepted
        out = (await ran.result()).result.text
        assert "ACCEPTED" not in out, out
        assert "REFUSED" in out or "UNREACHABLE" in out, out

        view = await rig.dispatcher.status(session.session_id, "tu_t")
        assert view.status == CallStatus.PARKED and view.decision is None, view
        assert not (rig.workspace / "t.txt").exists()
        won = await rig.dispatcher.decide(rid, "deny", decided_by="ann", reason="no")
        assert won.accepted and won.winner is not None and won.winner.decided_by == "ann"
        assert (await parked.result()).error_class == ToolErrorClass.USER_DENIED
        assert await sqlite_repo.list_remembered(project="default") == []
        await assert_no_invented_names(rig, sqlite_repo, session.session_id, "tu_t")


async def test_rotation_the_new_key_signs_and_the_old_one_still_verifies(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """Workers with payload keys {old, new} (new current) accept decisions an
    API still signing with the old key proves (it already knows the new one,
    docs/OPERATIONS.md's rotation order), and ones an API on the new key proves."""
    import base64

    from parkgate.durable.codec import EncryptionCodec
    from parkgate.durable.converter import converter_with
    from parkgate.durable.dispatcher import DurableDispatcher
    from parkgate.durable.plugin import ParkgatePlugin, proof_keys_of, with_plugin
    from tests.fixtures.temporal import TEST_PAYLOAD_KEY_ID, TEST_PAYLOAD_KEYS

    old = base64.urlsafe_b64decode(TEST_PAYLOAD_KEYS[TEST_PAYLOAD_KEY_ID])
    rotated = EncryptionCodec({TEST_PAYLOAD_KEY_ID: old, "rotated-2": b"r" * 32}, "rotated-2")
    client = with_plugin(temporal_env.client, ParkgatePlugin(converter=converter_with(rotated)))
    new_keys = proof_keys_of(client)
    assert new_keys is not None and new_keys.current == "rotated-2"
    async with durable_rig(client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        # Mid-rotation: this API knows the new key (it reads what the workers
        # write with it) but still signs and encrypts with the old one.
        knows_both = EncryptionCodec({TEST_PAYLOAD_KEY_ID: old, "rotated-2": b"r" * 32},
                                     TEST_PAYLOAD_KEY_ID)
        on_old = DurableDispatcher(
            with_plugin(temporal_env.client,
                        ParkgatePlugin(converter=converter_with(knows_both))),
            rig.settings, approvals=sqlite_repo)
        for tool_use_id, dispatcher, key_id in (("tu_old", on_old, TEST_PAYLOAD_KEY_ID),
                                                ("tu_new", rig.dispatcher, "rotated-2")):
            call = ToolUseBlock(id=tool_use_id, name="write_file",
                                input={"path": f"{tool_use_id}.txt", "content": key_id})
            handle = await rig.dispatcher.start(call, session)
            rid = await rig.wait_parked(session.session_id, tool_use_id)
            sent = dispatcher.proven(
                DecideInput(request_id=rid, decision="allow", decided_by="ann"),
                call_workflow_id(session.session_id, tool_use_id))
            assert sent.proof is not None and sent.proof.key_id == key_id
            won = await dispatcher.decide(rid, "allow", decided_by="ann")
            assert won.accepted and won.winner is not None, (key_id, won)
            assert (await handle.result()).status == CallStatus.SUCCEEDED
            assert (rig.workspace / f"{tool_use_id}.txt").read_text() == key_id


async def test_forged_decisions_on_a_composed_sub_call_are_refused(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """A sub-call's request is decided through its SubCallApproval workflow: a
    direct Temporal client cannot decide it either; the API still can (its
    update, here not awaited: the decide signal is retired, issue 37)."""
    from tests.workflows.test_composed import PARENT_AUTO, TwoWrites, wait_request

    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path, policy=PARENT_AUTO,
                           extra_tools=[TwoWrites]) as rig:
        session = rig.session()
        sid = session.session_id
        handle = await rig.dispatcher.start(
            ToolUseBlock(id="tu_fs", name="two_writes", input={"text": "x"}), session)
        rid = await wait_request(sqlite_repo, sid, "tu_fs.1")
        forger = Forger.on(temporal_env.client.service_client, temporal_env.client.namespace)
        wf = call_workflow_id(sid, "tu_fs.1")
        await forger.forge_all(wf, rid, decision="allow")
        assert_all_refused(forger)
        view = await rig.dispatcher.status(sid, "tu_fs.1")
        assert view.status == CallStatus.PARKED and view.decision is None
        assert not (rig.workspace / "first.txt").exists()

        sent = await rig.dispatcher.decide(rid, "deny", decided_by="ann", wait=False)
        assert sent.accepted and sent.message == "decision accepted (not awaited)"
        second = await wait_request(sqlite_repo, sid, "tu_fs.2")
        await rig.dispatcher.decide(second, "deny", decided_by="ann")
        outcome = await handle.result()
        assert outcome.result.text.splitlines()[:2] == [
            "first.txt: user_denied", "second.txt: user_denied"]
        stored = await sqlite_repo.get_approval(rid)
        assert stored.decision == "deny" and stored.decided_by == "ann"
        await assert_no_invented_names(rig, sqlite_repo, sid, "tu_fs")
