"""What every `parkgate <agent> install` shares: which parkgate to point at,
which parkgate to run, and reading and writing the agent's settings files.

The URL: `--url`, else `PARKGATE_API_URL`, else the running `parkgate serve`
of this data directory (`PARKGATE_DATA_DIR`; its serve.json), else the
`public_base_url` setting. A command hook names the absolute path of the
`parkgate` executable that ran the install (the agent's PATH may have none).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from parkgate.cli.common import CliError, load_settings
from parkgate.settings import Settings

#: Merges a command hook into an agent's settings: (existing, command, timeout).
Merge = Callable[[Mapping[str, Any], str, int], dict[str, Any]]

URL_ENV = "PARKGATE_API_URL"


def resolve_url(url: str | None, settings: Settings) -> tuple[str, str]:
    """The parkgate URL a hook should post to, and where it came from."""
    if url:
        return url.rstrip("/"), "--url"
    env = os.environ.get(URL_ENV, "").strip()
    if env:
        return env.rstrip("/"), URL_ENV
    from parkgate.runtime.embedded import read_runtime

    running = read_runtime(settings.data_dir)
    found = running.get("api_url") if running else None
    if isinstance(found, str) and found:
        return found.rstrip("/"), f"the running parkgate serve ({settings.data_dir})"
    return settings.public_base_url.rstrip("/"), "public_base_url"


def parkgate_executable() -> str:
    """The absolute path of the `parkgate` that is running this install."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "parkgate":
        found = argv0 if argv0.is_absolute() else Path(shutil.which(str(argv0)) or argv0)
        return str(found.absolute())
    beside = Path(sys.executable).parent / "parkgate"
    if beside.exists():
        return str(beside)
    which = shutil.which("parkgate")
    if which:
        return str(Path(which).absolute())
    raise CliError("cannot find the parkgate executable to write into the hook")


def read_json(path: Path) -> dict[str, Any]:
    """A settings file's JSON object ({} when missing); CliError when broken."""
    from parkgate.dialects.hook_files import HookFileError, read_object

    try:
        return read_object(path)
    except HookFileError as exc:
        raise CliError(str(exc)) from None


def write_text(path: Path, text: str) -> None:
    """Write `text` whole (a temporary file renamed over the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.parkgate-tmp")
    tmp.write_text(text, encoding="utf-8")
    if path.exists():
        tmp.chmod(path.stat().st_mode & 0o777)
    tmp.replace(path)


def scope(project: Path | None, user: bool) -> tuple[Path | None, bool]:
    """(--project DIR, --user) checked: they exclude each other."""
    if user and project is not None:
        raise CliError("--project and --user exclude each other", 2)
    return project, user


def merged_hooks(path: Path, agent: str, url: str | None,
                 wait_seconds: Callable[[Settings], float], merge: Merge) -> tuple[str, str, str]:
    """The agent's settings file at `path` with parkgate's command hook merged in
    (its timeout above the agent's hold), as the text to write; with the URL the
    hook posts to and where that URL came from."""
    from parkgate.dialects.hook_files import HookFileError, hook_command, timeouts

    settings = load_settings()
    base, source = resolve_url(url, settings)
    timeout, deadline = timeouts(wait_seconds(settings))
    command = hook_command(parkgate_executable(), agent, base, deadline)
    try:
        merged = merge(read_json(path), command, timeout)
    except HookFileError as exc:
        raise CliError(f"{path}: {exc}") from None
    return json.dumps(merged, indent=2) + "\n", base, source
