"""Named budgets (the `budgets` setting): what a call costs and whether it fits.

A budget counts calls, or a number the tool input carries (`input.<field>`),
per session, project or key, in fixed UTC windows (`1h`, `1d`, none = for
ever). The store keeps the counts durably (`parkgate.store.budget_store`):
a call's charge is reserved when it is classified, kept once it runs and
released when it does not. A call that would pass a budget's limit parks for
a person (`on_exceed: park`, the default) or is denied (`deny`).

Amounts are kept as whole micro-units (`UNIT`), so sums are exact on every
database; people and Cedar policies see units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Micro-units per unit: `limit: 100` is stored as 100_000_000.
UNIT = 1_000_000
#: Largest amount one call (or a limit) may count, in units: a thousandth of what
#: the store's 64-bit counts hold in micro-units, so a window's sum stays in range.
MAX_AMOUNT = Decimal((2**63 - 1) // UNIT // 1000)
#: Rule prefix of a budget's decisions (`budget:cloud-spend`).
RULE_PREFIX = "budget:"
#: A budget's name: a Cedar record attribute and a settings key.
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
_WINDOW = re.compile(r"^(\d{1,6})([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The start of the one window of a budget without one.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BudgetError(ValueError):
    """A call's input cannot be counted against a budget (negative, not a number)."""

    def __init__(self, message: str, budget: str = "") -> None:
        super().__init__(message)
        self.budget = budget


def window_seconds(text: str) -> int:
    """`1h` -> 3600; ValueError naming the accepted shapes otherwise."""
    match = _WINDOW.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"window {text!r}: use a number and one of s, m, h, d, w "
                         "(`30m`, `1h`, `1d`)")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def to_units(value: Any) -> int:
    """A number as micro-units; BudgetError for a bool, a non-number or below 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise BudgetError(f"{value!r} is not a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise BudgetError(f"{value!r} is not a number") from None
    if not number.is_finite() or number < 0:
        raise BudgetError(f"{value!r} is not a number of 0 or more")
    if number > MAX_AMOUNT:  # beyond what the store's counts hold (and Decimal's exponents)
        raise BudgetError(f"{_shown(value)} is more than a budget counts (at most {MAX_AMOUNT})")
    return int((number * UNIT).to_integral_value(rounding="ROUND_CEILING"))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def show_units(units: int) -> str:
    """Micro-units as people read them: `100`, `2.5`."""
    text = f"{Decimal(units) / UNIT:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class BudgetSpec(BaseModel):
    """One named budget of the settings (docs/POLICY.md, "Budgets")."""

    model_config = ConfigDict(extra="forbid")

    limit: float = Field(gt=0, le=float(MAX_AMOUNT))
    #: `1h`, `1d` ...; None: one window for ever.
    window: str | None = None
    per: Literal["session", "project", "key"] = "session"
    #: The tools it counts (None: every tool).
    tools: list[str] | None = Field(default=None, min_length=1)
    #: `calls` (1 a call) or `input.<field>` (that top-level input field's number).
    counts: str = "calls"
    on_exceed: Literal["park", "deny"] = "park"

    @field_validator("window", mode="after")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        if value is not None:
            window_seconds(value)
        return value

    @field_validator("counts", mode="after")
    @classmethod
    def _counts(cls, value: str) -> str:
        if value != "calls" and not re.fullmatch(r"input\.[A-Za-z0-9_-]{1,200}", value):
            raise ValueError(f"counts {value!r}: `calls` or `input.<field>` (`input.cost`)")
        return value

    @property
    def limit_units(self) -> int:
        return to_units(self.limit)

    def applies_to(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def amount(self, tool_input: Mapping[str, Any]) -> int:
        """What one call costs: 1 a call, or its input field (absent: 0)."""
        if self.counts == "calls":
            return UNIT
        value = tool_input.get(self.counts.removeprefix("input."))
        return 0 if value is None else to_units(value)

    def window_start(self, now: datetime) -> datetime:
        """The start of the window `now` is in (windows are aligned on the epoch, UTC)."""
        if self.window is None:
            return EPOCH
        size = window_seconds(self.window)
        seconds = math.floor((now - EPOCH).total_seconds())
        return EPOCH + timedelta(seconds=seconds - seconds % size)

    def describe(self, scope: str) -> str:
        window = f"window {self.window}" if self.window else "no window"
        return f"per {self.per} {scope!r}, {window}"


def check_budgets(value: dict[str, BudgetSpec]) -> dict[str, BudgetSpec]:
    """The settings' budgets, names checked (they are Cedar attributes)."""
    for name in value:
        if not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(f"budgets: {name!r} is not a budget name (a letter, then "
                             "letters, digits, - or _; at most 64)")
    return value


@dataclass(frozen=True)
class Charge:
    """What one call would add to one budget's window."""

    budget: str
    scope: str
    window_start: datetime
    amount: int
    limit: int

    @property
    def key(self) -> tuple[str, str, datetime]:
        return (self.budget, self.scope, self.window_start)


@dataclass(frozen=True)
class BudgetState:
    """A budget's window as a call sees it (`context.budgets.NAME`)."""

    used: int
    limit: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def cedar(self) -> dict[str, int]:
        """Whole units for Cedar (its numbers are Long): used rounded up, the rest down."""
        return {"used": -(-self.used // UNIT), "limit": self.limit // UNIT,
                "remaining": self.remaining // UNIT}

    def text(self) -> str:
        return f"{show_units(self.used)} of {show_units(self.limit)} used"


@dataclass(frozen=True)
class Over:
    """A budget a call does not fit: its spec, its state before the call, its cost."""

    name: str
    spec: BudgetSpec
    scope: str
    state: BudgetState
    amount: int

    def reason(self) -> str:
        return (f"{RULE_PREFIX}{self.name} over its limit: {self.state.text()}, this call "
                f"needs {show_units(self.amount)} ({self.spec.describe(self.scope)})")

    def denial(self) -> str:
        return (f"Budget exceeded: budget '{self.name}' has {show_units(self.state.remaining)} "
                f"of {show_units(self.state.limit)} left ({self.spec.describe(self.scope)}); "
                f"this call needs {show_units(self.amount)}. It did not run.")


def scope_of(spec: BudgetSpec, session: str, project: str, key: str) -> str:
    return {"session": session, "project": project, "key": key}[spec.per]


def windows(budgets: Mapping[str, BudgetSpec], session: str, project: str, key: str,
            now: datetime) -> dict[str, tuple[str, str, datetime]]:
    """Each budget's window key for this caller (what `context.budgets` reads)."""
    return {name: (name, scope_of(spec, session, project, key), spec.window_start(now))
            for name, spec in budgets.items()}


def charges_for(budgets: Mapping[str, BudgetSpec], tool: str, tool_input: Mapping[str, Any],
                session: str, project: str, key: str, now: datetime) -> list[Charge]:
    """What a call adds to each budget that counts it (sorted: the store locks
    windows in this order). BudgetError when its input cannot be counted."""
    out: list[Charge] = []
    for name, spec in budgets.items():
        if not spec.applies_to(tool):
            continue
        try:
            amount = spec.amount(tool_input)
        except BudgetError as exc:
            raise BudgetError(f"budget '{name}' counts {spec.counts}: {exc}", name) from None
        if amount:
            out.append(Charge(name, scope_of(spec, session, project, key),
                              spec.window_start(now), amount, spec.limit_units))
    return sorted(out, key=lambda c: c.key)


def states(budgets: Mapping[str, BudgetSpec], used: Mapping[str, int]) -> dict[str, BudgetState]:
    """Every budget's state from its window's used units (absent: 0)."""
    return {name: BudgetState(used=used.get(name, 0), limit=spec.limit_units)
            for name, spec in budgets.items()}


def overs(budgets: Mapping[str, BudgetSpec], charges: Iterable[Charge],
          before: Mapping[str, BudgetState]) -> list[Over]:
    """The charges that do not fit, from the states before the call (policy test)."""
    found = []
    for charge in charges:
        state = before.get(charge.budget, BudgetState(0, charge.limit))
        if state.used + charge.amount > charge.limit:
            found.append(Over(charge.budget, budgets[charge.budget], charge.scope, state,
                              charge.amount))
    return found
