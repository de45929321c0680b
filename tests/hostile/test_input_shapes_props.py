"""Property: generated JSON of every shape (depth, size, unicode, numbers at
the edges) sent as tool input through the real HTTP API. Every answer is a 4xx
in the error shape or an accepted call, and every accepted call reaches a final
status within a bound (a parked one is cancelled and must end); nothing answers
5xx and nothing wedges."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL
from tests.faults.harness.stack import Stack

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(600)]

SOAK = os.environ.get("PARKGATE_SOAK", "") not in ("", "0", "false")
#: Bounded for CI (~30-60 s); many more by hand with PARKGATE_SOAK=1.
EXAMPLES = 300 if SOAK else 60
#: Seconds an accepted call may take to reach a final status.
FINAL_WITHIN = 60.0

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31 - 1, -(2**31), 2**53, 2**63 - 1, -(2**63), 2**64]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1.7976931348623157e308, -0.0]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",)), max_size=10),
                      inner, max_size=4),
    max_leaves=25,
)


@st.composite
def _deep(draw: st.DrawFn) -> Any:
    value: Any = draw(_scalars)
    for _ in range(draw(st.integers(min_value=1, max_value=120))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


@st.composite
def tool_inputs(draw: st.DrawFn) -> tuple[str, Any]:
    """(tool name, input): well-formed, oddly shaped, deep and large inputs."""
    tool = draw(st.sampled_from(["write_file", "read_file", "shell", "no_such_tool"]))
    shape = draw(st.sampled_from(["object", "any", "deep", "large", "file"]))
    if shape == "object":
        return tool, draw(st.dictionaries(st.text(max_size=12), _json, max_size=5))
    if shape == "any":
        return tool, draw(_json)
    if shape == "deep":
        return tool, {"path": "deep.txt", "content": "x", "extra": draw(_deep())}
    if shape == "large":
        size = draw(st.integers(min_value=0, max_value=300_000))
        return "write_file", {"path": "large.txt", "content": "é" * (size // 2)}
    text = draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=200))
    return "write_file", {"path": "prop.txt", "content": text}


def _final(client: httpx.Client, sid: str, tuid: str) -> dict[str, Any]:
    deadline = time.monotonic() + FINAL_WITHIN
    cancelled = False
    while True:
        r = client.get(f"/v1/sessions/{sid}/tool-calls/{tuid}")
        assert r.status_code < 500, r.text[:300]
        call = dict(r.json())
        if call.get("status") in TERMINAL:
            return call
        if call.get("status") == "parked" and not cancelled:
            c = client.post(f"/v1/sessions/{sid}/tool-calls/{tuid}/cancel")
            assert c.status_code < 500, c.text[:300]
            cancelled = True
        assert time.monotonic() < deadline, f"{tuid} not final after {FINAL_WITHIN}s: {call}"
        time.sleep(0.2)


async def test_every_accepted_input_reaches_a_final_status(hostile_stack: Stack) -> None:
    await asyncio.to_thread(_property, hostile_stack)


def _property(hostile_stack: Stack) -> None:
    """The property itself, synchronous (hypothesis drives it from a thread)."""
    auth = {"Authorization": f"Bearer {hostile_stack.api_key}"}
    sid = "props-shapes"
    counter = itertools.count()
    outcomes: dict[str, int] = {}
    with httpx.Client(base_url=hostile_stack.base_url, headers=auth, timeout=90) as client:
        r = client.post("/v1/sessions", json={"session_id": sid,
                                              "workspace_path": str(hostile_stack.trusted)})
        assert r.status_code in (200, 201), r.text

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=tool_inputs())
        def run(case: tuple[str, Any]) -> None:
            tool, tool_input = case
            tuid = f"tu_shape_{next(counter)}"
            r = client.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                            json={"id": tuid, "name": tool, "input": tool_input},
                            params={"wait": "5"})
            summary.add(bad_inputs_tried=1, server_errors=int(r.status_code >= 500))
            assert r.status_code < 500, f"{r.status_code}: {r.text[:300]}"
            if r.status_code in (200, 202):
                call = _final(client, sid, tuid)
                key = str(call["status"])
            else:
                body = r.json()
                assert r.status_code in (413, 422), r.text[:300]
                assert body["error"]["code"] and body["error"]["message"], body
                key = f"{r.status_code} {body['error']['code']}"
            outcomes[key] = outcomes.get(key, 0) + 1

        run()
    # Both sides of the door were exercised: some calls ran to an end, some
    # inputs were refused before anything started.
    assert any(k in TERMINAL for k in outcomes), outcomes
    assert any(k.startswith("4") for k in outcomes), outcomes
