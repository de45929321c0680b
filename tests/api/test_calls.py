"""Tool calls over HTTP with a real worker, the Temporal dev server and SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig


async def test_auto_read_finishes_within_wait_and_resubmit_attaches(api: ApiRig) -> None:
    (api.workspace / "hello.txt").write_text("hi there\n")
    sid = await api.register()
    r = await api.submit(sid, "read_file", {"path": "hello.txt"}, call_id="toolu_r1", wait=20)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "succeeded" and body["finished"] is True
    assert body["tool_name"] == "read_file" and body["side_effects"] == "read"
    assert "hi there" in body["result"]["content"][0]["text"]
    assert body["approval_url"] is None
    assert body["links"]["self"] == f"/v1/sessions/{sid}/tool-calls/toolu_r1"
    # Same id again: attaches to the finished call, same result, no second run.
    again = await api.submit(sid, "read_file", {"path": "hello.txt"}, call_id="toolu_r1", wait=5)
    assert again.status_code == 200
    assert again.json()["result"] == body["result"]
    timeline = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_r1/events")
    types = [e["type"] for e in timeline.json()["events"]]
    assert types.count("tool.called") == 1 and types.count("tool.completed") == 1


async def test_reused_id_with_other_input_is_idempotency_conflict(api: ApiRig) -> None:
    from parkgate.models import input_hash

    sid = await api.register()
    first = {"path": "a.txt", "content": "one\n"}
    r = await api.submit(sid, "write_file", first, call_id="toolu_dup", wait=0.2)
    assert r.status_code == 202, r.text
    other = {"path": "a.txt", "content": "two\n"}
    clash = await api.submit(sid, "write_file", other, call_id="toolu_dup", wait=0)
    assert clash.status_code == 409, clash.text
    error = clash.json()["error"]
    assert error["code"] == "idempotency_conflict"
    assert error["details"]["existing"]["input_hash"] == input_hash("write_file", first)
    assert error["details"]["submitted"]["input_hash"] == input_hash("write_file", other)
    assert input_hash("write_file", first) in error["message"]
    assert input_hash("write_file", other) in error["message"]
    renamed = await api.submit(sid, "read_file", {"path": "a.txt"}, call_id="toolu_dup", wait=0)
    assert renamed.status_code == 409 and "read_file" in renamed.json()["error"]["message"]
    # The same call again still attaches.
    same = await api.submit(sid, "write_file", first, call_id="toolu_dup", wait=0)
    assert same.status_code == 202, same.text
    assert same.json()["tool_use_id"] == "toolu_dup"


async def test_write_parks_then_api_confirmation_wins_and_loser_gets_409(api: ApiRig) -> None:
    sid = await api.register()
    r = await api.submit(
        sid, "write_file", {"path": "out.txt", "content": "written\n"}, call_id="toolu_w1",
        wait=0.5,
    )
    assert r.status_code == 202, r.text
    parked = await api.wait_parked(sid, "toolu_w1")
    assert parked["approval_url"].startswith(f"{api.base_url}/approve/")
    assert parked["links"]["approval"] == parked["approval_url"]
    assert parked["side_effects"] == "write" and parked["request_id"]
    assert parked["result"] is None
    # Served from the store; the same link the workflow handed out.
    view = await api.rig.dispatcher.status(sid, "toolu_w1")
    assert view.approval_url == parked["approval_url"]
    rid = parked["request_id"]
    ok = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
        json={"decision": "allow", "reason": "looks fine", "decided_by": "alice"},
    )
    assert ok.status_code == 200, ok.text
    decided = ok.json()["decision"]
    human = (await api.repo.verify_api_key(api.human_key))
    assert human is not None
    # The key decides; the name in the body is recorded as a claim only.
    assert ok.json()["accepted"] is True and decided["decided_by"] == human.name
    assert decided["claimed_name"] == "alice" and decided["principal_id"] == f"key:{human.id}"
    late = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
        json={"decision": "deny", "reason": "too late", "decided_by": "bob"},
    )
    assert late.status_code == 409, late.text
    err = late.json()["error"]
    assert err["details"]["winner"]["decision"] == "allow"
    assert err["details"]["winner"]["claimed_name"] == "alice"
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w1", params={"wait": 20})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "succeeded"
    assert (api.workspace / "out.txt").read_text() == "written\n"


async def test_deny_reason_reaches_the_model(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "no.txt", "content": "x"}, call_id="toolu_d1")
    parked = await api.wait_parked(sid, "toolu_d1")
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json={"decision": "deny", "reason": "not in prod"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["decision"]["decided_by"].startswith("human-")
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d1", params={"wait": 20})
    body = done.json()
    assert body["status"] == "denied"
    assert body["result"]["is_error"] is True
    assert "not in prod" in body["result"]["content"][0]["text"]
    assert not (api.workspace / "no.txt").exists()


async def test_confirmation_errors(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "e.txt", "content": "x"}, call_id="toolu_e1")
    parked = await api.wait_parked(sid, "toolu_e1")
    rid = parked["request_id"]
    unknown = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/nope", json={"decision": "allow"}
    )
    assert unknown.status_code == 404
    wrong_turn = await api.http.post(
        f"/v1/sessions/{sid}/turns/other/confirmations/{rid}", json={"decision": "allow"}
    )
    assert wrong_turn.status_code == 404
    bad = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}", json={"decision": "maybe"}
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    bad_edit = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
        json={"decision": "allow_with_edits", "edited_input": {"path": "../escape.txt",
                                                                "content": "x"}},
    )
    assert bad_edit.status_code == 422, bad_edit.text
    assert bad_edit.json()["error"]["code"] == "invalid_decision"
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_e1")
    assert still.status_code == 202 and still.json()["status"] == "parked"
    edited = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
        json={"decision": "allow_with_edits", "edited_input": {"path": "e2.txt",
                                                                "content": "edited"}},
    )
    assert edited.status_code == 200, edited.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_e1", params={"wait": 20})
    assert done.json()["status"] == "succeeded"
    assert (api.workspace / "e2.txt").read_text() == "edited"
    assert not (api.workspace / "e.txt").exists()


async def test_cancel_parked_call_and_session(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "c.txt", "content": "x"}, call_id="toolu_c1")
    await api.wait_parked(sid, "toolu_c1")
    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_c1/cancel")
    assert r.status_code == 200 and r.json()["cancelled"] is True
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_c1", params={"wait": 20})
    assert done.json()["status"] == "cancelled"
    again = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_c1/cancel")
    assert again.status_code == 200 and again.json()["cancelled"] is False
    missing = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_nope/cancel")
    assert missing.status_code == 404
    for i in range(2):
        await api.submit(sid, "write_file", {"path": f"s{i}.txt", "content": "x"},
                         call_id=f"toolu_s{i}")
    for i in range(2):
        await api.wait_parked(sid, f"toolu_s{i}")
    r = await api.http.post(f"/v1/sessions/{sid}/cancel")
    assert r.status_code == 200 and r.json()["cancelled"] == 2
    for i in range(2):
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_s{i}",
                                  params={"wait": 20})
        assert done.json()["status"] == "cancelled"
    assert not any((api.workspace / f"s{i}.txt").exists() for i in range(2))


async def test_batch_keeps_order_and_long_polls(api: ApiRig) -> None:
    for i in range(3):
        (api.workspace / f"f{i}.txt").write_text(f"file {i}")
    sid = await api.register()
    calls = [{"id": f"toolu_b{i}", "name": "read_file", "input": {"path": f"f{i}.txt"}}
             for i in (2, 0, 1)]
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t9/tool-calls:batch",
                            params={"wait": 30}, json={"calls": calls})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["finished"] is True
    assert [c["tool_use_id"] for c in body["calls"]] == ["toolu_b2", "toolu_b0", "toolu_b1"]
    assert [c["result"]["content"][0]["text"] for c in body["calls"]] == [
        "file 2", "file 0", "file 1"]
    dup = await api.http.post(f"/v1/sessions/{sid}/turns/t9/tool-calls:batch",
                              json={"calls": [calls[0], calls[0]]})
    assert dup.status_code == 422


async def test_batch_reusing_an_id_for_another_call_is_idempotency_conflict(
    api: ApiRig,
) -> None:
    """A batch may not smuggle other input under an id already used: not the same
    batch sent again with one input changed, not an id a single POST used."""
    sid = await api.register()
    write = {"id": "toolu_bw", "name": "write_file", "input": {"path": "w.txt", "content": "1"}}
    read = {"id": "toolu_br", "name": "read_file", "input": {"path": "w.txt"}}
    url = f"/v1/sessions/{sid}/turns/tq/tool-calls:batch"
    first = await api.http.post(url, json={"calls": [write, read]})
    assert first.status_code == 202, first.text
    # The same batch again attaches.
    again = await api.http.post(url, json={"calls": [write, read]})
    assert again.status_code == 202, again.text
    # Same ids, same turn, other content: refused, naming the id.
    changed = {**write, "input": {"path": "w.txt", "content": "2"}}
    clash = await api.http.post(url, json={"calls": [changed, read]})
    assert clash.status_code == 409, clash.text
    error = clash.json()["error"]
    assert error["code"] == "idempotency_conflict"
    assert error["details"]["tool_use_id"] == "toolu_bw"
    # An id a single POST used, inside a new batch in another turn.
    alone = await api.submit(sid, "write_file", {"path": "s.txt", "content": "s"},
                             call_id="toolu_single", wait=0)
    assert alone.status_code == 202, alone.text
    other = {"id": "toolu_single", "name": "write_file",
             "input": {"path": "s.txt", "content": "not s"}}
    smuggled = await api.http.post(f"/v1/sessions/{sid}/turns/tz/tool-calls:batch",
                                   json={"calls": [other]})
    assert smuggled.status_code == 409, smuggled.text
    assert smuggled.json()["error"]["details"]["tool_use_id"] == "toolu_single"
    # What runs under the id is the first call: approved, it writes "s", not "not s".
    parked = await api.wait_parked(sid, "toolu_single")
    ok = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json={"decision": "allow"},
    )
    assert ok.status_code == 200, ok.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_single", params={"wait": 20})
    assert done.json()["status"] == "succeeded", done.text
    assert (api.workspace / "s.txt").read_text() == "s"


async def test_batch_with_a_parked_call_is_202(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "a.txt").write_text("a")
    calls = [{"id": "toolu_p0", "name": "read_file", "input": {"path": "a.txt"}},
             {"id": "toolu_p1", "name": "write_file", "input": {"path": "b.txt", "content": "b"}}]
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t2/tool-calls:batch",
                            params={"wait": 1}, json={"calls": calls})
    assert r.status_code == 202, r.text
    assert r.json()["finished"] is False
    parked = await api.wait_parked(sid, "toolu_p1")
    assert parked["status"] == "parked"
    first = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_p0", params={"wait": 10})
    assert first.json()["status"] == "succeeded"


async def test_tools_in_three_shapes(api: ApiRig) -> None:
    sid = await api.register()
    shapes: dict[str, Any] = {}
    for fmt in ("canonical", "openai", "anthropic"):
        r = await api.http.get(f"/v1/sessions/{sid}/tools", params={"format": fmt})
        assert r.status_code == 200
        shapes[fmt] = r.json()["tools"]
    names = {t["name"] for t in shapes["canonical"]}
    assert {"read_file", "write_file", "patch_file", "list_dir", "shell"} <= names
    assert all(t["type"] == "function" for t in shapes["openai"])
    assert all("input_schema" in t and "side_effects" not in t for t in shapes["anthropic"])
    bad = await api.http.get(f"/v1/sessions/{sid}/tools", params={"format": "xml"})
    assert bad.status_code == 422


async def test_audit_query_filters_and_keyset_pages(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "x.txt").write_text("x")
    for i in range(5):
        r = await api.submit(sid, "read_file", {"path": "x.txt"}, call_id=f"toolu_q{i}", wait=20)
        assert r.status_code == 200
    await api.submit(sid, "write_file", {"path": "y.txt", "content": "y"}, call_id="toolu_qw")
    await api.wait_parked(sid, "toolu_qw")
    seen: list[str] = []
    after = None
    while True:
        params: dict[str, Any] = {"session_id": sid, "limit": 2}
        if after:
            params["after"] = after
        page = (await api.http.get("/v1/tool-calls", params=params)).json()
        seen += [c["tool_use_id"] for c in page["items"]]
        after = page["next_cursor"]
        if not after:
            break
    assert len(seen) == 6 and len(set(seen)) == 6
    assert seen[0] == "toolu_qw"  # newest first
    parked = (await api.http.get("/v1/tool-calls", params={"status": "parked",
                                                            "session_id": sid})).json()
    assert [c["tool_use_id"] for c in parked["items"]] == ["toolu_qw"]
    reads = (await api.http.get("/v1/tool-calls", params={"tool_name": "read_file",
                                                           "session_id": sid})).json()
    assert len(reads["items"]) == 5
    bad = await api.http.get("/v1/tool-calls", params={"after": "garbage!!"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_cursor"


async def test_unknown_tool_is_a_finished_error_not_an_http_error(api: ApiRig) -> None:
    sid = await api.register()
    r = await api.submit(sid, "nope_tool", {}, call_id="toolu_u1", wait=20)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["result"]["is_error"] is True
    assert body["status"] in ("failed", "denied")
    assert body["error_class"] == "not_found"


async def test_concurrent_long_polls_on_one_call(api: ApiRig, tmp_path: Path) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "lp.txt", "content": "z"}, call_id="toolu_lp")
    parked = await api.wait_parked(sid, "toolu_lp")
    polls = [asyncio.create_task(api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_lp",
                                              params={"wait": 30})) for _ in range(3)]
    await asyncio.sleep(0.3)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
                            json={"decision": "allow"})
    assert r.status_code == 200
    results = await asyncio.gather(*polls)
    assert all(p.status_code == 200 and p.json()["status"] == "succeeded" for p in results)


async def test_park_approve_and_audit_on_each_database(
    dev_temporal: Client, repo: Repository, tmp_path: Path
) -> None:
    """The same flow on SQLite and PostgreSQL (the `repo` fixture runs both)."""
    async with api_rig(dev_temporal, repo, tmp_path) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "db.txt", "content": "db"},
                         call_id="toolu_db")
        parked = await api.wait_parked(sid, "toolu_db")
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow", "decided_by": "ops"},
        )
        assert r.status_code == 200
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_db", params={"wait": 20})
        assert done.json()["status"] == "succeeded"
        human = r.json()["decision"]["decided_by"]
        assert r.json()["decision"]["claimed_name"] == "ops"  # a claim, not the decider
        page = (await api.http.get("/v1/tool-calls", params={"decided_by": human})).json()
        assert [c["tool_use_id"] for c in page["items"]] == ["toolu_db"]
        events = (await api.http.get(f"/v1/sessions/{sid}/events",
                                     params={"follow": "false"})).text
        assert "tool.confirmation_requested" in events and "tool.completed" in events


async def test_deciding_a_cancelled_call_is_409_and_the_page_says_so(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "k.txt", "content": "k"}, call_id="toolu_k")
    parked = await api.wait_parked(sid, "toolu_k")
    assert (await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_k/cancel")).json()[
        "cancelled"]
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k", params={"wait": 20})
    assert done.json()["status"] == "cancelled"
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json={"decision": "allow"},
    )
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] in ("not_waiting", "already_decided")
    page = await api.http.get(parked["approval_url"].removeprefix(api.base_url))
    assert page.status_code == 200
    assert "No longer waiting" in page.text and 'name="csrf"' not in page.text
    assert not (api.workspace / "k.txt").exists()


async def test_two_concurrent_deciders_exactly_one_wins(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "race.txt", "content": "r"},
                     call_id="toolu_race")
    parked = await api.wait_parked(sid, "toolu_race")
    url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
    a, b = await asyncio.gather(
        api.http.post(url, json={"decision": "allow", "decided_by": "ann"}),
        api.http.post(url, json={"decision": "deny", "decided_by": "ben", "reason": "no"}),
    )
    assert sorted([a.status_code, b.status_code]) == [200, 409], (a.text, b.text)
    winner, loser = (a, b) if a.status_code == 200 else (b, a)
    won = winner.json()["decision"]
    assert loser.json()["error"]["details"]["winner"]["decided_by"] == won["decided_by"]
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_race", params={"wait": 20})
    expected = "succeeded" if won["decision"] == "allow" else "denied"
    assert done.json()["status"] == expected
    assert (api.workspace / "race.txt").exists() == (expected == "succeeded")
