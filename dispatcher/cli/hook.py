"""`parkgate hook claude-code`: the command-hook form of /v1/hooks/claude-code.

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

A hook process starts for every tool call: the work is done here with httpx
and the standard library, imported when the command runs.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import typer

app = typer.Typer(help="Answer an agent's hook events (reads stdin).", no_args_is_help=True)

#: Exit status every agent's command hooks read as "block this call".
EXIT_BLOCK = 2
#: Claude Code's non-blocking hook error (the reason is shown, nothing blocked).
EXIT_NOTICE = 1
#: The decisions a PreToolUse answer may carry.
DECISIONS = frozenset({"allow", "deny", "ask", "defer"})
#: The events whose failure does not block (the tool ran already, or a prompt).
NON_BLOCKING = frozenset({"PostToolUse", "PostToolUseFailure", "UserPromptSubmit"})


@dataclass
class HookAnswer:
    """What the hook process prints and its exit status."""

    stdout: str
    stderr: str
    code: int


class HookFailure(Exception):
    """Why no decision came back (one line, shown to the agent and the user)."""


@app.callback()
def _group() -> None:
    """Hooks."""


@app.command("claude-code")
def claude_code_hook(
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (public_base_url)."),
    fail_open: bool = typer.Option(False, "--fail-open",
                                   help="Let the call through when no decision comes back."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.1,
        help="Seconds to wait for parkgate (default: claude_code_wait_seconds + 25, "
             "inside the installed hook's own timeout)."),
) -> None:
    """Post one Claude Code hook event (stdin) to parkgate; print its answer."""
    try:
        raw = sys.stdin.buffer.read()
    except (OSError, ValueError) as exc:
        out = failed(None, f"the hook event could not be read from stdin ({exc})",
                     fail_open=fail_open)
    else:
        out = answer(raw, url, fail_open=fail_open, timeout=timeout)
    if out.stdout:
        sys.stdout.write(out.stdout + "\n")
    if out.stderr:
        sys.stderr.write(out.stderr + "\n")
    raise typer.Exit(out.code)


def answer(raw: bytes, url: str | None, *, fail_open: bool,
           timeout: float | None = None) -> HookAnswer:
    """The hook's output for the event `raw`: parkgate's answer when it is one,
    else the failure (see the module docstring)."""
    event_name: str | None = None
    try:
        event = _event(raw)
        name = event.get("hook_event_name")
        event_name = name if isinstance(name, str) else None
        if event_name is None:
            raise HookFailure("the hook event has no hook_event_name")
        body = _post(raw, url, timeout)
        _check(event_name, body)
    except HookFailure as exc:
        return failed(event_name, str(exc), fail_open=fail_open)
    return HookAnswer(json.dumps(body), "", 0)


def failed(event_name: str | None, reason: str, *, fail_open: bool) -> HookAnswer:
    """A failure: a block for a PreToolUse or an event not read (unless
    `fail_open`), a non-blocking notice for post and prompt events."""
    line = "parkgate: " + " ".join(reason.split())
    if event_name in NON_BLOCKING:
        return HookAnswer("", line, EXIT_NOTICE)
    if fail_open:
        return HookAnswer("", f"{line} (--fail-open: the call is let through)", 0)
    from parkgate.clients.claude_code import pre_tool_use

    deny = pre_tool_use("deny", f"{line}; the call is blocked")
    return HookAnswer(json.dumps(deny), f"{line}; the call is blocked", EXIT_BLOCK)


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


def _post(raw: bytes, url: str | None, timeout: float | None) -> Any:
    """parkgate's answer (JSON) to the event, or why there is none."""
    import httpx

    from parkgate.clients.claude_code import HOOK_PATH, KEY_ENV, TIMEOUT_MARGIN

    key = os.environ.get(KEY_ENV, "")
    if not key:
        raise HookFailure(f"{KEY_ENV} is not set (the hook needs an agent key)")
    try:
        from parkgate.cli.common import load_settings

        settings = load_settings()
    except Exception as exc:  # a broken configuration is one line, not a traceback
        raise HookFailure(f"parkgate's settings cannot be read ({exc})") from None
    base = (url or settings.public_base_url).rstrip("/")
    if timeout is None:
        timeout = settings.claude_code_wait_seconds + TIMEOUT_MARGIN - 5
    try:
        r = httpx.post(base + HOOK_PATH, content=raw,
                       headers={"Authorization": f"Bearer {key}",
                                "Content-Type": "application/json"},
                       timeout=timeout)
    except httpx.TimeoutException:
        raise HookFailure(f"parkgate at {base} did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise HookFailure(f"parkgate could not be reached at {base} ({exc})") from None
    if r.status_code != 200:
        raise HookFailure(_refusal(r.status_code, _message(r)))
    try:
        return r.json()
    except ValueError:
        raise HookFailure(f"parkgate's answer is not JSON: {r.text[:200]!r}") from None


def _message(r: Any) -> str:
    """The API's one-line error message, else the start of the body."""
    try:
        body = r.json()
    except ValueError:
        return str(r.text[:200])
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(body)[:200]


def _refusal(status: int, message: str) -> str:
    """What a non-200 answer means for this hook."""
    if status in (401, 403):
        return f"parkgate refused the agent key in PARKGATE_API_KEY (HTTP {status}: {message})"
    if status in (400, 413, 415, 422):
        return f"parkgate refused the hook event (HTTP {status}: {message})"
    if status == 429:
        return f"parkgate is rate-limiting this key (HTTP 429: {message})"
    if status >= 500:
        return f"parkgate failed to answer (HTTP {status}: {message})"
    return f"parkgate refused the request (HTTP {status}: {message})"


def _check(event_name: str, body: Any) -> None:
    """A PreToolUse needs a decision; every other event a JSON object."""
    if event_name != "PreToolUse":
        if not isinstance(body, dict):
            raise HookFailure(f"parkgate's answer is not a JSON object: {json.dumps(body)[:200]}")
        return
    out = body.get("hookSpecificOutput") if isinstance(body, dict) else None
    if not isinstance(out, dict) or out.get("hookEventName") != "PreToolUse" \
            or out.get("permissionDecision") not in DECISIONS:
        raise HookFailure("parkgate's answer is not a PreToolUse decision: "
                          f"{json.dumps(body)[:200]}")
