"""The client is tested against the real API + worker + Temporal dev server."""

from tests.api.conftest import dev_temporal

__all__ = ["dev_temporal"]
