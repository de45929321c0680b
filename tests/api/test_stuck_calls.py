"""HTTP view of calls whose workflow task cannot heal (docs/DURABLE.md).

A call started under a payload key no worker has is wedged before it is
classified: GET answers 202 with `problem` (never a 503), cancel ends it at
once, and a session cancel counts one that has no store row.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from temporalio.client import Client

from parkgate.durable.codec import EncryptionCodec
from parkgate.durable.converter import converter_with
from parkgate.durable.payloads import CALL_WORKFLOW, CallInput, call_workflow_id
from parkgate.durable.stuck import diagnose
from parkgate.models import Session, ToolUseBlock
from tests.api.rig import ApiRig


async def wedge(api: ApiRig, sid: str, tool_use_id: str) -> str:
    """Start a call under a retired key and wait until its task has failed once."""
    client: Client = api.rig.client
    codec = EncryptionCodec({"retired": os.urandom(32)}, "retired")
    foreign = await Client.connect(
        client.service_client.config.target_host, data_converter=converter_with(codec)
    )
    session = Session(session_id=sid, turn_id="t1", workspace_path=str(api.workspace))
    call = ToolUseBlock(id=tool_use_id, name="write_file", input={"path": "w", "content": "x"})
    workflow_id = call_workflow_id(sid, tool_use_id)
    await foreign.start_workflow(
        CALL_WORKFLOW, CallInput(call=call, session=session), id=workflow_id,
        task_queue=api.rig.settings.temporal_task_queue,
    )
    for _ in range(300):
        if await diagnose(client, workflow_id) is not None:
            return workflow_id
        await asyncio.sleep(0.1)
    raise AssertionError("the call's task never failed")


async def test_get_and_cancel_of_a_wedged_call(api: ApiRig) -> None:
    sid = await api.register()
    await wedge(api, sid, "toolu_w1")
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w1")
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    assert body["status"] == "queued" and not body["finished"]
    assert "cannot heal" in body["problem"] and "unknown key id 'retired'" in body["problem"]

    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_w1/cancel")
    assert r.status_code == 200, r.text
    assert r.json() == {"cancelled": True, "status": "cancelled", "message": "cancelled"}
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w1")
    assert r.status_code == 200
    done = r.json()
    assert done["status"] == "cancelled" and done["error_class"] == "cancelled"
    assert "unknown key id 'retired'" in done["result"]["content"][0]["text"]
    events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w1/events")).json()
    [failed] = events["events"]
    assert failed["type"] == "tool.failed" and failed["data"]["ended_by"] == "cancel"

    # A session cancel also ends a wedged call the store has no row for.
    await wedge(api, sid, "toolu_w2")
    r = await api.http.post(f"/v1/sessions/{sid}/cancel")
    assert r.status_code == 200 and r.json()["cancelled"] == 1
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w2")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
