"""HTTP service: agent API (/v1), approval pages, audit pages, health and metrics."""

from dispatcher.api.app import create_app
from dispatcher.api.deps import ApiDeps

__all__ = ["ApiDeps", "create_app"]
