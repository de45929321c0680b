"""Adapters are tested offline (scripted models) against the real parkgate stack."""

from tests.api.conftest import dev_temporal

__all__ = ["dev_temporal"]
