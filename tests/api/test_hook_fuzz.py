"""Property-based run of every agent's hook endpoint: generated hostile bodies
for `/v1/hooks/{agent}` (every registered dialect, and Claude Code's).

The OpenAPI document gives `/v1/hooks/{agent}` no body schema (each dialect
reads its own JSON), so test_openapi_fuzz sends it no events. Here hypothesis
mutates each agent's real events (a field replaced by hostile JSON: NUL,
lone surrogates, bidi and zero-width text, huge and deep values, extreme
numbers; hostile keys and values in the tool input; fields dropped or added;
the whole body replaced; raw bytes) and
sends them over HTTP as the agents do, from a thread, to the app in uvicorn
over the real worker, dev server and database. Every answer is a 4xx whose
error has a message, or 200 with: for a pre-tool event, a deny with its
reason (the events ask for a shell command, which parks; nothing generated
here may be allowed), for any other event a JSON object. Never a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from temporalio.client import Client

from parkgate import dialects
from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server

#: Generated bodies per agent: bounded for CI, more by hand with PARKGATE_SOAK=1.
SOAK = os.environ.get("PARKGATE_SOAK", "") not in ("", "0", "false")
MAX_EXAMPLES = 400 if SOAK else 80
#: The hold of a parked pre-tool event (short: generated events park).
WAIT_SECONDS = 0.2
CLAUDE_EVENTS = {"PreToolUse": "pre", "PostToolUse": "post", "PostToolUseFailure": "failure",
                 "UserPromptSubmit": "prompt"}
AGENTS = ["claude-code", *dialects.names()]

_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x\udfff", "ba\u202esh", "ba\u200bsh",
                     "../../etc/passwd", "/", "~", "C:\\x", "%00", "\u0430", "\n\r\t",
                     "PreToolUse", "BeforeTool", "tool.execute.before"]),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "\U0001f600"]),
              st.integers(min_value=200, max_value=70_000)),
)
_scalar = st.one_of(
    st.none(), st.booleans(), _text,
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2**63, -(2**63) - 1, 1e308, -0.0, 5e-324]),
)
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _deep(draw: st.DrawFn) -> Any:
    value: Any = draw(_scalar)
    for _ in range(draw(st.integers(min_value=30, max_value=200))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


_hostile = st.one_of(_json, _deep())


def events(agent: str, sid: str, cwd: str) -> list[dict[str, Any]]:
    """The agent's real events for one shell command (which parks), one per
    kind it sends: what each generated body starts from."""
    names: Mapping[str, str]
    id_field: str | None
    if agent == "claude-code":
        names, id_field, shell = CLAUDE_EVENTS, "tool_use_id", "Bash"
    else:
        dialect = dialects.get(agent)
        assert dialect is not None
        names, id_field = dialect.events, dialect.call_id_field
        shell = sorted(dialect.shell_tools)[0]
    out = []
    for name, kind in names.items():
        body: dict[str, Any] = {"hook_event_name": name, "session_id": sid, "cwd": cwd,
                                "tool_name": shell, "tool_input": {"command": "make deploy"},
                                "turn_id": "turn-1", "permission_mode": "default"}
        if id_field is not None:
            body[id_field] = f"call_{uuid.uuid4().hex[:8]}"
        if kind in ("post", "failure"):
            body["tool_response"] = "deployed"
            body["error"] = "it failed"
        if kind == "prompt":
            body["prompt"] = "deploy it"
            body["prompt_id"] = "turn-1"
        out.append(body)
    return sorted(out, key=lambda b: names[b["hook_event_name"]] != "pre")  # pre first


@st.composite
def bodies(draw: st.DrawFn, bases: list[dict[str, Any]]) -> tuple[Any, bytes]:
    """(the body, its bytes on the wire): a real event mutated, or anything."""
    body: Any = dict(draw(st.sampled_from([bases[0], *bases])))  # pre-tool (first) twice
    mode = draw(st.sampled_from(["field", "field", "fields", "drop", "extra", "input",
                                 "input", "whole", "raw"]))
    if mode == "raw":
        raw = draw(st.one_of(st.binary(max_size=200), st.sampled_from([
            b"", b"{", b"NaN", b'{"hook_event_name": NaN}', b"\xff\xfe{}", b"[" * 5000,
            json.dumps(body).replace('"make deploy"', "Infinity").encode(),
            (json.dumps(body)[:-1] + ', "session_id": 5}').encode()])))
        return None, raw
    if mode == "whole":
        body = draw(_hostile)
    elif mode == "input":  # a readable event whose tool input is hostile
        body["tool_input"] = {**body["tool_input"],
                              **draw(st.dictionaries(_text, _hostile, min_size=1, max_size=3))}
    elif mode in ("field", "fields"):
        for _ in range(1 if mode == "field" else draw(st.integers(2, 5))):
            body[draw(st.sampled_from(sorted(body)))] = draw(_hostile)
    elif mode == "drop":
        for key in draw(st.lists(st.sampled_from(sorted(body)), min_size=1, max_size=3)):
            body.pop(key, None)
    else:
        body.update(draw(st.dictionaries(_text, _hostile, min_size=1, max_size=3)))
    return body, json.dumps(body, ensure_ascii=True).encode()


def pre_events(agent: str) -> frozenset[str]:
    if agent == "claude-code":
        return frozenset({"PreToolUse"})
    dialect = dialects.get(agent)
    assert dialect is not None
    return dialect.pre_events


def is_deny(agent: str, answer: Any) -> bool:
    """A deny with its reason, as the agent reads it."""
    if agent == "claude-code":
        out = answer.get("hookSpecificOutput") if isinstance(answer, dict) else None
        return isinstance(out, dict) and out.get("permissionDecision") == "deny" \
            and bool(str(out.get("permissionDecisionReason") or "").strip())
    dialect = dialects.get(agent)
    assert dialect is not None
    return dialect.is_deny(answer)


def _run_agent(http: httpx.Client, agent: str, cwd: str, failures: list[str],
               seen: dict[str, int]) -> None:
    """MAX_EXAMPLES generated bodies to one agent's endpoint; what breaks the rule."""
    bases = events(agent, f"fz-{agent[:2]}-{uuid.uuid4().hex[:6]}", cwd)

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=not SOAK,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=bodies(bases))
    def check(case: tuple[Any, bytes]) -> None:
        body, raw = case
        r = http.post(f"/v1/hooks/{agent}", content=raw)
        where = f"{agent} {r.status_code} body={raw[:200]!r}: {r.text[:300]}"
        try:
            answer = r.json()
        except ValueError:
            failures.append(f"not JSON: {where}")
            return
        if r.status_code >= 500:
            failures.append(f"5xx: {where}")
        elif r.status_code >= 400:
            error = answer.get("error") if isinstance(answer, dict) else None
            if not (isinstance(error, dict) and str(error.get("message") or "").strip()):
                failures.append(f"4xx without a message: {where}")
        elif r.status_code != 200 or not isinstance(answer, dict):
            failures.append(f"not a JSON object: {where}")
        elif isinstance(body, dict) and body.get("hook_event_name") in pre_events(agent):
            if not is_deny(agent, answer):
                failures.append(f"a pre-tool event not denied: {where}")
            seen["deny"] = seen.get("deny", 0) + 1
        kind = "4xx" if 400 <= r.status_code < 500 else str(r.status_code)
        seen[kind] = seen.get(kind, 0) + 1

    check()


def _fuzz(base: str, key: str, cwd: str, seen: dict[str, int]) -> list[str]:
    """Every agent's generated bodies; the answers that break the rule."""
    failures: list[str] = []
    with httpx.Client(base_url=base, timeout=60,
                      headers={"Authorization": f"Bearer {key}",
                               "Content-Type": "application/json"}) as http:
        for agent in AGENTS:
            _run_agent(http, agent, cwd, failures, seen)
    return failures


async def test_generated_hook_bodies_are_a_4xx_or_a_deny_never_a_5xx(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    holds: dict[str, Any] = {f"{a.replace('-', '_')}_wait_seconds": WAIT_SECONDS
                             for a in AGENTS}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base, **holds) as api, \
            live_server(api.app, sock):
        seen: dict[str, int] = {}
        failures = await asyncio.to_thread(_fuzz, base, api.key, str(api.workspace), seen)
        assert failures == [], "\n".join(failures[:20])
        # Both doors were exercised: bodies refused, events answered, calls denied.
        assert seen.get("4xx", 0) > 20 and seen.get("200", 0) > 20, seen
        assert seen.get("deny", 0) > 10, seen
        assert sum(seen.values()) >= MAX_EXAMPLES * len(AGENTS) // 2, seen
        assert (await api.http.get("/readyz")).status_code == 200
