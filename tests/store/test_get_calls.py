"""Repository.get_calls: a page's call rows in one read, keyed like get_call."""

from __future__ import annotations

from parkgate.store import CallStatus, CallUpdate, Repository
from tests.store.helpers import event, uid


async def test_many_rows_in_one_read_match_get_call(repo: Repository) -> None:
    sid, other = uid("s"), uid("s")
    ids = [uid("c") for _ in range(3)]
    for i, cid in enumerate(ids):
        await repo.apply([event(sid, cid, "tool.called")],
                         CallUpdate(session_id=sid, tool_use_id=cid, status=CallStatus.PARKED,
                                    tool_name=f"tool_{i}"))
    # Same tool_use_id in another session: a different row, never mixed up.
    await repo.apply([event(other, ids[0], "tool.called")],
                     CallUpdate(session_id=other, tool_use_id=ids[0],
                                status=CallStatus.RUNNING, tool_name="elsewhere"))
    keys = [(sid, cid) for cid in ids] + [(other, ids[0]), (sid, "missing"), (sid, ids[1])]
    found = await repo.get_calls(keys)
    assert set(found) == {(sid, cid) for cid in ids} | {(other, ids[0])}
    for (s, c), row in found.items():
        single = await repo.get_call(s, c)
        assert single is not None and row == single
    assert found[(other, ids[0])].tool_name == "elsewhere"
    assert await repo.get_calls([]) == {}
