"""Hostile requests against the real API (subprocess, real Temporal, real DB):
missing/revoked keys, oversize and chunked bodies, deep nesting, invalid UTF-8,
lone surrogates and NUL bytes, bad long-poll values, control characters in
shell commands, and a huge tool output (truncated for the model, stored whole).

Every answer must be a specific 4xx in the error shape, or a normal call
outcome — never a 5xx, never a hang."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from parkgate.store import Repository
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL
from tests.faults.harness.stack import Stack, parse_key
from tests.hostile.conftest import MAX_REQUEST_BYTES
from tests.hostile.helpers import Hostile, assert_error_shape, path_of

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

CALLS = "/v1/sessions/{sid}/turns/t1/tool-calls"


@pytest.fixture(scope="session")
async def sessions(hostile_stack: Stack) -> dict[str, str]:
    """Two registered sessions: one where shell auto-runs, one where it parks."""
    async with Hostile(hostile_stack) as h:
        await h.register("hs-auto", str(hostile_stack.trusted))
        await h.register("hs-park", str(hostile_stack.untrusted))
    return {"auto": "hs-auto", "park": "hs-park"}


@pytest.fixture
async def h(hostile_stack: Stack) -> AsyncIterator[Hostile]:
    async with Hostile(hostile_stack) as client:
        yield client
        assert not client.server_errors, (
            f"{client.server_errors}\n{hostile_stack.logs(60)}"
        )


async def test_missing_bad_and_revoked_api_keys(h: Hostile, hostile_stack: Stack) -> None:
    key = hostile_stack.api_key or ""
    # The real key with its last character changed (never to itself).
    forged = key[:-1] + ("B" if key.endswith("A") else "A")
    anon_headers: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer  x y"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "bearer " + "x" * 8000},
        {"Authorization": "Bearer " + forged},
        {"Authorization": "Token " + (hostile_stack.api_key or "")},
        {"Authorization": (hostile_stack.api_key or "")},
    ]
    for headers in anon_headers:
        for method, url, body in (
            ("GET", "/v1/tool-calls", None),
            ("POST", "/v1/sessions", {"session_id": "x", "workspace_path": "/"}),
            ("POST", CALLS.format(sid="hs-auto"), {"id": "tu_x", "name": "shell",
                                                    "input": {"command": "true"}}),
        ):
            r = await h.bad(method, url, json=body, headers=headers, anon=True)
            assert_error_shape(r, 401)

    # A key that worked stops working the moment it is revoked.
    out = await hostile_stack.acli("keys", "create", "--name", "to-revoke", "--role", "auditor")
    assert out.returncode == 0, out.stderr
    key = parse_key(out.stdout)
    auth = {"Authorization": f"Bearer {key}"}
    assert (await h.ok("GET", "/v1/tool-calls", headers=auth)).status_code == 200
    revoked = await hostile_stack.acli("keys", "revoke", "to-revoke")
    assert revoked.returncode == 0, revoked.stderr + revoked.stdout
    r = await h.bad("GET", "/v1/tool-calls", headers=auth)
    assert_error_shape(r, 401)


async def raw_http(port: int, request: bytes, timeout: float = 10.0) -> int:
    """Send raw bytes, return the response status (0 if the server just closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
    finally:
        writer.close()
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0


async def test_oversize_bodies_are_413(h: Hostile, sessions: dict[str, str]) -> None:
    url = CALLS.format(sid=sessions["park"])
    big = {"id": "tu_big", "name": "write_file",
           "input": {"path": "big.txt", "content": "a" * (MAX_REQUEST_BYTES + 1)}}
    assert_error_shape(await h.bad("POST", url, json=big), 413)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked upload
        yield b'{"id": "tu_chunked", "name": "write_file", "input": {"content": "'
        for _ in range(MAX_REQUEST_BYTES // 65536 + 2):
            yield b"b" * 65536
        yield b'"}}'

    r = await h.bad("POST", url, content=chunks(), headers={"content-type": "application/json"})
    assert_error_shape(r, 413)
    # A lying Content-Length is refused before the body is read (raw socket:
    # httpx will not send a body shorter than its declared length).
    status = await raw_http(
        h.stack.api_port,
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + (h.stack.api_key or "").encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(MAX_REQUEST_BYTES * 10).encode() + b"\r\n\r\n{}",
    )
    summary.add(bad_inputs_tried=1, server_errors=int(status >= 500))
    assert status in (400, 413), status
    # Nothing was started for the refused bodies.
    r = await h.ok("GET", f"/v1/sessions/{sessions['park']}/tool-calls/tu_big")
    assert r.status_code == 404, r.text


@pytest.mark.parametrize("depth", [64, 200, 900, 1_000, 20_000, 100_000])
async def test_deeply_nested_json(h: Hostile, sessions: dict[str, str], depth: int) -> None:
    """Input nested past the documented 64-level limit (the input object is level
    1) is refused with a 422 naming the path, before anything starts."""
    nested = "[" * depth + "]" * depth
    body = (f'{{"id": "tu_nest_{depth}", "name": "shell", '
            f'"input": {{"command": "true", "x": {nested}}}}}')
    r = await h.bad("POST", CALLS.format(sid=sessions["auto"]), content=body.encode(),
                    headers={"content-type": "application/json"}, params={"wait": "20"})
    assert_error_shape(r, 422)
    if depth < 1_000:  # shallow enough for the JSON parser: the path is named
        message = r.json()["error"]["message"]
        assert message.startswith("body.input.x" + "[0]" * 63 + ":"), message
        assert "64-level limit" in message
    r = await h.ok("GET", f"/v1/sessions/{sessions['auto']}/tool-calls/tu_nest_{depth}")
    assert r.status_code == 404, r.text


async def test_nesting_at_the_limit_runs(h: Hostile, sessions: dict[str, str]) -> None:
    """64 levels exactly is accepted and the call reaches a final status."""
    nested = "[" * 63 + "]" * 63
    body = (f'{{"id": "tu_nest_ok", "name": "shell", '
            f'"input": {{"command": "true", "x": {nested}}}}}')
    r = await h.bad("POST", CALLS.format(sid=sessions["auto"]), content=body.encode(),
                    headers={"content-type": "application/json"}, params={"wait": "20"})
    assert r.status_code in (200, 202), r.text[:300]
    call = r.json()
    if call.get("status") not in TERMINAL:
        call = await h.until(sessions["auto"], "tu_nest_ok", TERMINAL, timeout=60)
    # shell's schema has no "x": a validation denial, reached without a wedge.
    assert call["status"] in ("failed", "denied"), call


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "tu_\xff\xfe", "name": "shell", "input": {"command": "true"}}',
        b'{"id": "tu_utf8", "name": "shell", "input": {"command": "echo \xc3\x28"}}',
        b'\xef\xbb\xbf{"id": "tu_bom", "name": "shell", "input": {"command": "true"}}',
        b'{"id": "tu_trunc", "name": "shell", "input": {"command": "tr',
        b'{"id": "tu_dup", "id": "tu_dup2", "name": "shell", "input": {}}',
        b"[]",
        b"null",
        b'"tu"',
        b"",
        b'{"id": "", "name": "shell", "input": {}}',
        b'{"id": "tu_big_int", "name": "shell", "input": {"command": 1' + b"0" * 5000 + b"}}",
        b'{"id": "tu_nan", "name": "shell", "input": {"command": NaN}}',
        b'{"id": "tu_inf", "name": "shell", "input": {"x": 1e999, "command": "true"}}',
        b'{"id": "tu_x", "name": "' + b"n" * 5000 + b'", "input": {}}',
    ],
    ids=lambda b: repr(b[:24]),
)
async def test_malformed_bodies(h: Hostile, sessions: dict[str, str], raw: bytes) -> None:
    r = await h.bad("POST", CALLS.format(sid=sessions["park"]), content=raw,
                    headers={"content-type": "application/json"})
    assert r.status_code < 500, r.text[:300]
    if r.status_code >= 400:
        assert_error_shape(r, 400, 413, 415, 422)


@pytest.mark.parametrize(
    "text,tuid",
    [
        ("echo \\ud800", "tu_lone_surrogate"),
        ("echo \\udfff\\ud800", "tu_reversed_surrogates"),
        ("echo \\u0000 nul", "tu_nul_in_command"),
        ("echo ok", "tu_nul_\\u0000_id"),
    ],
)
async def test_escaped_unicode_that_cannot_be_stored(
    h: Hostile, sessions: dict[str, str], text: str, tuid: str
) -> None:
    """Valid JSON, hostile text: lone surrogates cannot be UTF-8 encoded (hashing,
    payloads) and NUL cannot be stored in PostgreSQL text. Refused or denied —
    never a 500, never a stuck call."""
    raw = f'{{"id": "{tuid}", "name": "shell", "input": {{"command": "{text}"}}}}'
    r = await h.bad("POST", CALLS.format(sid=sessions["park"]), content=raw.encode(),
                    headers={"content-type": "application/json"}, params={"wait": "10"})
    assert r.status_code < 500, r.text[:300]
    if r.status_code >= 400:
        assert_error_shape(r, 400, 422)
        return
    call = r.json()
    if call.get("status") not in TERMINAL | {"parked"}:
        call = await h.until(sessions["park"], call["tool_use_id"], TERMINAL | {"parked"})
    assert call["status"] in ("failed", "denied", "parked"), call


@pytest.mark.parametrize("wait", ["-1", "61", "abc", "nan", "inf", "-inf", "1e309", "",
                                  "0x10", "9" * 400, "\u0661", "10s", "1,5"])
async def test_bad_long_poll_values(h: Hostile, sessions: dict[str, str], wait: str) -> None:
    sid = sessions["auto"]
    block = {"id": f"tu_wait_{abs(hash(wait))}", "name": "read_file", "input": {"path": "x"}}
    r = await h.bad("POST", CALLS.format(sid=sid), json=block, params={"wait": wait})
    assert_error_shape(r, 400, 422)
    r = await h.bad("GET", f"/v1/sessions/{sid}/tool-calls/{block['id']}", params={"wait": wait})
    assert_error_shape(r, 400, 404, 422)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/sessions/%00/tool-calls/x",
        "/v1/sessions/%ff%fe/tool-calls/x",
        "/v1/sessions/" + "s" * 5000 + "/tool-calls/x",
        "/v1/sessions/hs-auto/tool-calls/..%2f..%2fetc%2fpasswd",
        "/v1/sessions/hs-auto/tool-calls/%ed%a0%80",
        "/v1/sessions/unknown-session/tools?format=klingon",
        "/v1/sessions/hs-auto/tools?format=%00",
        "/v1/tool-calls?limit=-5",
        "/v1/tool-calls?limit=999999999999999999999",
        "/v1/tool-calls?after=%ff%00garbage",
        "/v1/tool-calls?status=exploded",
    ],
)
async def test_hostile_paths_and_queries(h: Hostile, path: str) -> None:
    r = await h.bad("GET", path)
    assert 400 <= r.status_code < 500, f"{path}: {r.status_code} {r.text[:200]}"


CONTROL = (
    "".join(chr(c) for c in range(1, 32) if c != 10) + "\x7f\x1b[31m\x1b]0;pwned\x07\u202e\u2028"
)


async def test_shell_commands_with_control_characters(
    h: Hostile, sessions: dict[str, str], hostile_stack: Stack
) -> None:
    """A command holding control characters (which /bin/sh reads differently
    from rules and people: issue 28) is refused and runs nothing; the same
    bytes written as printf escapes run and come back as data; control
    characters in a parked call's arguments render on the approval page
    without breaking it."""
    import shlex

    command = f"printf '%s' {shlex.quote(CONTROL)} > markers/ctl.out"
    call = await h.submit(sessions["auto"], {"id": "tu_ctl_auto", "name": "shell",
                                             "input": {"command": command}}, wait=30)
    if call["status"] not in TERMINAL:
        call = await h.until(sessions["auto"], "tu_ctl_auto", TERMINAL)
    assert call["status"] == "failed", call
    text = "".join(b.get("text", "") for b in call["result"]["content"])
    assert "control character U+0001" in text, text
    assert not (hostile_stack.trusted / "markers" / "ctl.out").exists()

    escaped = "printf 'a\\033[31m\\rb\\007' > markers/ctl-escaped.out"
    call = await h.submit(sessions["auto"], {"id": "tu_ctl_escaped", "name": "shell",
                                             "input": {"command": escaped}}, wait=30)
    if call["status"] not in TERMINAL:
        call = await h.until(sessions["auto"], "tu_ctl_escaped", TERMINAL)
    assert call["status"] == "succeeded", call
    out = (hostile_stack.trusted / "markers" / "ctl-escaped.out").read_bytes()
    assert out == b"a\x1b[31m\rb\x07"

    parked = await h.submit(sessions["park"], {"id": "tu_ctl_park", "name": "write_file",
                                               "input": {"path": "ctl.txt",
                                                         "content": CONTROL}})
    parked = await h.until(sessions["park"], "tu_ctl_park", {"parked"})
    assert parked["status"] == "parked", parked
    page = await h.ok("GET", path_of(parked["approval_url"]))
    assert page.status_code == 200, page.text[:300]
    assert "\x1b" not in page.text and "\x07" not in page.text, "raw control bytes in the page"


async def test_huge_output_truncated_for_model_and_stored_whole(
    h: Hostile, sessions: dict[str, str], hostile_stack: Stack
) -> None:
    size = 3_000_000
    block = {"id": "tu_huge", "name": "shell",
             "input": {"command": f"head -c {size} /dev/zero | tr '\\0' a"}}
    call = await h.submit(sessions["auto"], block, wait=30)
    if call["status"] not in TERMINAL:
        call = await h.until(sessions["auto"], "tu_huge", TERMINAL)
    assert call["status"] == "succeeded", call
    text = "".join(b.get("text", "") for b in call["result"]["content"])
    assert len(text) < 200_000, f"the model got {len(text)} characters"
    assert "truncated" in text
    repo = await Repository.connect(hostile_stack.database_url)
    try:
        record = await repo.get_call(sessions["auto"], "tu_huge")
    finally:
        await repo.close()
    assert record is not None and record.full_output is not None
    stored = json.dumps(record.full_output)
    assert stored.count("a" * 1000) >= size // 1000 - 1, (
        f"full output not stored whole ({len(stored)} chars)"
    )


async def test_hostile_session_registrations(
    h: Hostile, hostile_stack: Stack, sessions: dict[str, str]
) -> None:
    """Workspaces outside the configured roots — directly, by `..`, or through a
    symlink that lives inside the roots — are refused; so are NUL and junk."""
    inside_link = hostile_stack.workspaces / "escape-link"
    if not inside_link.exists():
        inside_link.symlink_to("/")
    roots = hostile_stack.workspaces.resolve()
    for workspace in ["/", "/etc", f"{roots}/../..", f"{roots}/..", str(inside_link),
                      f"{inside_link}/etc", f"{roots}/\x00x", "~", "relative/path", " ",
                      f"{roots}/" + "d" * 5000]:
        r = await h.bad("POST", "/v1/sessions",
                        json={"session_id": f"hs-evil-{abs(hash(workspace))}",
                              "workspace_path": workspace})
        assert_error_shape(r, 400, 403, 409, 413, 422)
    for body in [{"session_id": "", "workspace_path": str(roots)},
                 {"session_id": "x" * 5000, "workspace_path": str(roots)},
                 {"session_id": "hs-x", "workspace_path": str(roots), "kind": "root"},
                 {"session_id": "hs-x", "workspace_path": str(roots), "admin": True},
                 {"session_id": ["hs-x"], "workspace_path": str(roots)}]:
        assert_error_shape(await h.bad("POST", "/v1/sessions", json=body), 400, 413, 422)
    # Re-registering a live session elsewhere is a conflict, not a takeover.
    r = await h.bad("POST", "/v1/sessions",
                    json={"session_id": sessions["park"],
                          "workspace_path": str(hostile_stack.trusted)})
    assert_error_shape(r, 409)


async def test_hostile_batches(h: Hostile, sessions: dict[str, str]) -> None:
    url = f"/v1/sessions/{sessions['park']}/turns/tb/tool-calls:batch"
    block = {"id": "tu_b", "name": "read_file", "input": {"path": "a"}}
    for body in [{"calls": []}, {"calls": [block] * 101}, {"calls": "all"}, {"calls": [None]},
                 {"calls": [block], "extra": 1}, [block]]:
        r = await h.bad("POST", url, json=body)
        assert_error_shape(r, 400, 413, 422)
    # Duplicate ids inside one message: refused, or run once — never a crash.
    r = await h.bad("POST", url, json={"calls": [block, block]}, params={"wait": "10"})
    assert r.status_code < 500, r.text[:300]


@pytest.mark.parametrize("last_event_id", ["-1", "abc", "9" * 400, "1e9", "\u0661", "0"])
async def test_event_stream_with_hostile_last_event_id(
    h: Hostile, sessions: dict[str, str], last_event_id: str
) -> None:
    """A hostile Last-Event-ID gets a 4xx or a stream that starts — never a 5xx."""
    url = f"/v1/sessions/{sessions['auto']}/events"
    async with h.http.stream("GET", url, headers={b"Last-Event-ID": last_event_id.encode()},
                             timeout=10) as r:
        h.note(r, bad=True)
        assert r.status_code < 500, r.status_code
        if r.status_code == 200:
            assert r.headers["content-type"].startswith("text/event-stream")
