"""A cancelled call says who cancelled it, through which channel and why: in
its result text (GET /v1/tool-calls), its tool.failed event's data and the
audit chain, with a real worker, the Temporal dev server and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig

BEFORE_IT_RAN = "The call was cancelled before it ran"


@pytest.fixture
async def api(dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> AsyncIterator[ApiRig]:
    async with api_rig(dev_temporal, pg_repo, tmp_path) as rig:
        yield rig


async def key_name(api: ApiRig, key: str | None = None) -> str:
    found = await api.repo.verify_api_key(key or api.key)
    assert found is not None
    return found.name


async def parked(api: ApiRig, sid: str, call_id: str) -> None:
    await api.submit(sid, "write_file", {"path": f"{call_id}.txt", "content": "x"},
                     call_id=call_id)
    await api.wait_parked(sid, call_id)


async def ended(api: ApiRig, sid: str, call_id: str) -> dict[str, Any]:
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}", params={"wait": 30})
    body: dict[str, Any] = done.json()
    assert body["status"] == "cancelled", body
    return body


async def failed_events(api: ApiRig, sid: str, call_id: str) -> list[dict[str, Any]]:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["type"] == "tool.failed"]


async def audit_holds(api: ApiRig, sid: str) -> None:
    """`parkgate audit verify`'s checks: the chain and what the calls say."""
    report = await api.repo.verify_chain(sid)
    assert report.ok and report.problems == [], report
    meaning = await api.repo.verify_meaning(sid)
    assert list(meaning.problems) == [], meaning.problems


def text(body: dict[str, Any]) -> str:
    return str(body["result"]["content"][0]["text"])


async def test_rest_cancel_records_the_key_and_the_reason(api: ApiRig) -> None:
    sid = await api.register()
    await parked(api, sid, "toolu_w")
    name = await key_name(api)
    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_w/cancel",
                            json={"reason": "wrong branch"})
    assert r.status_code == 200 and r.json()["cancelled"] is True, r.text
    body = await ended(api, sid, "toolu_w")
    assert text(body) == f"{BEFORE_IT_RAN} (by key '{name}' via api: wrong branch)."
    [event] = await failed_events(api, sid, "toolu_w")
    assert event["error_class"] == "cancelled"
    assert event["data"]["cancelled_by"] == f"key '{name}'"
    assert event["data"]["via"] == "api" and event["data"]["reason"] == "wrong branch"
    stored = await api.repo.get_call(sid, "toolu_w")
    assert stored is not None and stored.result is not None and stored.result.text == text(body)
    await audit_holds(api, sid)
    assert not (api.workspace / "toolu_w.txt").exists()


async def test_a_cancel_without_a_body_names_the_key(api: ApiRig) -> None:
    sid = await api.register()
    await parked(api, sid, "toolu_n")
    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_n/cancel")
    assert r.status_code == 200, r.text
    body = await ended(api, sid, "toolu_n")
    assert text(body) == f"{BEFORE_IT_RAN} (by key '{await key_name(api)}' via api)."
    [event] = await failed_events(api, sid, "toolu_n")
    assert event["data"]["reason"] is None


@pytest.mark.parametrize("reason", [
    "no\x00nul", "x" * 501, "line\nbreak", "\u202eevil", "lone \ud800 surrogate",
])
async def test_a_hostile_reason_is_refused_and_the_call_stays_parked(
    api: ApiRig, reason: str
) -> None:
    sid = await api.register()
    await parked(api, sid, "toolu_h")
    # Sent as JSON escapes (a lone surrogate has no UTF-8 form).
    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_h/cancel",
                            content=json.dumps({"reason": reason}).encode(),
                            headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_h")
    assert still.json()["status"] == "parked"


async def test_a_body_that_is_not_utf8_or_json_is_refused(api: ApiRig) -> None:
    sid = await api.register()
    await parked(api, sid, "toolu_b")
    for raw in (b'{"reason": "\xff\xfe"}', b"not json", b'{"reason": 1}', b'{"why": "x"}'):
        r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_b/cancel", content=raw,
                                headers={"Content-Type": "application/json"})
        assert 400 <= r.status_code < 500, (raw, r.status_code, r.text)
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_b")
    assert still.json()["status"] == "parked"


async def test_session_cancel_names_the_key_and_the_channel(api: ApiRig) -> None:
    sid = await api.register()
    for i in range(2):
        await parked(api, sid, f"toolu_s{i}")
    name = await key_name(api)
    r = await api.http.post(f"/v1/sessions/{sid}/cancel", json={"reason": "end of day"})
    assert r.status_code == 200 and r.json()["cancelled"] == 2, r.text
    for i in range(2):
        body = await ended(api, sid, f"toolu_s{i}")
        assert text(body) == f"{BEFORE_IT_RAN} (by key '{name}' via session cancel: end of day)."
        [event] = await failed_events(api, sid, f"toolu_s{i}")
        assert event["data"] == {"cancelled_by": f"key '{name}'", "via": "session cancel",
                                 "reason": "end of day"}
    await audit_holds(api, sid)


async def test_two_cancellers_one_record_and_the_first_request_wins(api: ApiRig) -> None:
    """Temporal keeps the first cancel request of a run and answers later ones
    as done: the call records one tool.failed naming the first canceller."""
    other, _ = await api.repo.create_api_key("second-agent", roles=["agent"])
    sid = await api.register()
    name = await key_name(api)

    async def cancel(key: str, reason: str, call_id: str) -> int:
        r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/{call_id}/cancel",
                                json={"reason": reason},
                                headers={"Authorization": f"Bearer {key}"})
        return r.status_code

    # One after the other: the first request's canceller and reason stand.
    await parked(api, sid, "toolu_seq")
    assert await cancel(api.key, "first", "toolu_seq") == 200
    assert await cancel(other, "second", "toolu_seq") == 200
    body = await ended(api, sid, "toolu_seq")
    assert text(body) == f"{BEFORE_IT_RAN} (by key '{name}' via api: first)."
    assert len(await failed_events(api, sid, "toolu_seq")) == 1

    # At once: whichever reached Temporal first is named, alone.
    await parked(api, sid, "toolu_race")
    codes = await asyncio.gather(cancel(api.key, "mine", "toolu_race"),
                                 cancel(other, "theirs", "toolu_race"))
    assert codes == [200, 200]
    said = text(await ended(api, sid, "toolu_race"))
    named = [who for who in (f"key '{name}' via api: mine", "key 'second-agent' via api: theirs")
             if who in said]
    assert len(named) == 1, said
    [event] = await failed_events(api, sid, "toolu_race")
    assert event["data"]["cancelled_by"] in (f"key '{name}'", "key 'second-agent'")
    assert (event["data"]["reason"] == "mine") == (event["data"]["cancelled_by"] == f"key '{name}'")
    await audit_holds(api, sid)


async def test_a_cancel_without_a_reason_records_what_it_always_did(api: ApiRig) -> None:
    """A cancel request with no reason (a history from before reasons were
    sent, or `temporal workflow cancel`): the old text, an event without data."""
    sid = await api.register()
    await parked(api, sid, "toolu_old")
    await api.rig.dispatcher.handle(sid, "toolu_old").cancel()
    body = await ended(api, sid, "toolu_old")
    assert text(body) == f"{BEFORE_IT_RAN}."
    [event] = await failed_events(api, sid, "toolu_old")
    assert event["data"] == {}


def test_a_signed_in_person_is_named_by_email_a_key_by_name() -> None:
    from parkgate.approvals.access import Principal

    key = Principal(key_id="k1", name="ci-agent", roles=["agent"])
    person = Principal(key_id="sub-1", name="Ann", roles=["agent"],
                       oidc={"issuer": "https://idp", "subject": "sub-1",
                             "email": "ann@example.com"})
    assert key.label == "key 'ci-agent'"
    assert person.label == "person 'ann@example.com'"
