"""Named budgets' arithmetic (parkgate.rules.budgets): windows, amounts, what Cedar sees."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from parkgate.rules.budgets import (
    UNIT,
    BudgetError,
    BudgetSpec,
    BudgetState,
    charges_for,
    show_units,
    to_units,
)

AT = datetime(2026, 11, 28, 7, 42, 13, tzinfo=UTC)


def test_windows_are_aligned_in_utc_and_roll_over() -> None:
    assert BudgetSpec(limit=1, window="1d").window_start(AT) == datetime(2026, 11, 28, tzinfo=UTC)
    assert BudgetSpec(limit=1, window="1h").window_start(AT) == AT.replace(minute=0, second=0)
    assert BudgetSpec(limit=1, window="15m").window_start(AT) == AT.replace(minute=30, second=0)
    assert BudgetSpec(limit=1, window="1w").window_start(AT).weekday() == 3  # a Thursday
    assert BudgetSpec(limit=1).window_start(AT) == BudgetSpec(limit=1).window_start(
        datetime(2030, 1, 1, tzinfo=UTC))  # no window: one for ever


def test_amounts_are_exact_micro_units() -> None:
    assert to_units(2.5) == 2_500_000 and to_units("0.1") == 100_000 and to_units(0) == 0
    assert show_units(100_500_000) == "100.5" and show_units(3 * UNIT) == "3"
    for bad in (-1, True, "many", float("nan"), None, [1]):
        with pytest.raises(BudgetError):
            to_units(bad)


def test_a_call_without_the_counted_field_costs_nothing() -> None:
    budgets = {"spend": BudgetSpec(limit=100, counts="input.cost"),
               "calls": BudgetSpec(limit=5, tools=["shell"])}
    assert [c.budget for c in charges_for(budgets, "shell", {}, "s", "p", "k", AT)] == ["calls"]
    assert charges_for(budgets, "read_file", {}, "s", "p", "k", AT) == []
    (spend,) = charges_for(budgets, "read_file", {"cost": 5}, "s", "p", "k", AT)
    assert (spend.amount, spend.limit, spend.scope) == (5 * UNIT, 100 * UNIT, "s")
    with pytest.raises(BudgetError, match=r"budget 'spend' counts input\.cost"):
        charges_for(budgets, "read_file", {"cost": -5}, "s", "p", "k", AT)


def test_cedar_sees_whole_units_never_more_room_than_there_is() -> None:
    state = BudgetState(used=98_500_000, limit=100 * UNIT)
    assert state.cedar() == {"used": 99, "limit": 100, "remaining": 1}
    assert BudgetState(used=120 * UNIT, limit=100 * UNIT).cedar()["remaining"] == 0
