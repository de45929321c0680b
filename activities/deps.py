"""What activities need from the rest of parkgate, injected once per worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parkgate.calls.records import HistoryStore
from parkgate.settings import Settings

if TYPE_CHECKING:
    from parkgate.pipeline import Pipeline


@dataclass(frozen=True)
class Deps:
    """The pipeline (registry, policy, hooks, budget, limits), settings and store."""

    settings: Settings
    pipeline: Pipeline
    store: HistoryStore
