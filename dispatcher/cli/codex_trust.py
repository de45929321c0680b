"""Codex's hook trust, asked of Codex itself.

Codex skips a hook that is not trusted, silently, and runs the tool. Trust is
`[hooks.state."<key>"] trusted_hash` in `$CODEX_HOME/config.toml`, the key
naming the hooks.json, the event, the group and the handler, the hash one
Codex computes over the hook's definition (any edit of the hook loses it).
parkgate does not recompute that hash: it asks `codex app-server` (JSON-RPC
over stdio: `initialize`, `initialized`, `hooks/list`), which hands out each
hook's `key`, `currentHash` and `trustStatus`, the way Codex's own UI does.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Seconds to wait for `codex app-server` to answer.
RPC_SECONDS = 30.0


class TrustError(Exception):
    """Codex could not be asked (one line for the CLI)."""


@dataclass(frozen=True)
class ListedHook:
    """One hook as `codex app-server`'s hooks/list reports it."""

    key: str
    event: str
    command: str
    source_path: str
    current_hash: str
    trust: str

    @property
    def trusted(self) -> bool:
        return self.trust in ("trusted", "managed")


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def find_codex(explicit: str | None) -> str:
    """The codex executable: `--codex`, else `codex` on PATH."""
    found = explicit or shutil.which("codex")
    if not found:
        raise TrustError("the codex executable was not found on PATH (pass --codex PATH)")
    return found


def list_hooks(codex: str, cwd: Path) -> list[ListedHook]:
    """Every hook Codex loads for `cwd`, with its trust."""
    try:
        proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=str(cwd))
    except OSError as exc:
        raise TrustError(f"codex app-server could not start ({exc})") from None
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        _send(proc, {"id": 1, "method": "initialize",
                     "params": {"clientInfo": {"name": "parkgate", "version": "1"}}})
        _answer(proc, lines, 1)
        _send(proc, {"method": "initialized", "params": {}})
        _send(proc, {"id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}})
        result = _answer(proc, lines, 2)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    found = []
    for entry in result.get("data") or []:
        for hook in entry.get("hooks") or [] if isinstance(entry, dict) else []:
            if isinstance(hook, dict) and isinstance(hook.get("key"), str):
                found.append(ListedHook(
                    key=hook["key"], event=str(hook.get("eventName", "")),
                    command=str(hook.get("command", "")),
                    source_path=str(hook.get("sourcePath", "")),
                    current_hash=str(hook.get("currentHash", "")),
                    trust=str(hook.get("trustStatus", ""))))
    return found


def _send(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
    except OSError as exc:
        raise TrustError(f"codex app-server closed its input ({exc})") from None


def _answer(proc: subprocess.Popen[str], lines: queue.Queue[str | None],
            ident: int) -> dict[str, Any]:
    while True:
        try:
            line = lines.get(timeout=RPC_SECONDS)
        except queue.Empty:
            raise TrustError(f"codex app-server did not answer within {RPC_SECONDS:g} s"
                             ) from None
        if line is None:
            err = proc.stderr.read()[-300:] if proc.stderr else ""
            raise TrustError(f"codex app-server ended without answering ({err.strip()})")
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == ident:
            if "error" in message:
                raise TrustError(f"codex app-server refused: {message['error']}")
            result = message.get("result")
            return result if isinstance(result, dict) else {}
