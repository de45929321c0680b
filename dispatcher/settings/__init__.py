"""parkgate's configuration: one `Settings` class read from a YAML file and
PARKGATE_* environment variables (environment wins over the file, the file
over defaults).

- `model`: `Settings` and `get_settings` (the one class; every field flat, so
  each has one obvious environment name);
- `entries`: the shapes of list entries (approvers, webhooks, group grants);
- `paths`: where parkgate keeps its files on the host (`HostPaths`, the data
  directory, the config file, added workspace roots);
- `agents`: the per-agent hook settings (hold times, tool classes).

`Settings` and `get_settings` load on first use, so a process that only needs
a path or an entry shape (the CLI's quick commands) does not import pydantic-
settings and every setting's validators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parkgate.settings.model import Settings, get_settings

__all__ = ["Settings", "get_settings"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from parkgate.settings import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
