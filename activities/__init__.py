"""Temporal activities: classes with injected dependencies.

`build(deps)` is the one list every worker registers (production and tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parkgate.activities.classify import ClassifyActivities
from parkgate.activities.deps import Deps
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.record import RecordActivities


def build(deps: Deps) -> list[Callable[..., Any]]:
    """Every parkgate activity, bound to `deps`."""
    from parkgate.activities.client_outcome import ClientOutcomeActivities
    from parkgate.activities.notify import NotifyActivities
    from parkgate.activities.slack import SlackActivities

    execute = ExecuteActivities(deps)
    classify = ClassifyActivities(deps, runner=execute)
    record = RecordActivities(deps.store, deps.settings)
    notify = NotifyActivities(deps.settings)
    slack = SlackActivities(deps.settings, deps.store)
    return [
        classify.classify,
        classify.revalidate,
        record.record,
        record.record_committed,
        record.create_approval,
        execute.execute,
        execute.execute_local,
        notify.notify,
        slack.post,
        slack.outcome,
        ClientOutcomeActivities(deps).client_outcome,
    ]


__all__ = ["Deps", "build"]
