"""The typed activity stubs the workflows call (parkgate.durable.activity_defs) match
the implementations every worker registers: same stable names, same signatures."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio import activity

from parkgate import activities
from parkgate.activities.deps import Deps
from parkgate.calls.records import HistoryStore
from parkgate.durable import activity_defs
from parkgate.runtime.worker import build_pipeline
from parkgate.settings import Settings


def name_of(fn: Callable[..., Any]) -> str:
    defn = activity._Definition.from_callable(fn)
    assert defn is not None and defn.name, fn
    return defn.name


def shape(fn: Callable[..., Any]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """Parameter names and kinds, and the resolved type hints (inputs and result)."""
    params = [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]
    return params, typing.get_type_hints(fn)


@pytest.fixture
def registered(tmp_path: Path) -> dict[str, Callable[..., Any]]:
    settings = Settings(data_dir=tmp_path)
    deps = Deps(settings=settings, pipeline=build_pipeline(settings),
                store=cast(HistoryStore, object()))
    return {name_of(fn): fn for fn in activities.build(deps)}


def test_every_registered_activity_has_a_stub(registered: dict[str, Callable[..., Any]]) -> None:
    assert sorted(name_of(stub) for stub in activity_defs.ALL) == sorted(registered)


@pytest.mark.parametrize("stub", activity_defs.ALL, ids=lambda s: s.__name__)
def test_stub_matches_implementation(
    stub: Callable[..., Any], registered: dict[str, Callable[..., Any]]
) -> None:
    impl = registered[name_of(stub)]
    assert shape(stub) == shape(impl)


async def test_stubs_do_not_run() -> None:
    with pytest.raises(NotImplementedError, match="signature"):
        await activity_defs.classify(cast(Any, None))
