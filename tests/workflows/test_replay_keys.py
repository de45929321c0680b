"""Replay never depends on the worker's keys (issue 37).

Histories recorded under one key set (a claim taken at release, a `decide`
signal, a late outcome) replay identically under another: proofs are checked
in activities (their verdict is in history) or in update validators (which do
not replay), never in code Temporal replays. The replay runs in a fresh
process: proof keys installed in a process are only ever added, so this one
still holds the recording keys.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from parkgate.approvals import proof
from parkgate.approvals.decisions import DecideInput
from parkgate.calls.records import CallRef, CallStatus
from parkgate.client_tools.declared import ClientToolSpec
from parkgate.durable.client_payloads import (
    LATE_OUTCOME_WORKFLOW,
    UPDATE_CLAIM,
    UPDATE_OUTCOME,
    ClaimInput,
    ClaimResult,
    LateOutcomeInput,
    LateOutcomeResult,
    OutcomeInput,
    OutcomeResult,
    late_workflow_id,
)
from parkgate.durable.codec import ENCODING
from parkgate.durable.payloads import SIGNAL_DECIDE, call_workflow_id
from parkgate.durable.plugin import proof_keys_of
from parkgate.models import TextBlock, ToolUseBlock, input_sha256
from tests.fixtures.temporal import TEST_CODEC, durable_rig

#: Replays every history file named on the command line with a plugin whose
#: only payload (and so proof) key is another one; prints the failures.
_REPLAY_UNDER_OTHER_KEYS = """
import asyncio, json, sys
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from parkgate import workflows
from parkgate.durable.codec import EncryptionCodec
from parkgate.durable.converter import converter_with
from parkgate.durable.plugin import ParkgatePlugin

async def main():
    other = EncryptionCodec({"other-1": b"o" * 32}, "other-1")
    replayer = Replayer(workflows=list(workflows.ALL),
                        plugins=[ParkgatePlugin(converter=converter_with(other))])
    failures = {}
    for path in sys.argv[1:]:
        doc = json.loads(open(path).read())
        history = WorkflowHistory.from_json(doc["workflow_id"], doc["history"])
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[path] = str(result.replay_failure)
    print(json.dumps(failures))

asyncio.run(main())
"""


async def _plaintext(node: Any) -> Any:
    """`node` (a history as JSON) with every payload decrypted by the recording
    keys: what a replayer with other keys can read (its codec is lenient)."""
    if isinstance(node, dict):
        meta = node.get("metadata")
        if isinstance(meta, dict) and "encoding" in meta:
            payload = json_format.ParseDict(node, Payload())
            if payload.metadata["encoding"] != ENCODING:
                return node  # written in the clear (core's markers, say)
            [clear] = await TEST_CODEC.decode([payload])
            return json_format.MessageToDict(clear)
        return {k: await _plaintext(v) for k, v in node.items()}
    if isinstance(node, list):
        return [await _plaintext(v) for v in node]
    return node


async def _export(handle: WorkflowHandle[Any, Any], path: Path) -> Path:
    history = await handle.fetch_history()
    doc = {"workflow_id": history.workflow_id,
           "history": await _plaintext(history.to_json_dict())}
    await asyncio.to_thread(path.write_text, json.dumps(doc))
    return path


async def test_histories_replay_under_other_keys(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    keys = proof_keys_of(temporal_env.client)
    assert keys is not None
    lookup = ClientToolSpec(name="lookup", description="lookup", side_effects="read",
                            input_schema={"type": "object"}).definition()
    deploy = ClientToolSpec(name="deploy", description="deploy", side_effects="execute",
                            input_schema={"type": "object"}).definition()
    exported: list[Path] = []
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        d = rig.dispatcher
        session = rig.session()

        # 1. Policy releases a read at once; the submitter's proven claim is taken.
        wid = call_workflow_id(session.session_id, "at_release")
        claim = proof.prove(ClaimInput(claimed_by="key:k1", lease_seconds=300),
                            proof.KIND_CLAIM_AT_RELEASE, wid, keys)
        handle = await d.start(ToolUseBlock(id="at_release", name="lookup", input={"k": 1}),
                               session, [lookup], claim=claim)
        while (await d.status(session.session_id, "at_release")).status != CallStatus.CLAIMED:
            await asyncio.sleep(0.05)
        report = proof.prove(OutcomeInput(content=[TextBlock(text="v")],
                                          input_sha256=input_sha256({"k": 1}),
                                          reported_by="key:k1"),
                             proof.KIND_OUTCOME, wid, keys)
        await handle.execute_update(UPDATE_OUTCOME, report, result_type=OutcomeResult)
        assert (await handle.result()).status == CallStatus.SUCCEEDED
        exported.append(await _export(handle, tmp_path / "at_release.json"))

        # 2. A proven decide signal (retired: ignored), then the decide update.
        handle = await d.start(ToolUseBlock(id="signalled", name="write_file",
                                            input={"path": "s.txt", "content": "s"}), session)
        rid = await rig.wait_parked(session.session_id, "signalled")
        signal = d.proven(DecideInput(request_id=rid, decision="allow", decided_by="sig"),
                          call_workflow_id(session.session_id, "signalled"))
        await handle.signal(SIGNAL_DECIDE, signal)
        await d.decide(rid, "allow", decided_by="ann")
        assert (await handle.result()).status == CallStatus.SUCCEEDED
        exported.append(await _export(handle, tmp_path / "signalled.json"))

        # 3. A claimed call whose lease ends, then its late (proven) outcome.
        handle = await d.start(ToolUseBlock(id="late", name="deploy", input={"s": 1}),
                               session, [deploy])
        rid = await rig.wait_parked(session.session_id, "late")
        await d.decide(rid, "allow", decided_by="ann")
        while (await d.status(session.session_id, "late")).status != CallStatus.RELEASED:
            await asyncio.sleep(0.05)
        wid = call_workflow_id(session.session_id, "late")
        won_claim = await handle.execute_update(
            UPDATE_CLAIM, proof.prove(ClaimInput(claimed_by="key:k1", lease_seconds=60),
                                      proof.KIND_CLAIM, wid, keys),
            result_type=ClaimResult)
        await temporal_env.sleep(120)
        assert (await handle.result()).status == CallStatus.OUTCOME_UNKNOWN
        late_id = late_workflow_id(session.session_id, "late")
        late = proof.prove(OutcomeInput(content=[TextBlock(text="ran")],
                                        input_sha256=won_claim.input_sha256,
                                        reported_by="key:k1"),
                           proof.KIND_OUTCOME, late_id, keys)
        ref = CallRef(session_id=session.session_id, tool_use_id="late",
                      turn_id=session.turn_id, tool_name="deploy")
        late_handle = await temporal_env.client.start_workflow(
            LATE_OUTCOME_WORKFLOW, LateOutcomeInput(ref=ref, report=late, side_effects="execute"),
            id=late_id, task_queue=rig.settings.temporal_task_queue,
            result_type=LateOutcomeResult)
        assert (await late_handle.result()).outcome.late
        exported.append(await _export(late_handle, tmp_path / "late.json"))

        # 4. A release nobody claims ends unclaimed (its timer replays too).
        handle = await d.start(ToolUseBlock(id="unclaimed", name="deploy", input={"s": 2}),
                               session, [deploy])
        rid = await rig.wait_parked(session.session_id, "unclaimed")
        await d.decide(rid, "allow", decided_by="ann")
        await temporal_env.sleep(rig.settings.client_unclaimed_seconds + 60)
        assert (await handle.result()).status == CallStatus.UNCLAIMED
        exported.append(await _export(handle, tmp_path / "unclaimed.json"))

    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", _REPLAY_UNDER_OTHER_KEYS, *map(str, exported)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}, done.stdout[-4000:]
