"""The environment a tool's child process gets: an allowlist, never the server's.

The server's environment holds secrets (PARKGATE_LINK_SECRET, the Temporal API
key, payload keys). A tool's subprocess gets only PATH, LANG and HOME (the
workspace, so dotfiles a tool writes stay there) plus the names an operator
adds with the `tool_env_passthrough` setting. Names starting with PARKGATE_ or
listed in SECRET_NAMES are dropped even when the setting names them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

#: Always passed through (when set in the server's environment).
BASE_NAMES = ("PATH", "LANG")
#: Never passed to a tool, whatever a setting says.
SECRET_NAMES = frozenset(
    {"TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"}
)
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def is_secret_name(name: str) -> bool:
    """True for names a tool must never see."""
    upper = name.upper()
    return upper.startswith("PARKGATE_") or upper in SECRET_NAMES


def tool_environment(
    workspace: str,
    passthrough: Iterable[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The allowlisted environment for a tool running in `workspace`."""
    env_in = os.environ if source is None else source
    env: dict[str, str] = {}
    for name in (*BASE_NAMES, *passthrough):
        if is_secret_name(name) or name == "HOME":
            continue
        if name in env_in:
            env[name] = env_in[name]
    env.setdefault("PATH", _DEFAULT_PATH)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = workspace
    env["PWD"] = workspace
    return env
