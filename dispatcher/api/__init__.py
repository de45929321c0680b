"""HTTP service, by audience: `agents` (the /v1 REST API, agents' hooks, MCP),
`people` (approval links, the inbox, sign-in, Slack, remembered decisions) and
`operators` (audit pages, codec, health and metrics), independent of each other
over `shared` (the call service, models, dependencies, errors, approval links,
sign-in pieces, templates). `app` mounts the three; `assemble` builds the app
for the runtime.

`create_app` and `ApiDeps` load on first use (PEP 562), not with the package:
importing one module of it (`parkgate.api.shared.schemas` for a model) should not
build the whole app and its integrations.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parkgate.api.app import create_app
    from parkgate.api.shared.deps import ApiDeps

_EXPORTS = {"create_app": "parkgate.api.app", "ApiDeps": "parkgate.api.shared.deps"}

__all__ = ["ApiDeps", "create_app"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parkgate.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
