"""A human approves (or denies) a parked call at the moment the agent cancels it.

Whichever lands first, the stored truth must match what each side was told:
an approval answered 200 is the recorded decision; a call reported
`cancelled` never completed its write; a call that ran was approved; a human
resolution is recorded exactly when a human was told theirs won, and the
events agree with the final status.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import api_rig

ROUNDS = 48


async def test_decide_and_cancel_at_once_leave_one_truth(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, pg_repo, tmp_path) as api:
        sid = await api.register()
        # Enough rounds to meet the rare interleavings (a cancel landing just
        # after the write) on most runs; 15-30 s.
        for round_no in range(ROUNDS):
            call_id = f"toolu_dc{round_no}"
            target = f"dc{round_no}.txt"
            decision = "deny" if round_no % 4 == 3 else "allow"
            await api.submit(sid, "write_file", {"path": target, "content": "x"},
                             call_id=call_id)
            parked = await api.wait_parked(sid, call_id)
            decide = api.http.post(
                f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
                json={"decision": decision, "reason": "race"},
            )
            cancel = api.http.post(f"/v1/sessions/{sid}/tool-calls/{call_id}/cancel")
            if round_no % 2:
                decided, cancelled = await asyncio.gather(decide, cancel)
            else:
                cancelled, decided = await asyncio.gather(cancel, decide)
            assert decided.status_code in (200, 409), decided.text
            assert cancelled.status_code == 200, cancelled.text

            done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}",
                                       params={"wait": 30})).json()
            status = done["status"]
            assert status in ("succeeded", "denied", "cancelled"), done
            approval = await api.repo.get_approval(parked["request_id"])
            assert approval is not None
            events = [e.event.type for e in await api.repo.timeline(sid, call_id)]
            # A human resolution is recorded exactly when a human was told it won.
            resolved = events.count("tool.confirmation_resolved")
            assert resolved == (1 if decided.status_code == 200 else 0), (events, decided.text)
            written = (api.workspace / target).exists()
            # A write happened only after its intent was recorded, and a
            # completed write is on disk (a cancel may stop it in between).
            assert not written or "tool.called" in events, events
            assert written or "tool.completed" not in events, events
            if decided.status_code == 200:
                # The human was told their decision won: it is the recorded one.
                assert approval.decision == decision, (approval, events)
            else:
                assert approval.decision != decision or status == "cancelled", approval
            if status == "succeeded":
                assert decided.status_code == 200 and decision == "allow" and written
            if status == "denied":
                assert decided.status_code == 200 and decision == "deny" and not written
            if status == "cancelled":
                # A cancel that lands after the approved write completed (its
                # heartbeat response brings it while the outcome is stored)
                # leaves the call `succeeded`: `cancelled` means nothing was written.
                assert not written and "tool.completed" not in events, (done, events)
