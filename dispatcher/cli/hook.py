"""`parkgate hook claude-code`: the command-hook form of /v1/hooks/claude-code.

Reads the hook event on stdin, posts it with the agent key from
PARKGATE_API_KEY, prints Claude Code's hook output. When parkgate cannot be
reached a PreToolUse is denied (fail closed) unless `--fail-open`.
"""

from __future__ import annotations

import json
import os
import sys

import typer

app = typer.Typer(help="Answer an agent's hook events (reads stdin).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Hooks."""


@app.command("claude-code")
def claude_code_hook(
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (public_base_url)."),
    fail_open: bool = typer.Option(False, "--fail-open",
                                   help="Print nothing (let the call through) when unreachable."),
) -> None:
    """Post one Claude Code hook event (stdin) to parkgate; print its answer."""
    import httpx

    from parkgate.cli.common import load_settings
    from parkgate.clients.claude_code import HOOK_PATH, KEY_ENV, TIMEOUT_MARGIN, pre_tool_use

    raw = sys.stdin.read()
    try:
        event = json.loads(raw)
    except json.JSONDecodeError:
        event = {}
    pre = isinstance(event, dict) and event.get("hook_event_name") == "PreToolUse"
    settings = load_settings()
    base = (url or settings.public_base_url).rstrip("/")
    key = os.environ.get(KEY_ENV, "")
    try:
        r = httpx.post(base + HOOK_PATH, content=raw.encode(),
                       headers={"Authorization": f"Bearer {key}",
                                "Content-Type": "application/json"},
                       timeout=settings.claude_code_wait_seconds + TIMEOUT_MARGIN - 5)
        if r.status_code != 200:
            message = r.json().get("error", {}).get("message", r.text[:200]) \
                if r.headers.get("content-type", "").startswith("application/json") else r.text
            raise RuntimeError(f"HTTP {r.status_code}: {message}")
        answer = r.json()
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        if pre and not fail_open:
            typer.echo(json.dumps(pre_tool_use(
                "deny", f"parkgate could not be reached, so the call is blocked ({exc})")))
        return
    typer.echo(json.dumps(answer))
