"""MCP tool sources are tested with the real API, worker and Temporal dev server."""

from tests.api.conftest import dev_temporal

__all__ = ["dev_temporal"]
