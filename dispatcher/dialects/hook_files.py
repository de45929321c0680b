"""The agents' hook settings files, merged (never clobbered) by `parkgate <agent> install`.

Codex: `hooks.json` (`{"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
"command": ..., "timeout": <integer seconds>}]}], ...}}`; Codex refuses any
other top-level key, and a float timeout invalidates the whole file), and its
trust in `config.toml` (`[hooks.state."<hooks.json>:pre_tool_use:<group>:<handler>"]
trusted_hash = "<the hash Codex computes>"`, handed out by `codex app-server`).
Gemini CLI: `settings.json`'s `hooks` (`BeforeTool` / `AfterTool`, the same
group shape, `timeout` in milliseconds).

Pure: text and JSON in, text and JSON out; the CLI writes the files, and
reads them with `read_object` (the one reader of an agent's JSON settings).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What marks a hook an earlier install wrote (replaced, never duplicated).
MARK = "hook {agent}"
#: Seconds the agent's hook timeout leaves beyond parkgate's hold, and of
#: those, what the command keeps for itself to answer before the agent gives up.
TIMEOUT_MARGIN = 30
COMMAND_MARGIN = 5


class HookFileError(ValueError):
    """A settings file that cannot be merged as it is (the user fixes it first)."""


def read_object(path: Path, *, what: str = "valid JSON", fix: str = "fix it first"
                ) -> dict[str, Any]:
    """An agent's JSON settings file as an object ({} when missing or empty);
    HookFileError naming the file when it is not `what` or not an object."""
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HookFileError(f"{path} is not {what} ({exc}); {fix}") from None
    if not isinstance(loaded, dict):
        raise HookFileError(f"{path} is not a JSON object; {fix}")
    return loaded


def hook_command(executable: str, agent: str, url: str, deadline: int) -> str:
    """The command line of `parkgate hook <agent>` (quoted for `sh -c`)."""
    return f"{_quote(executable)} hook {agent} --url {_quote(url.rstrip('/'))} " \
           f"--timeout {deadline}"


def _quote(word: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:@%+=,-]+", word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def timeouts(wait_seconds: float) -> tuple[int, int]:
    """(the agent's hook timeout, the command's own deadline), in whole seconds."""
    timeout = int(wait_seconds) + TIMEOUT_MARGIN
    return timeout, timeout - COMMAND_MARGIN


def is_parkgate_hook(hook: Any, agent: str) -> bool:
    return isinstance(hook, dict) and MARK.format(agent=agent) in str(hook.get("command", ""))


def merge_hooks(existing: Mapping[str, Any], events: Sequence[str], hook: dict[str, Any],
                agent: str) -> dict[str, Any]:
    """`existing` with one group holding `hook` under each event in `events`;
    every other hook and key kept, an earlier parkgate hook replaced."""
    merged = dict(existing)
    hooks = merged.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise HookFileError("its `hooks` is not an object")
    hooks = dict(hooks)
    for event in events:
        groups = hooks.get(event) or []
        if not isinstance(groups, list):
            raise HookFileError(f"its `hooks.{event}` is not a list")
        kept = []
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                kept.append(group)
                continue
            inner = [h for h in group["hooks"] if not is_parkgate_hook(h, agent)]
            if inner:
                kept.append({**group, "hooks": inner})
        kept.append({"hooks": [dict(hook)]})
        hooks[event] = kept
    merged["hooks"] = hooks
    return merged


# --------------------------------------------------------------------------
# Codex
# --------------------------------------------------------------------------

CODEX_EVENTS = ("PreToolUse", "PostToolUse")


def codex_hooks(existing: Mapping[str, Any], command: str, timeout: int) -> dict[str, Any]:
    """Codex's hooks.json with parkgate's PreToolUse and PostToolUse hooks."""
    extra = sorted(k for k in existing if k != "hooks")
    if extra:
        raise HookFileError(f"Codex accepts only `hooks` at the top of hooks.json; it has "
                            f"{', '.join(extra)} (Codex ignores the whole file as it is)")
    hook = {"type": "command", "command": command, "timeout": int(timeout)}
    return merge_hooks(existing, CODEX_EVENTS, hook, "codex")


def set_trusted_hash(text: str, key: str, trusted_hash: str) -> str:
    """config.toml `text` with `[hooks.state."<key>"] trusted_hash` set; the rest
    kept byte for byte. HookFileError when the result would not say so."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HookFileError(f"it is not valid TOML ({exc})") from None
    header = f"[hooks.state.{json.dumps(key)}]"
    line = f"trusted_hash = {json.dumps(trusted_hash)}"
    start = text.find(header + "\n")
    if start < 0 and text.endswith(header):
        text, start = text + "\n", len(text) - len(header)
    if start < 0:
        sep = "" if not text or text.endswith("\n") else "\n"
        out = f"{text}{sep}\n{header}\n{line}\n"
    else:
        body_start = start + len(header) + 1
        nxt = re.search(r"^\s*\[", text[body_start:], re.MULTILINE)
        body_end = body_start + nxt.start() if nxt else len(text)
        body = text[body_start:body_end]
        kept = "".join(b for b in body.splitlines(keepends=True)
                       if not re.match(r"\s*trusted_hash\s*=", b))
        out = text[:body_start] + line + "\n" + kept + text[body_end:]
    try:
        parsed = tomllib.loads(out)
    except tomllib.TOMLDecodeError as exc:
        raise HookFileError(f"its hooks.state could not be written ({exc})") from None
    if trusted_hash_of(parsed, key) != trusted_hash:
        raise HookFileError(f"its hooks.state for {key} could not be written")
    return out


def trusted_hash_of(config: Mapping[str, Any], key: str) -> str | None:
    state = config.get("hooks", {}).get("state", {}) if isinstance(
        config.get("hooks"), dict) else {}
    entry = state.get(key) if isinstance(state, dict) else None
    value = entry.get("trusted_hash") if isinstance(entry, dict) else None
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------
# Gemini CLI
# --------------------------------------------------------------------------

GEMINI_EVENTS = ("BeforeTool", "AfterTool")


def gemini_settings(existing: Mapping[str, Any], command: str, timeout_seconds: int
                    ) -> dict[str, Any]:
    """Gemini CLI's settings.json with parkgate's BeforeTool and AfterTool hooks
    (`timeout` in milliseconds)."""
    hook = {"type": "command", "name": "parkgate", "command": command,
            "timeout": int(timeout_seconds) * 1000}
    return merge_hooks(existing, GEMINI_EVENTS, hook, "gemini")
