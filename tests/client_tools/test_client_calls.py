"""Client-executed calls end to end: release, claim, outcome (issue 24).

Real worker, Temporal dev server, Postgres. The "client" is this test: it
claims a released call, "runs" the tool and reports what happened.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from parkgate.calls.events import make_event_id
from parkgate.durable.audit import compare_store_with_temporal
from parkgate.models import input_sha256
from tests.api.rig import ApiRig

DEPLOY = {"name": "deploy", "description": "Deploy a service (the agent runs it)",
          "input_schema": {"type": "object", "properties": {"service": {"type": "string"}},
                           "required": ["service"]},
          "side_effects": "execute"}
LOOKUP = {"name": "lookup", "description": "Read-only lookup", "side_effects": "read",
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


async def register(api: ApiRig) -> str:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    r = await api.http.post("/v1/sessions", json={
        "session_id": sid, "workspace_path": str(api.workspace),
        "client_tools": [DEPLOY, LOOKUP]})
    assert r.status_code == 201, r.text
    return sid


async def verified(api: ApiRig, sid: str) -> None:
    """`parkgate audit verify` (chain, meaning, and against Temporal) passes."""
    chain = await api.repo.verify_chain(sid)
    assert chain.ok, chain
    meaning = await api.repo.verify_meaning(sid)
    assert meaning.ok, [p.describe() for p in meaning.problems]
    against = await compare_store_with_temporal(api.repo, api.rig.client, sid)
    assert against.ok and against.compared >= 1, [p.describe() for p in against.problems]


async def decide(api: ApiRig, sid: str, parked: dict[str, Any], body: dict[str, Any]) -> None:
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}", json=body)
    assert r.status_code == 200, r.text


async def released(api: ApiRig, sid: str, cid: str) -> dict[str, Any]:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 30})
    body = r.json()
    assert body["status"] == "released", body
    return dict(body)


async def test_tools_list_shows_client_tools(api_pg: ApiRig) -> None:
    sid = await register(api_pg)
    r = await api_pg.http.get(f"/v1/sessions/{sid}/tools")
    tools = {t["name"]: t for t in r.json()["tools"]}
    assert tools["deploy"]["client_executed"] is True
    assert tools["read_file"]["client_executed"] is False


async def test_happy_path_release_claim_outcome(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    r = await api.submit(sid, "deploy", {"service": "web"}, call_id="toolu_d1", wait=0)
    assert r.status_code == 202, r.text
    parked = await api.wait_parked(sid, "toolu_d1")
    await decide(api, sid, parked, {"decision": "allow", "decided_by": "alice"})
    body = await released(api, sid, "toolu_d1")
    assert body["input"] == {"service": "web"}
    assert body["input_sha256"] == input_sha256({"service": "web"})
    assert body["finished"] is False
    # A GET never claims: still released.
    again = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d1")
    assert again.json()["status"] == "released"
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_d1/claim", json={})
    assert claim.status_code == 200, claim.text
    won = claim.json()
    assert won["input"] == {"service": "web"} and won["input_sha256"] == body["input_sha256"]
    assert won["lease_expires_at"]
    report = {"content": "deployed web", "is_error": False, "input_sha256": won["input_sha256"]}
    out = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_d1/outcome", json=report)
    assert out.status_code == 200, out.text
    assert out.json()["status"] == "succeeded"
    assert out.json()["result"]["content"][0]["text"] == "deployed web"
    # The same report again: the same answer; another report: 409.
    same = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_d1/outcome", json=report)
    assert same.status_code == 200 and same.json()["status"] == "succeeded"
    other = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_d1/outcome",
                                json={**report, "content": "something else"})
    assert other.status_code == 409, other.text
    final = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d1", params={"wait": 10})
    assert final.status_code == 200 and final.json()["status"] == "succeeded"
    events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d1/events")
    types = [e["type"] for e in events.json()["events"]]
    for kind in ("tool.confirmation_requested", "tool.confirmation_resolved", "tool.released",
                 "tool.claimed", "tool.outcome_reported", "tool.completed"):
        assert types.count(kind) == 1, (kind, types)
    assert "tool.called" not in types  # parkgate ran nothing
    stream = await api.http.get(f"/v1/sessions/{sid}/events", params={"follow": "false"})
    assert stream.status_code == 200
    for kind in ("tool.released", "tool.claimed", "tool.outcome_reported"):
        assert f"event: {kind}" in stream.text, stream.text[:2000]
    await verified(api, sid)


async def test_auto_approved_read_is_released_at_once(api_pg: ApiRig) -> None:
    sid = await register(api_pg)
    r = await api_pg.submit(sid, "lookup", {"q": "x"}, call_id="toolu_l1", wait=30)
    assert r.json()["status"] == "released", r.text


async def test_denial_never_releases(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "db"}, call_id="toolu_no")
    parked = await api.wait_parked(sid, "toolu_no")
    await decide(api, sid, parked, {"decision": "deny", "reason": "not today"})
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_no", params={"wait": 20})
    body = r.json()
    assert body["status"] == "denied" and body["result"]["is_error"] is True
    assert "not today" in body["result"]["content"][0]["text"]
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_no/claim")
    assert claim.status_code == 409, claim.text


async def test_edited_input_is_what_is_released(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "prod"}, call_id="toolu_ed")
    parked = await api.wait_parked(sid, "toolu_ed")
    await decide(api, sid, parked, {"decision": "allow_with_edits",
                                    "edited_input": {"service": "staging"}})
    body = await released(api, sid, "toolu_ed")
    assert body["input"] == {"service": "staging"}
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_ed/claim")
    assert claim.json()["input"] == {"service": "staging"}
    assert claim.json()["input_sha256"] == input_sha256({"service": "staging"})
    # Reporting the original input's hash is refused (422) and recorded.
    wrong = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_ed/outcome", json={
        "content": "ran prod", "input_sha256": input_sha256({"service": "prod"})})
    assert wrong.status_code == 422, wrong.text
    events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_ed/events")
    assert "tool.outcome_refused" in [e["type"] for e in events.json()["events"]]


async def test_twenty_concurrent_claimers_exactly_one_wins(api_pg: ApiRig) -> None:
    """Twenty clients of one key claim and start at once: a claim of the same
    key takes an unstarted reservation over, but a claim starts once: exactly
    one start wins and runs the call, every other claim or start is 409 and
    runs nothing; the audit shows one run (issue 36)."""
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "api"}, call_id="toolu_c20")
    parked = await api.wait_parked(sid, "toolu_c20")
    await decide(api, sid, parked, {"decision": "allow"})
    await released(api, sid, "toolu_c20")
    path = f"/v1/sessions/{sid}/tool-calls/toolu_c20"
    runs: list[str] = []

    async def claim_start_and_run() -> int:
        claim = await api.http.post(f"{path}/claim")
        if claim.status_code != 200:  # started by another, or already reported
            assert claim.json()["error"]["code"] in ("already_claimed", "ended"), claim.text
            return claim.status_code
        won = claim.json()
        start = await api.http.post(f"{path}/start", json={"claim_id": won["claim_id"]})
        assert start.status_code in (200, 409), start.text
        if start.status_code == 200:  # only a started claim runs the tool
            runs.append(won["input"]["service"])
            out = await api.http.post(f"{path}/outcome", json={
                "content": "deployed api", "input_sha256": won["input_sha256"]})
            assert out.status_code == 200 and out.json()["status"] == "succeeded", out.text
        return start.status_code

    codes = sorted(await asyncio.gather(*(claim_start_and_run() for _ in range(20))))
    assert codes == [200] + [409] * 19, codes
    assert runs == ["api"]  # the call ran once
    late = await api.http.post(f"{path}/claim")
    error = late.json()["error"]
    assert late.status_code == 409 and error["code"] in ("already_claimed", "ended"), late.text
    final = await api.http.get(path, params={"wait": 10})
    assert final.json()["status"] == "succeeded", final.text
    # The audit shows one run: one started claim, one outcome, one completion.
    events = await api.http.get(f"{path}/events")
    types = [e["type"] for e in events.json()["events"]]
    for kind in ("tool.released", "tool.claim_started", "tool.outcome_reported",
                 "tool.completed", "tool.confirmation_requested"):
        assert types.count(kind) == 1, (kind, types)
    assert "tool.lease_expired" not in types and "tool.outcome_late" not in types, types
    await verified(api, sid)


async def test_lease_end_is_outcome_unknown_and_a_late_report_is_recorded(
    api_pg: ApiRig,
) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "q"}, call_id="toolu_lz")
    parked = await api.wait_parked(sid, "toolu_lz")
    await decide(api, sid, parked, {"decision": "allow"})
    await released(api, sid, "toolu_lz")
    # The claimer "dies" after starting its claim: nobody reports before the lease ends.
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/claim",
                                json={"lease_seconds": 1})
    assert claim.status_code == 200, claim.text
    start = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/start",
                                json={"claim_id": claim.json()["claim_id"]})
    assert start.status_code == 200, start.text
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_lz", params={"wait": 30})
    body = r.json()
    assert body["status"] == "outcome_unknown" and body["finished"] is True
    assert body["result"]["is_error"] is True
    # Never released again.
    again = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/claim")
    assert again.status_code == 409, again.text
    late = {"content": "it did deploy", "input_sha256": claim.json()["input_sha256"]}
    out = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/outcome", json=late)
    assert out.status_code == 200, out.text
    assert out.json()["late"] is True and out.json()["status"] == "outcome_unknown"
    same = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/outcome", json=late)
    assert same.status_code == 200 and same.json()["late"] is True
    other = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_lz/outcome",
                                json={**late, "content": "no"})
    assert other.status_code == 409
    final = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_lz")
    assert final.json()["status"] == "outcome_unknown"
    events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_lz/events")
    types = [e["type"] for e in events.json()["events"]]
    assert types.count("tool.lease_expired") == 1 and types.count("tool.outcome_late") == 1
    late_event = next(e for e in events.json()["events"] if e["type"] == "tool.outcome_late")
    assert late_event["data"]["result"]["content"][0]["text"] == "it did deploy"
    await verified(api, sid)


async def test_hostile_claims_and_reports_are_4xx(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "h"}, call_id="toolu_h")
    parked = await api.wait_parked(sid, "toolu_h")
    # Not released yet: claim and outcome are refused.
    early = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_h/claim")
    assert early.status_code == 409, early.text
    await decide(api, sid, parked, {"decision": "allow"})
    await released(api, sid, "toolu_h")
    human = {"Authorization": f"Bearer {api.human_key}"}
    base = f"/v1/sessions/{sid}/tool-calls/toolu_h"
    assert (await api.http.post(f"{base}/claim", headers=human)).status_code == 403
    unclaimed = await api.http.post(f"{base}/outcome", json={
        "content": "x", "input_sha256": "0" * 64})
    assert unclaimed.status_code == 409
    for bad in ({"content": 5, "input_sha256": "0" * 64}, {"content": "x"},
                {"content": "x", "input_sha256": "zz"}, {"extra": 1}):
        r = await api.http.post(f"{base}/outcome", json=bad)
        assert r.status_code == 422, (bad, r.text)
    assert (await api.http.post(f"{base}/claim", json={"lease_seconds": -1})).status_code == 422
    missing = await api.http.post(f"/v1/sessions/{sid}/tool-calls/nope/claim")
    assert missing.status_code in (404, 409), missing.text
    claim = await api.http.post(f"{base}/claim")
    assert claim.status_code == 200
    huge = {"content": "y" * 600_000, "input_sha256": claim.json()["input_sha256"]}
    out = await api.http.post(f"{base}/outcome", json=huge)
    assert out.status_code == 200, out.text
    text = out.json()["result"]["content"][0]["text"]
    assert len(text) < 600_000  # truncated for the model like a hosted result
    whole = await api.http.get(f"{base}/output", params={"format": "json"})
    assert whole.status_code == 200, whole.text
    assert "y" * 600_000 in whole.text  # kept whole in the store
    too_big = await api.http.post(f"{base}/outcome", json={
        "content": "z" * 3_000_000, "input_sha256": "0" * 64})
    assert too_big.status_code == 413, too_big.text[:300]


async def test_same_tool_same_input_attaches_to_the_parked_call(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "m"}, call_id="toolu_first")
    await api.wait_parked(sid, "toolu_first")
    r = await api.submit(sid, "deploy", {"service": "m"}, call_id="toolu_retry", wait=0)
    assert r.json()["tool_use_id"] == "toolu_first", r.text


async def test_pages_say_the_client_runs_the_tool(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "p"}, call_id="toolu_pg")
    parked = await api.wait_parked(sid, "toolu_pg")
    page = await api.http.get(parked["approval_url"].removeprefix(api.base_url))
    assert page.status_code == 200
    assert 'data-testid="client-executed"' in page.text
    assert "the agent&#39;s client" in page.text or "the agent's client" in page.text
    hosted = await api.submit(sid, "write_file", {"path": "h.txt", "content": "h"},
                              call_id="toolu_hosted")
    assert hosted.status_code == 202
    other = await api.wait_parked(sid, "toolu_hosted")
    page = await api.http.get(other["approval_url"].removeprefix(api.base_url))
    assert 'data-testid="client-executed"' not in page.text


def test_slack_and_mail_say_the_client_runs_the_tool() -> None:
    from datetime import UTC, datetime

    from parkgate.channels import mail, slack
    from parkgate.durable.payloads import NotifyInput
    from parkgate.models import Session, SideEffects
    from parkgate.verdicts import ApprovalInfo

    info = ApprovalInfo(request_id="r1", tool_name="deploy", tool_use_id="tu",
                        input_summary="{}", side_effects=SideEffects.EXECUTE, rule="r",
                        input_hash="h", client_executed=True)
    blocks = slack.waiting_blocks(info, "s1", None)
    assert any(slack.CLIENT_RUNS in str(b) for b in blocks)
    plain = slack.waiting_blocks(info.model_copy(update={"client_executed": False}), "s1", None)
    assert not any(slack.CLIENT_RUNS in str(b) for b in plain)
    notice = NotifyInput(info=info, session=Session(session_id="s1", turn_id="t",
                                                    workspace_path="/w"),
                         requested_at=datetime.now(UTC))
    assert mail.CLIENT_RUNS in mail.body(notice, "alice", "https://x/approve/t")
    from parkgate.approvals.decisions import DecisionRecord

    won = DecisionRecord(request_id="r1", decision="allow", decided_by="alice",
                         decided_at=datetime.now(UTC))
    assert "outcome unknown" in slack.outcome_text("outcome_unknown", won)


async def test_cancelling_a_claimed_call_still_records_its_report_late(api_pg: ApiRig) -> None:
    """A call cancelled while its claimer ran it: the claimer's real report is
    recorded beside `cancelled` (late), never refused into nothing; a call
    cancelled before anyone claimed it takes no report."""
    api = api_pg
    sid = await register(api)
    await api.submit(sid, "deploy", {"service": "c"}, call_id="toolu_cx")
    await api.submit(sid, "deploy", {"service": "d"}, call_id="toolu_cy")
    for cid in ("toolu_cx", "toolu_cy"):
        parked = await api.wait_parked(sid, cid)
        await decide(api, sid, parked, {"decision": "allow"})
        await released(api, sid, cid)
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cx/claim")
    assert claim.status_code == 200
    start = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cx/start",
                                json={"claim_id": claim.json()["claim_id"]})
    assert start.status_code == 200, start.text
    cancelled = await api.http.post(f"/v1/sessions/{sid}/cancel")
    assert cancelled.json()["cancelled"] == 2, cancelled.text
    for cid in ("toolu_cx", "toolu_cy"):
        r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 20})
        assert r.json()["status"] == "cancelled", r.text
    report = {"content": "it did deploy", "input_sha256": claim.json()["input_sha256"]}
    out = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cx/outcome", json=report)
    assert out.status_code == 200, out.text
    assert out.json()["late"] is True and out.json()["status"] == "cancelled"
    again = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cx/outcome", json=report)
    assert again.status_code == 200 and again.json()["late"] is True
    other = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cx/outcome",
                                json={**report, "content": "something else"})
    assert other.status_code == 409, other.text
    late = await api.repo.get_event(make_event_id(sid, "toolu_cx", "tool.outcome_late"))
    assert late is not None and late.data["status"] == "cancelled"
    assert late.data["result"]["content"][0]["text"] == "it did deploy"
    row = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_cx")
    assert row.json()["status"] == "cancelled"  # the call's record stands
    never = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_cy/outcome", json={
        "content": "x", "input_sha256": input_sha256({"service": "d"})})
    assert never.status_code == 409 and never.json()["error"]["code"] == "ended", never.text
    await verified(api, sid)


async def test_a_batch_releases_client_calls_beside_hosted_ones(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    (api.workspace / "b.txt").write_text("b")
    r = await api.http.post(f"/v1/sessions/{sid}/turns/tb/tool-calls:batch", params={"wait": 5},
                            json={"calls": [
                                {"id": "toolu_bl", "name": "lookup", "input": {"q": "1"}},
                                {"id": "toolu_br", "name": "read_file",
                                 "input": {"path": "b.txt"}}]})
    assert r.status_code in (200, 202), r.text
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_bl", params={"wait": 20})
    assert r.json()["status"] == "released" and r.json()["input"] == {"q": "1"}
    claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_bl/claim")
    out = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_bl/outcome", json={
        "content": [{"type": "text", "text": "found"}], "is_error": True,
        "input_sha256": claim.json()["input_sha256"]})
    assert out.status_code == 200 and out.json()["status"] == "failed", out.text
    read = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_br", params={"wait": 20})
    assert read.json()["status"] == "succeeded"


async def test_a_forged_late_outcome_records_nothing(api_pg: ApiRig) -> None:
    """Only parkgate's API may record a late report (issue 28): a LateOutcome
    started by anyone else with Temporal access fails and writes nothing."""
    from temporalio.client import WorkflowFailureError

    from parkgate.calls.records import CallRef
    from parkgate.durable.client_payloads import (
        LATE_OUTCOME_WORKFLOW,
        LateOutcomeInput,
        OutcomeInput,
        late_workflow_id,
    )
    from parkgate.models import TextBlock

    api = api_pg
    sid = await register(api)
    forged = OutcomeInput(content=[TextBlock(text="forged")], input_sha256="0" * 64,
                          reported_by="key:nobody")
    handle = await api.rig.client.start_workflow(
        LATE_OUTCOME_WORKFLOW,
        LateOutcomeInput(ref=CallRef(session_id=sid, tool_use_id="toolu_f"), report=forged),
        id=late_workflow_id(sid, "toolu_f"), task_queue=api.rig.settings.temporal_task_queue)
    try:
        await handle.result()
        raise AssertionError("a forged late outcome was accepted")
    except WorkflowFailureError:
        pass
    events = await api.repo.events_after(sid, 0, limit=10)
    assert not [e for e in events if e.type == "tool.outcome_late"]
