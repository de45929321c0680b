"""Regenerate the replay histories: `python -m tests.histories.regenerate [NAME ...]`
(only the named histories when given, e.g. `quorum`; all of them otherwise).

Runs every path of the durable call (auto, approved, denied, expired,
cancelled, edited, turn, quorum, reminders, grouped, composed_sub_calls and
its sub_call_approval child, client_released,
client_lease, client_late_checked, client_claimed_at_release, client_float,
client_unclaimed, signal_retired, client_reserved) on the time-skipping test server with
a worker from
the production recipe and a throwaway migrated SQLite store, then saves each
workflow's history as JSON next to this file. Machine-specific paths (the
temporary workspace) are replaced by WORKSPACE_PLACEHOLDER inside payloads.

Regenerate only when a history-changing edit is intended AND guarded with
`workflow.patched` (see docs/DURABLE.md): the old files must keep replaying.
Before regenerating for a patched change, rename the affected old files (e.g.
auto.json -> auto_pre_patch.json) and list them in LEGACY in
tests/workflows/test_replay.py, so both branches of the patch stay covered.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from parkgate.approvals.decisions import DecideInput
from parkgate.durable.payloads import SIGNAL_DECIDE, call_workflow_id
from parkgate.models import ToolUseBlock
from parkgate.store import Repository
from parkgate.store.migrate import upgrade_async
from parkgate.runtime.worker import serving
from tests.fixtures.forger import Forger
from tests.fixtures.temporal import TEST_PLUGIN, TEST_SERVER, DurableRig, durable_rig

HERE = Path(__file__).resolve().parent
WORKSPACE_PLACEHOLDER = "/srv/parkgate/workspace"


def scrub(value: Any, old: str, new: str) -> Any:
    """Replace `old` by `new` in every string and every base64 payload of a history dict."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "data" and isinstance(item, str):
                try:
                    raw = base64.b64decode(item, validate=True).decode("utf-8")
                except (ValueError, UnicodeDecodeError):
                    out[key] = item
                    continue
                out[key] = base64.b64encode(raw.replace(old, new).encode("utf-8")).decode()
            else:
                out[key] = scrub(item, old, new)
        return out
    if isinstance(value, list):
        return [scrub(v, old, new) for v in value]
    if isinstance(value, str):
        return value.replace(old, new)
    return value


#: Histories to write (None = all): set from the command line.
ONLY: set[str] | None = None

#: A rule that needs two of three named approvers (the quorum path).
QUORUM_POLICY = {"rules": [{"tool": "write_file", "mode": "prompt",
                            "approvers": ["group:oncall"], "quorum": 2}]}
QUORUM_PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {}, "bob": {}, "carol": {}},
    "approver_groups": {"oncall": ["alice", "bob", "carol"]},
}


async def save(name: str, handle: WorkflowHandle[Any, Any], rig: DurableRig) -> None:
    if ONLY is not None and name not in ONLY:
        return
    history = await handle.fetch_history()
    doc = {
        "workflow_id": history.workflow_id,
        "history": scrub(history.to_json_dict(), str(rig.workspace), WORKSPACE_PLACEHOLDER),
    }
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if tempfile.gettempdir() in text or str(rig.workspace) in text:
        raise SystemExit(f"{name}: a machine path survived scrubbing")
    (HERE / f"{name}.json").write_text(text)
    print(f"wrote {name}.json ({len(history.events)} events)")


async def generate(env: WorkflowEnvironment, store: Repository, tmp: Path) -> None:
    async with durable_rig(env.client, store, tmp) as rig:
        d = rig.dispatcher
        (rig.workspace / "README.md").write_text("# replay\n")
        session = rig.session("s-replay")

        auto = ToolUseBlock(id="auto", name="read_file", input={"path": "README.md"})
        handle = await d.start(auto, session)
        await handle.result()
        await save("auto", handle, rig)

        async def parked(tool_use_id: str, name: str, input: dict[str, Any]) -> tuple[Any, str]:
            h = await d.start(ToolUseBlock(id=tool_use_id, name=name, input=input), session)
            return h, await rig.wait_parked(session.session_id, tool_use_id)

        handle, rid = await parked("approved", "write_file", {"path": "a.txt", "content": "a"})
        await env.sleep(6 * 3600)
        await d.decide(rid, "allow", decided_by="alice", via="link")
        await handle.result()
        await save("approved", handle, rig)

        handle, rid = await parked("denied", "shell", {"command": "echo no"})
        await d.decide(rid, "deny", reason="not today", decided_by="bob")
        await handle.result()
        await save("denied", handle, rig)

        handle, rid = await parked("expired", "write_file", {"path": "e.txt", "content": "e"})
        await handle.result()
        await save("expired", handle, rig)

        handle, rid = await parked("cancelled", "write_file", {"path": "c.txt", "content": "c"})
        await handle.cancel()
        await handle.result()
        await save("cancelled", handle, rig)

        handle, rid = await parked("edited", "write_file", {"path": "x.txt", "content": "x"})
        rejected = await d.decide(rid, "allow_with_edits", edited_input={"path": "/etc/x"})
        assert not rejected.accepted
        await d.decide(
            rid, "allow_with_edits", edited_input={"path": "x.txt", "content": "edited"}
        )
        await handle.result()
        await save("edited", handle, rig)

        # Issue 37 (patch decide-signal-retired-v1): a forged plaintext signal,
        # a sealed one without a proof and a proven one are all ignored; the
        # decide update decides. ("proven_signal.json", kept, is the branch
        # before the patch: the proven signal decided.)
        handle, rid = await parked("signal_retired", "write_file",
                                   {"path": "p.txt", "content": "p"})
        forger = Forger.on(env.client.service_client, env.client.namespace)
        wf = call_workflow_id(session.session_id, "signal_retired")
        for shape, inp in forger.shapes(wf, rid, "allow")[:3:2]:  # plain, sealed
            await forger.signal(wf, shape, inp)
        await handle.signal(SIGNAL_DECIDE, d.proven(
            DecideInput(request_id=rid, decision="deny", decided_by="sig"), wf))
        await d.decide(rid, "allow", decided_by="ann", via="api")
        await handle.result()
        await save("signal_retired", handle, rig)

        calls = [
            ToolUseBlock(id="turn-a", name="read_file", input={"path": "README.md"}),
            ToolUseBlock(id="turn-b", name="list_dir", input={"path": "."}),
            ToolUseBlock(id="turn-c", name="no_such_tool", input={}),
        ]
        turn = (await d.start_turn(calls, session)).handle
        assert turn is not None
        await turn.result()
        # "turn.json" (kept) predates the turn-child-no-rerun patch.
        await save("turn_no_rerun", turn, rig)

    quorum_tmp = tmp / "quorum"
    quorum_tmp.mkdir()
    async with durable_rig(env.client, store, quorum_tmp, policy=QUORUM_POLICY,
                           **QUORUM_PEOPLE) as rig:
        d = rig.dispatcher
        session = rig.session("s-replay-quorum")
        call = ToolUseBlock(id="quorum", name="write_file", input={"path": "q.txt", "content": "q"})
        handle = await d.start(call, session)
        rid = await rig.wait_parked(session.session_id, "quorum")

        async def vote(who: str) -> None:
            await d.decide(rid, "allow", decided_by=who, via="link",
                           principal_id=f"approver:{who}", approver=who)

        await vote("alice")
        await vote("alice")  # rejected by the validator: counted once
        await env.sleep(3600)
        await vote("carol")
        await handle.result()
        await save("quorum", handle, rig)

    # Reminder and escalation timers while parked (the reminders-v1 patch):
    # the request, a reminder after an hour, the escalation after two, then
    # an escalated approver allows.
    from tests.api.rig import WebhookSink

    remind_tmp = tmp / "reminders"
    remind_tmp.mkdir()
    async with WebhookSink().running() as sink, durable_rig(
        env.client, store, remind_tmp, webhooks=[{"url": sink.url}],
        policy={"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"],
                           "remind_after_seconds": 3600, "escalate_after_seconds": 7200,
                           "escalate_to": ["dave"]}]},
        approvers={"alice": {}, "dave": {}},
    ) as rig:
        d = rig.dispatcher
        session = rig.session("s-replay-reminders")
        call = ToolUseBlock(id="reminders", name="write_file",
                            input={"path": "r.txt", "content": "r"})
        handle = await d.start(call, session)
        rid = await rig.wait_parked(session.session_id, "reminders")
        await env.sleep(7300)
        while len(sink.received) < 3:
            await asyncio.sleep(0.05)
        await d.decide(rid, "allow", decided_by="dave", via="link",
                       principal_id="approver:dave", approver="dave")
        await handle.result()
        await save("reminders", handle, rig)

    # The Slack path: the message is posted (parkgate.slack_post) and, at the
    # end, the SlackOutcome child is started; Slack is the local fake.
    from tests.api.fake_slack import BOT_TOKEN, CHANNEL, SIGNING_SECRET, FakeSlack

    slack_tmp = tmp / "slack"
    slack_tmp.mkdir()
    async with FakeSlack().running() as fake, durable_rig(
        env.client, store, slack_tmp,
        policy={"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"]}]},
        approvers={"alice": {"slack_user_id": "U0ALICE"}}, slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET, slack_channel=CHANNEL, slack_api_url=fake.api_url,
    ) as rig:
        d = rig.dispatcher
        session = rig.session("s-replay-slack")
        call = ToolUseBlock(id="slack", name="write_file", input={"path": "s.txt", "content": "s"})
        handle = await d.start(call, session)
        rid = await rig.wait_parked(session.session_id, "slack")
        while not fake.posted():
            await asyncio.sleep(0.05)
        await d.decide(rid, "allow", decided_by="alice", via="slack",
                       principal_id="approver:alice", approver="alice")
        await handle.result()
        while not any(m == "chat.update" for m, _ in fake.calls):
            await asyncio.sleep(0.05)
        await save("slack", handle, rig)

    # A session with a worker group: classify, revalidate and execute are
    # regular activities on `<queue>.hosts` (dispatcher.worker_groups).
    grouped_tmp = tmp / "grouped"
    grouped_tmp.mkdir()
    async with durable_rig(env.client, store, grouped_tmp,
                           worker_groups={"hosts": [str(grouped_tmp / "workspace")]}) as rig:
        d = rig.dispatcher
        (rig.workspace / "README.md").write_text("# grouped\n")
        host = rig.settings.model_copy(update={"serve_main_queue": False,
                                               "serve_groups": ["hosts"]})
        async with serving(env.client, host, rig.deps):
            session = rig.session("s-replay-grouped").model_copy(
                update={"worker_group": "hosts"}
            )
            handle = await d.start(
                ToolUseBlock(id="grouped_auto", name="read_file", input={"path": "README.md"}),
                session,
            )
            await handle.result()
            await save("grouped_auto", handle, rig)
            handle = await d.start(
                ToolUseBlock(id="grouped", name="write_file", input={"path": "g.txt",
                                                                    "content": "g"}),
                session,
            )
            rid = await rig.wait_parked(session.session_id, "grouped")
            await d.decide(
                rid, "allow_with_edits", edited_input={"path": "g.txt", "content": "edited"}
            )
            await handle.result()
            await save("grouped", handle, rig)

    # A non-atomic composed tool (issue 37): its run parks at sub-call 1, the
    # SubCallApproval child waits and is allowed, the resumed run parks at 2,
    # denied, the run ends; both the call's and the first child's histories.
    from tests.workflows.test_composed import PARENT_AUTO, TwoWrites, wait_request

    composed_tmp = tmp / "composed"
    composed_tmp.mkdir()
    async with durable_rig(env.client, store, composed_tmp, policy=PARENT_AUTO,
                           extra_tools=[TwoWrites]) as rig:
        d = rig.dispatcher
        session = rig.session("s-replay-composed")
        handle = await d.start(
            ToolUseBlock(id="composed", name="two_writes", input={"text": "c"}), session)
        first = await wait_request(store, session.session_id, "composed.1")
        await d.decide(first, "allow", decided_by="ann", via="link")
        second = await wait_request(store, session.session_id, "composed.2")
        await d.decide(second, "deny", reason="not that one", decided_by="ann")
        await handle.result()
        await save("composed_sub_calls", handle, rig)
        child = env.client.get_workflow_handle(
            call_workflow_id(session.session_id, "composed.1"))
        await save("sub_call_approval", child, rig)


CLIENT_PATHS = {"client_released", "client_lease", "client_late_checked",
                "client_claimed_at_release", "client_float", "client_unclaimed",
                "client_reserved"}
#: An input whose RFC 8785 and json.dumps forms differ (floats, an astral key).
FLOAT_INPUT = {"service": "api", "ratio": 0.1, "one": 1.0, "big": 1e21, "ﬁ": "x", "😀": "y"}


async def client_paths(env: WorkflowEnvironment, store: Repository, tmp: Path) -> None:
    """Client-executed calls (issue 24): released, claimed, reported; and a
    claim whose lease ends with no outcome (outcome_unknown)."""
    from parkgate.approvals import proof
    from parkgate.client_tools.declared import ClientToolSpec
    from parkgate.durable.client_payloads import (
        KIND_START,
        LATE_OUTCOME_WORKFLOW,
        UPDATE_CLAIM,
        UPDATE_OUTCOME,
        UPDATE_START,
        ClaimInput,
        ClaimResult,
        LateOutcomeInput,
        LateOutcomeResult,
        OutcomeInput,
        OutcomeResult,
        StartInput,
        late_workflow_id,
    )
    from parkgate.durable.payloads import call_workflow_id
    from parkgate.durable.plugin import proof_keys_of
    from parkgate.models import TextBlock, input_sha256, legacy_input_sha256
    from parkgate.calls.records import CallRef, CallStatus

    client_tmp = tmp / "client"
    client_tmp.mkdir()
    deploy = ClientToolSpec(name="deploy", description="deploy", side_effects="execute",
                            input_schema={"type": "object"}).definition()
    keys = proof_keys_of(env.client)
    assert keys is not None
    async with durable_rig(env.client, store, client_tmp) as rig:
        d = rig.dispatcher
        session = rig.session("s-replay-client")

        async def released(tool_use_id: str, inp: dict[str, Any] | None = None) -> Any:
            handle = await d.start(ToolUseBlock(id=tool_use_id, name="deploy",
                                                input=inp or {"service": tool_use_id}),
                                   session, [deploy])
            rid = await rig.wait_parked(session.session_id, tool_use_id)
            await d.decide(rid, "allow", decided_by="alice", via="link")
            while (await d.status(session.session_id, tool_use_id)).status != \
                    CallStatus.RELEASED:
                await asyncio.sleep(0.05)
            wid = call_workflow_id(session.session_id, tool_use_id)
            claim = proof.prove(ClaimInput(claimed_by="key:k1", lease_seconds=300),
                                proof.KIND_CLAIM, wid, keys)
            won = await handle.execute_update(UPDATE_CLAIM, claim, result_type=ClaimResult)
            return handle, wid, won

        handle, wid, won = await released("client_released")
        report = proof.prove(OutcomeInput(content=[TextBlock(text="done")],
                                          input_sha256=won.input_sha256,
                                          reported_by="key:k1"),
                             proof.KIND_OUTCOME, wid, keys)
        await handle.execute_update(UPDATE_OUTCOME, report, result_type=OutcomeResult)
        await handle.result()
        await save("client_released", handle, rig)

        handle, wid, won = await released("client_lease")
        await env.sleep(400)
        await handle.result()
        await save("client_lease", handle, rig)

        # The claimer reports after its lease: parkgate.LateOutcome records it.
        late_id = late_workflow_id(session.session_id, "client_lease")
        late = proof.prove(OutcomeInput(content=[TextBlock(text="it ran")],
                                        input_sha256=won.input_sha256, reported_by="key:k1"),
                           proof.KIND_OUTCOME, late_id, keys)
        ref = CallRef(session_id=session.session_id, tool_use_id="client_lease",
                      turn_id=session.turn_id, tool_name="deploy")
        late_handle = await env.client.start_workflow(
            LATE_OUTCOME_WORKFLOW, LateOutcomeInput(ref=ref, report=late, side_effects="execute"),
            id=late_id, task_queue=rig.settings.temporal_task_queue,
            result_type=LateOutcomeResult)
        await late_handle.result()
        # "client_late.json" (kept) predates late-outcome-proof-in-activity-v1.
        await save("client_late_checked", late_handle, rig)

        # Issue 27: policy releases a read at once and the submitter's claim
        # (CallInput.claim) is taken in the release's own write; then the outcome.
        lookup = ClientToolSpec(name="lookup", description="lookup", side_effects="read",
                                input_schema={"type": "object"}).definition()
        tid = "client_claimed_at_release"
        wid = call_workflow_id(session.session_id, tid)
        at_release = proof.prove(ClaimInput(claimed_by="key:k1", lease_seconds=300),
                                 proof.KIND_CLAIM_AT_RELEASE, wid, keys)
        handle = await d.start(ToolUseBlock(id=tid, name="lookup", input={"key": "k"}),
                               session, [lookup], claim=at_release)
        while (await d.status(session.session_id, tid)).status != CallStatus.CLAIMED:
            await asyncio.sleep(0.05)
        report = proof.prove(OutcomeInput(content=[TextBlock(text="v")],
                                          input_sha256=input_sha256({"key": "k"}),
                                          reported_by="key:k1"),
                             proof.KIND_OUTCOME, wid, keys)
        await handle.execute_update(UPDATE_OUTCOME, report, result_type=OutcomeResult)
        await handle.result()
        await save(tid, handle, rig)

        # Issue 37: released with the RFC 8785 input_sha256 (patch jcs-input-sha256);
        # a client of the release before reports the json.dumps form of the same
        # input, which is taken (patch either-input-sha256-form).
        handle, wid, won = await released("client_float", FLOAT_INPUT)
        assert won.input_sha256 == input_sha256(FLOAT_INPUT)
        report = proof.prove(OutcomeInput(content=[TextBlock(text="done")],
                                          input_sha256=legacy_input_sha256(FLOAT_INPUT),
                                          reported_by="key:k1"),
                             proof.KIND_OUTCOME, wid, keys)
        await handle.execute_update(UPDATE_OUTCOME, report, result_type=OutcomeResult)
        await handle.result()
        await save("client_float", handle, rig)

        # Issue 37: released, and no client claims it in time: unclaimed.
        tid = "client_unclaimed"
        handle = await d.start(ToolUseBlock(id=tid, name="deploy", input={"service": tid}),
                               session, [deploy])
        rid = await rig.wait_parked(session.session_id, tid)
        await d.decide(rid, "allow", decided_by="alice", via="link")
        await env.sleep(rig.settings.client_unclaimed_seconds + 60)
        assert (await handle.result()).status == CallStatus.UNCLAIMED
        await save(tid, handle, rig)

        # Issue 36 (patch claim-reservation): a claim is a reservation; the
        # first lapses unstarted, the next is taken over by its claimer, which
        # starts it and reports.
        tid = "client_reserved"
        wid = call_workflow_id(session.session_id, tid)
        handle = await d.start(ToolUseBlock(id=tid, name="deploy", input={"service": tid}),
                               session, [deploy])
        rid = await rig.wait_parked(session.session_id, tid)
        await d.decide(rid, "allow", decided_by="alice", via="link")
        while (await d.status(session.session_id, tid)).status != CallStatus.RELEASED:
            await asyncio.sleep(0.05)

        def reserve(claim_id: str) -> ClaimInput:
            return proof.prove(ClaimInput(claimed_by="key:k1", lease_seconds=300,
                                          claim_id=claim_id, reserve_seconds=30),
                               proof.KIND_CLAIM, wid, keys)

        await handle.execute_update(UPDATE_CLAIM, reserve("c1"), result_type=ClaimResult)
        await env.sleep(60)
        while (await d.status(session.session_id, tid)).status != CallStatus.RELEASED:
            await asyncio.sleep(0.05)
        await handle.execute_update(UPDATE_CLAIM, reserve("c2"), result_type=ClaimResult)
        won = await handle.execute_update(UPDATE_CLAIM, reserve("c3"), result_type=ClaimResult)
        start = proof.prove(StartInput(claim_id="c3", started_by="key:k1"), KIND_START, wid,
                            keys)
        await handle.execute_update(UPDATE_START, start, result_type=ClaimResult)
        report = proof.prove(OutcomeInput(content=[TextBlock(text="done")],
                                          input_sha256=won.input_sha256, reported_by="key:k1"),
                             proof.KIND_OUTCOME, wid, keys)
        await handle.execute_update(UPDATE_OUTCOME, report, result_type=OutcomeResult)
        await handle.result()
        await save(tid, handle, rig)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        url = f"sqlite+aiosqlite:///{tmp / 'history.db'}"
        await upgrade_async(url)
        store = await Repository.connect(url)
        env = await WorkflowEnvironment.start_time_skipping(
            test_server_existing_path=str(TEST_SERVER),
            plugins=[TEST_PLUGIN],
        )
        try:
            if ONLY is None or ONLY - CLIENT_PATHS:
                await generate(env, store, tmp)
            if ONLY is None or ONLY & CLIENT_PATHS:
                await client_paths(env, store, tmp)
        finally:
            await env.shutdown()
            await store.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        ONLY = set(sys.argv[1:])
    sys.exit(asyncio.run(main()))
