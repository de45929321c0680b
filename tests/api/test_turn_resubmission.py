"""Issue 28 (6): the same tool_use id in another turn, through the batch route.

Before, a batch in a later turn started the finished call's workflow again: the
tool ran a second time and every event it wrote contradicted the stored one
(a store integrity error each time, the metric operators alert on), and the
batch answer named the new turn. Now the batch attaches to the call as the
single-call route does, answers it with the turn it belongs to, and a
different call under the same id is a 409.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig

#: A shell call that runs without a human, so a second run would show.
AUTO_SHELL = {"rules": [{"tool": "shell", "mode": "auto"}]}


def _batch(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"calls": list(calls)}


def _integrity_gauge(metrics: str) -> float:
    found = re.search(r"^parkgate_store_integrity_errors (\S+)$", metrics, re.M)
    assert found, metrics
    return float(found.group(1))


async def test_same_id_in_another_turn_attaches_and_runs_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=AUTO_SHELL) as api:
        sid = await api.register()
        once = {"id": "toolu_once", "name": "shell", "input": {"command": "echo ran >> ran.txt"}}
        read = {"id": "toolu_read", "name": "read_file", "input": {"path": "ran.txt"}}
        base = f"/v1/sessions/{sid}/turns"
        first = await api.http.post(f"{base}/t1/tool-calls:batch", params={"wait": 30},
                                    json=_batch(once))
        assert first.status_code == 200, first.text
        assert (api.workspace / "ran.txt").read_text() == "ran\n"
        for attempt in range(3):  # an agent resubmitting, again and again
            again = await api.http.post(
                f"{base}/t{attempt + 2}/tool-calls:batch", params={"wait": 30},
                json=_batch(once, {**read, "id": f"toolu_read{attempt}"}))
            assert again.status_code == 200, again.text
            attached, fresh = again.json()["calls"]
            assert attached["tool_use_id"] == "toolu_once"
            assert attached["turn_id"] == "t1"  # the turn it belongs to, not the new one
            assert attached["status"] == "succeeded"
            assert attached["result"] == first.json()["calls"][0]["result"]
            assert fresh["turn_id"] == f"t{attempt + 2}" and fresh["status"] == "succeeded"
        # Answered like the single-call route answers the same id in another turn.
        single = await api.http.post(f"{base}/t9/tool-calls", params={"wait": 10}, json=once)
        assert single.status_code == 200 and single.json()["turn_id"] == "t1"
        # The tool ran once; no event was contradicted; the alarm stays at 0.
        assert (api.workspace / "ran.txt").read_text() == "ran\n"
        events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_once/events")).json()
        assert [e["type"] for e in events["events"]].count("tool.called") == 1
        assert {e["turn_id"] for e in events["events"]} == {"t1"}
        row = await api.repo.get_call(sid, "toolu_once")
        assert row is not None and row.turn_id == "t1"
        assert await api.repo.event_conflicts() == []
        assert _integrity_gauge((await api.http.get("/metrics")).text) == 0


async def test_same_id_with_other_input_in_another_turn_is_a_409(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "a.txt").write_text("a")
    (api.workspace / "b.txt").write_text("b")
    base = f"/v1/sessions/{sid}/turns"
    call = {"id": "toolu_a", "name": "read_file", "input": {"path": "a.txt"}}
    r = await api.http.post(f"{base}/t1/tool-calls", params={"wait": 20}, json=call)
    assert r.status_code == 200, r.text
    other = {**call, "input": {"path": "b.txt"}}
    r = await api.http.post(f"{base}/t2/tool-calls:batch", json=_batch(other))
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "idempotency_conflict"
    same_route = await api.http.post(f"{base}/t2/tool-calls", json=other)
    assert same_route.status_code == 409  # the single-call route answers the same
    row = await api.repo.get_call(sid, "toolu_a")
    assert row is not None and row.turn_id == "t1" and row.input == {"path": "a.txt"}
    assert await api.repo.event_conflicts() == []


async def test_a_parked_call_of_another_turn_is_attached_not_failed(api: ApiRig) -> None:
    """A call still parked in turn t1, resubmitted in a batch of turn t2: the
    batch shows it parked (its own turn), and one decision ends it for both."""
    sid = await api.register()
    write = {"id": "toolu_w", "name": "write_file",
             "input": {"path": "w.txt", "content": "w"}}
    base = f"/v1/sessions/{sid}/turns"
    assert (await api.http.post(f"{base}/t1/tool-calls", json=write)).status_code == 202
    parked = await api.wait_parked(sid, "toolu_w")
    r = await api.http.post(f"{base}/t2/tool-calls:batch", json=_batch(write))
    assert r.status_code == 202, r.text
    [shown] = r.json()["calls"]
    assert (shown["status"], shown["turn_id"]) == ("parked", "t1")
    decided = await api.http.post(
        f"{base}/t1/confirmations/{parked['request_id']}", json={"decision": "allow"})
    assert decided.status_code == 200, decided.text
    done = await api.http.post(f"{base}/t2/tool-calls:batch", params={"wait": 20},
                               json=_batch(write))
    assert done.status_code == 200, done.text
    [call] = done.json()["calls"]
    assert (call["status"], call["turn_id"]) == ("succeeded", "t1")
    human = await api.repo.verify_api_key(api.human_key)
    assert human is not None and call["decided_by"] == human.name
    assert (api.workspace / "w.txt").read_text() == "w"
    assert await api.repo.event_conflicts() == []
