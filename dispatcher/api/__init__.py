"""HTTP service: agent API (/v1), approval pages, audit pages, health and metrics.

`create_app` and `ApiDeps` load on first use (PEP 562), not with the package:
importing one module of it (`parkgate.api.schemas` for a model) should not
build the whole app and its integrations.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parkgate.api.app import create_app
    from parkgate.api.deps import ApiDeps

_EXPORTS = {"create_app": "parkgate.api.app", "ApiDeps": "parkgate.api.deps"}

__all__ = ["ApiDeps", "create_app"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parkgate.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
