"""`parkgate hook claude-code|codex|gemini|...`: the command-hook form of /v1/hooks/<agent>.

Reads the hook event on stdin, posts it with the agent key from
PARKGATE_API_KEY, prints Claude Code's hook output. Everything that is not a
decision fails closed for a PreToolUse (or an event it cannot read): empty or
unreadable stdin, no key, parkgate unreachable or timing out, a 4xx or 5xx,
an answer that is not a PreToolUse decision. Then it prints the `deny` JSON
on stdout, the reason on stderr, and exits 2: the form every agent's command
hooks honour as a block. The reason names the cause (the key refused, the
event refused, parkgate unreachable). `--fail-open` lets such a call through
(exit 0, the reason on stderr). Post and prompt events never block: a failure
there exits 1 (Claude Code's non-blocking error) with the reason.

Every agent is the same process with its `Wire`: Claude Code's, or an agent
dialect's (parkgate.dialects: its endpoint, its pre-tool events, what counts
as its decision). For a dialect, a failure blocks with no stdout, the reason on
stderr and exit 2 (Codex and Gemini read exit 2 as a block; Codex would let a
deny without a reason, `ask`, or a timeout through).

A hook process starts for every tool call, so `parkgate.cli.main` runs this
without the rest of the CLI: the standard library and the wire format only
(parkgate.cli.hook_http: a socket, not httpx or urllib); parkgate's settings
are read only when `--url` or `--timeout` is missing (`parkgate <agent>
install` writes both).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parkgate.cli import hook_http
from parkgate.dialects import Dialect
from parkgate.dialects import get as get_dialect
from parkgate.dialects.claude_code_wire import (
    COMMAND_MARGIN,
    CONFIRM_PARAM,
    HOOK_PATH,
    KEY_ENV,
    START_FIELD,
    TIMEOUT_MARGIN,
    is_decision,
    pre_tool_use,
)

#: Exit status every agent's command hooks read as "block this call".
EXIT_BLOCK = 2
#: Claude Code's non-blocking hook error (the reason is shown, nothing blocked).
EXIT_NOTICE = 1
#: The events whose failure does not block (the tool ran already, or a prompt).
NON_BLOCKING = frozenset({"PostToolUse", "PostToolUseFailure", "UserPromptSubmit"})
#: Seconds before a PreToolUse first asks whether its call parked, and between asks.
PARK_CHECK_SECONDS = 1.0
#: Statuses in which the call may still park (submitted, or not yet).
NOT_YET_PARKED = frozenset({None, "queued"})


@dataclass(frozen=True)
class Wire:
    """One agent's hook on the wire, as this process needs it."""

    name: str
    path: str
    pre_events: frozenset[str]
    non_blocking: frozenset[str]
    is_decision: Callable[[Any], bool]
    #: "allow" or "deny", for the resumed line.
    verdict: Callable[[Any], str]
    #: The stdout of a blocked pre-tool event (besides exit 2 and stderr).
    blocked: Callable[[str], str]
    #: The settings field holding the hold (the default deadline's base).
    wait_setting: str
    #: The event names its call (the parked notice can look it up).
    call_ids: bool = True


def _claude_verdict(body: Any) -> str:
    return str(body["hookSpecificOutput"]["permissionDecision"])


CLAUDE_CODE = Wire(
    name="claude-code", path=HOOK_PATH, pre_events=frozenset({"PreToolUse"}),
    non_blocking=NON_BLOCKING, is_decision=is_decision, verdict=_claude_verdict,
    blocked=lambda line: json.dumps(pre_tool_use("deny", line)),
    wait_setting="claude_code_wait_seconds")


def dialect_wire(dialect: Dialect) -> Wire:
    """The wire of an agent's dialect."""
    return Wire(
        name=dialect.name, path=dialect.path, pre_events=dialect.pre_events,
        non_blocking=frozenset(n for n, k in dialect.events.items() if k != "pre"),
        is_decision=dialect.is_decision,
        verdict=lambda body: "deny" if dialect.is_deny(body) else "allow",
        blocked=lambda _line: "", wait_setting=f"{dialect.name}_wait_seconds",
        call_ids=dialect.call_id_field is not None)


def wire_for(agent: str) -> Wire | None:
    """The wire of `agent` (claude-code, or a registered dialect's name)."""
    if agent == CLAUDE_CODE.name:
        return CLAUDE_CODE
    dialect = get_dialect(agent)
    return dialect_wire(dialect) if dialect is not None else None


@dataclass
class HookAnswer:
    """What the hook process prints and its exit status."""

    stdout: str
    stderr: str
    code: int


class HookFailure(Exception):
    """Why no decision came back (one line, shown to the agent and the user)."""


class NotStartedError(HookFailure):
    """An allowed call whose claim could not be started: it must not run (a
    block even with --fail-open)."""


def run(url: str | None, *, fail_open: bool, timeout: float | None,
        wire: Wire = CLAUDE_CODE) -> int:
    """Read the event on stdin, print the answer; the process's exit status."""
    try:
        if sys.stdin is None:  # started with fd 0 closed: Python gives no stream
            raise OSError("stdin is closed")
        raw = sys.stdin.buffer.read()
    except (OSError, ValueError) as exc:
        out = failed(None, f"the hook event could not be read from stdin ({exc})",
                     fail_open=fail_open, wire=wire)
    else:
        out = answer(raw, url, fail_open=fail_open, timeout=timeout, wire=wire)
    # A closed stdout or stderr loses that text, never the exit status (exit 2
    # blocks on its own; a traceback's exit 1 would let the call through).
    for stream, text in ((sys.stdout, out.stdout), (sys.stderr, out.stderr)):
        if stream is None:
            continue
        try:
            if text:
                stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
    return out.code


def run_argv(args: Sequence[str], wire: Wire = CLAUDE_CODE) -> int | None:
    """`run` for the options after `hook <agent>`; None when they are not
    plain `--url U`, `--timeout S`, `--fail-open` (the full CLI reports them)."""
    url: str | None = None
    timeout: float | None = None
    fail_open = False
    rest = list(args)
    while rest:
        opt = rest.pop(0)
        name, _, inline = opt.partition("=")
        if name == "--fail-open" and not inline:
            fail_open = True
            continue
        if name not in ("--url", "--timeout") or (not inline and not rest):
            return None
        value = inline or rest.pop(0)
        if name == "--url":
            url = value
            continue
        try:
            timeout = float(value)
        except ValueError:
            return None
        if not timeout >= 0.1:
            return None
    return run(url, fail_open=fail_open, timeout=timeout, wire=wire)


def answer(raw: bytes, url: str | None, *, fail_open: bool,
           timeout: float | None = None, wire: Wire = CLAUDE_CODE) -> HookAnswer:
    """The hook's output for the event `raw`: parkgate's answer when it is one,
    else the failure (see the module docstring)."""
    event_name: str | None = None
    try:
        event = _event(raw)
        name = event.get("hook_event_name")
        event_name = name if isinstance(name, str) else None
        if event_name is None:
            raise HookFailure("the hook event has no hook_event_name")
        watch = ParkWatch.of(event, url, timeout, wire)
        try:
            body = _post(raw, url, timeout, wire=wire,
                         path=wire.path + f"?{CONFIRM_PARAM}=true")
        finally:
            told = watch.end() if watch is not None else None
        _check(event_name, body, wire)
        resumed = "" if told is None else (
            f"parkgate: {event.get('tool_name')} call {event.get('tool_use_id')} resumed: "
            f"{wire.verdict(body)} (request {told})")
        _start_claim(body, url, timeout, wire)
    except NotStartedError as exc:
        return failed(event_name, str(exc), fail_open=False, wire=wire)
    except HookFailure as exc:
        return failed(event_name, str(exc), fail_open=fail_open, wire=wire)
    return HookAnswer(json.dumps(body), resumed, 0)


class ParkWatch:
    """Says on stderr, once, that the PreToolUse this hook holds is parked for a
    human (the request id, the inbox to decide at; never the signed link): a
    hook holding for minutes must not look deadlocked. A daemon thread asks
    parkgate for the call's status until it parks or the answer comes."""

    def __init__(self, tool: str, session_id: str, tool_use_id: str, url: str | None,
                 timeout: float | None, wire: Wire = CLAUDE_CODE) -> None:
        self.tool, self.session_id, self.tool_use_id = tool, session_id, tool_use_id
        self.url, self.timeout, self.wire = url, timeout, wire
        self.told: str | None = None  # the request id the parked line named
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @classmethod
    def of(cls, event: dict[str, Any], url: str | None, timeout: float | None,
           wire: Wire = CLAUDE_CODE) -> ParkWatch | None:
        """A started watch for a pre-tool event naming its call; None for other
        events (and agents that send no call id)."""
        tool, session_id, tool_use_id = (
            event.get(k) for k in ("tool_name", "session_id", "tool_use_id"))
        if event.get("hook_event_name") not in wire.pre_events or not wire.call_ids or not (
                isinstance(tool, str) and isinstance(session_id, str)
                and isinstance(tool_use_id, str) and tool and session_id and tool_use_id):
            return None
        watch = cls(tool, session_id, tool_use_id, url, timeout, wire)
        watch._thread.start()
        return watch

    def end(self) -> str | None:
        """Stop watching (parkgate answered); the request id if it said parked."""
        with self._lock:
            self._stop.set()
        return self.told

    def _watch(self) -> None:
        while not self._stop.wait(PARK_CHECK_SECONDS):
            try:
                base, _ = _target(self.url, self.timeout, self.wire)
                call = _get(base, f"/v1/sessions/{self.session_id}/tool-calls/"
                                  f"{self.tool_use_id}")
            except Exception:  # not submitted yet, or parkgate busy: ask again
                continue
            status = call.get("status") if isinstance(call, dict) else None
            if status in NOT_YET_PARKED:
                continue
            if status == "parked":
                with self._lock:
                    if self._stop.is_set():
                        return
                    self.told = str(call.get("request_id"))
                    sys.stderr.write(
                        f"parkgate: {self.tool} call {self.tool_use_id} is parked for "
                        f"approval (request {self.told}); decide at {base}/inbox\n")
                    sys.stderr.flush()
            return


def _get(base: str, path: str) -> Any:
    """A short GET of parkgate's API with the agent key (the watch's status read)."""
    status, body = hook_http.request(
        "GET", base + path, {"Authorization": f"Bearer {os.environ.get(KEY_ENV, '')}"},
        None, 5)
    if not 200 <= status < 300:  # a call still on its way answers 202
        raise HookFailure(f"HTTP {status}")
    return json.loads(body)


def failed(event_name: str | None, reason: str, *, fail_open: bool,
           wire: Wire = CLAUDE_CODE) -> HookAnswer:
    """A failure: a block for a pre-tool event or an event not read (unless
    `fail_open`), a non-blocking notice for post and prompt events."""
    line = "parkgate: " + " ".join(reason.split())
    if event_name in wire.non_blocking:
        return HookAnswer("", line, EXIT_NOTICE)
    if fail_open:
        return HookAnswer("", f"{line} (--fail-open: the call is let through)", 0)
    return HookAnswer(wire.blocked(f"{line}; the call is blocked"),
                      f"{line}; the call is blocked", EXIT_BLOCK)


def _event(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise HookFailure("the hook event on stdin is empty")
    try:
        event = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HookFailure(f"the hook event on stdin is not JSON ({exc})") from None
    if not isinstance(event, dict):
        raise HookFailure("the hook event on stdin is not a JSON object")
    return event


def _target(url: str | None, timeout: float | None,
            wire: Wire = CLAUDE_CODE) -> tuple[str, float]:
    """parkgate's base URL and how long to wait for it: the options, else the
    settings (`public_base_url`, the agent's hold + 25 s)."""
    if url is not None and timeout is not None:
        return url.rstrip("/"), timeout
    try:
        from parkgate.cli.common import load_settings

        settings = load_settings()
    except Exception as exc:  # a broken configuration is one line, not a traceback
        raise HookFailure(f"parkgate's settings cannot be read ({exc})") from None
    if timeout is None:
        timeout = float(getattr(settings, wire.wait_setting)) + TIMEOUT_MARGIN - COMMAND_MARGIN
    return (url or settings.public_base_url).rstrip("/"), timeout


def _start_claim(body: Any, url: str | None, timeout: float | None,
                 wire: Wire = CLAUDE_CODE) -> None:
    """Start the claim an `allow` names, just before Claude Code runs the call
    (this process dying before here leaves it unstarted: the call is taken
    over by the retry, or released again, never `outcome_unknown`); the claim
    is removed from the answer. NotStartedError when it cannot be started."""
    claim = body.pop(START_FIELD, None) if isinstance(body, dict) else None
    if claim is None:
        return
    try:
        path = f"/v1/sessions/{claim['session_id']}/tool-calls/{claim['tool_use_id']}/start"
        _post(json.dumps({"claim_id": claim["claim_id"]}).encode(), url, timeout, path=path,
              wire=wire)
    except (HookFailure, KeyError, TypeError) as exc:
        raise NotStartedError(f"the allowed call could not be started ({exc})") from None


def _post(raw: bytes, url: str | None, timeout: float | None, *,
          path: str = HOOK_PATH + f"?{CONFIRM_PARAM}=true", wire: Wire = CLAUDE_CODE) -> Any:
    """parkgate's answer (JSON) to the event (or to `path`), or why there is none."""
    key = os.environ.get(KEY_ENV, "")
    if not key:
        raise HookFailure(f"{KEY_ENV} is not set (the hook needs an agent key)")
    base, seconds = _target(url, timeout, wire)
    try:
        status, body = hook_http.request(
            "POST", base + path,
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, raw,
            seconds)
    except TimeoutError:
        raise HookFailure(f"parkgate at {base} did not answer within {seconds:g} s") from None
    except (OSError, ValueError) as exc:
        raise HookFailure(f"parkgate could not be reached at {base} ({exc})") from None
    if status != 200:
        raise HookFailure(_refusal(status, _message(body)))
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HookFailure(f"parkgate's answer is not JSON: {body[:200]!r}") from None


def _message(raw: bytes) -> str:
    """The API's one-line error message, else the start of the body."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw[:200].decode("utf-8", "replace")
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(body)[:200]


def _refusal(status: int, message: str) -> str:
    """What a non-200 answer means for this hook."""
    if status in (401, 403):
        return f"parkgate refused the agent key in {KEY_ENV} (HTTP {status}: {message})"
    if status in (400, 413, 415, 422):
        return f"parkgate refused the hook event (HTTP {status}: {message})"
    if status == 429:
        return f"parkgate is rate-limiting this key (HTTP 429: {message})"
    if status >= 500:
        return f"parkgate failed to answer (HTTP {status}: {message})"
    return f"parkgate refused the request (HTTP {status}: {message})"


def _check(event_name: str, body: Any, wire: Wire = CLAUDE_CODE) -> None:
    """A pre-tool event needs a decision; every other event a JSON object."""
    if event_name in wire.pre_events:
        if not isinstance(body, dict) or not wire.is_decision(
                {k: v for k, v in body.items() if k != START_FIELD}):
            raise HookFailure(f"parkgate's answer is not a {event_name} decision: "
                              f"{json.dumps(body)[:200]}")
    elif not isinstance(body, dict):
        raise HookFailure(f"parkgate's answer is not a JSON object: {json.dumps(body)[:200]}")
