"""What `parkgate opencode install` writes: the plugin and opencode's permissions.

The plugin (`opencode_plugin.js`, package data) goes to the project's
`.opencode/plugin/parkgate.js` or the user's `~/.config/opencode/plugin/`,
with parkgate's URL and its deadline (the hold plus a margin) filled in.

opencode asks its own user before some calls (`permission: "ask"`); run
without a terminal it rejects them, even after parkgate allowed the call, and
the approved call never runs. parkgate is the asker now, so the install turns
every `ask` in the config's `permission` into `allow` and sets the gated
permissions (`bash`, `edit`, `webfetch`, and opencode's own asks for paths
outside the project and repeated calls: a "call again" is a repeat) to
`allow` where the config says nothing. A `deny` stays: parkgate never
loosens what its user forbade. Everything else in the config is kept.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from parkgate.dialects.hook_files import HookFileError, read_object
from parkgate.dialects.opencode import PLUGIN_FILE, PLUGIN_MARGIN_SECONDS

#: Permissions set to `allow` when the config leaves them unset (their default
#: may be `ask`, which a run without a terminal turns into a rejection).
GATED_PERMISSIONS = ("bash", "edit", "webfetch", "external_directory", "doom_loop")


@dataclass(frozen=True)
class Targets:
    """Where the plugin and the config go."""

    config: Path
    plugin: Path


def targets(project: Path | None, user: bool, env: Mapping[str, str] | None = None) -> Targets:
    """The project's files (default: the current directory), or the user's."""
    env = os.environ if env is None else env
    if user:
        base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "opencode"
        return Targets(_config_in(base), base / "plugin" / PLUGIN_FILE)
    root = (project or Path.cwd()).resolve()
    return Targets(_config_in(root), root / ".opencode" / "plugin" / PLUGIN_FILE)


def _config_in(folder: Path) -> Path:
    """opencode.json, or an existing opencode.jsonc when there is no opencode.json."""
    plain, commented = folder / "opencode.json", folder / "opencode.jsonc"
    return commented if commented.is_file() and not plain.is_file() else plain


def plugin_text(url: str, wait_seconds: float) -> str:
    """The plugin with parkgate's URL and its deadline filled in."""
    template = resources.files("parkgate.dialects").joinpath("opencode_plugin.js").read_text(
        encoding="utf-8")
    deadline_ms = int((wait_seconds + PLUGIN_MARGIN_SECONDS) * 1000)
    return template.replace('"__PARKGATE_URL__"', json.dumps(url.rstrip("/"))).replace(
        "__DEADLINE_MS__", str(deadline_ms))


def read_config(path: Path) -> dict[str, Any]:
    """The existing config ({} when there is none); HookFileError when unreadable
    (opencode reads comments, parkgate's merge does not)."""
    return read_object(path, what="plain JSON", fix="remove its comments or fix it first")


def _allow_asks(value: Any) -> Any:
    if value == "ask":
        return "allow"
    if isinstance(value, dict):
        return {k: _allow_asks(v) for k, v in value.items()}
    return value


def merge_config(existing: Mapping[str, Any]) -> dict[str, Any]:
    """`existing` with opencode's asks turned into allows (parkgate asks instead)."""
    merged = dict(existing)
    permission = merged.get("permission")
    if isinstance(permission, str):
        merged["permission"] = _allow_asks(permission)
        return merged
    if permission is not None and not isinstance(permission, dict):
        raise HookFileError("the config's `permission` is neither a string nor an object")
    table = _allow_asks(dict(permission or {}))
    for name in GATED_PERMISSIONS:
        table.setdefault(name, "allow")
    merged["permission"] = table
    return merged
