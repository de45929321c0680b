"""HTTP service: agent API (/v1), approval pages, audit pages, health and metrics."""

from parkgate.api.app import create_app
from parkgate.api.deps import ApiDeps

__all__ = ["ApiDeps", "create_app"]
