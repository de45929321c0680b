"""A parked call's budgets as the approval page and the inbox show them."""

from __future__ import annotations

from parkgate.rules.budgets import show_units
from parkgate.store.budget_store import CHARGED, OVER, RELEASED, RESERVED, ChargeRecord
from parkgate.store.repository import Repository

_STATE = {RESERVED: "reserved", OVER: "over the limit: approving lets it pass",
          CHARGED: "charged", RELEASED: "released"}


def budget_line(charge: ChargeRecord) -> str:
    """`cloud-spend: 98 of 100 used now (2 left); this call 5, over the limit ...`."""
    left = max(0, charge.cap - charge.used_now)
    return (f"{charge.budget} ({charge.scope}): {show_units(charge.used_now)} of "
            f"{show_units(charge.cap)} used now ({show_units(left)} left); this call "
            f"{show_units(charge.amount)}, {_STATE.get(charge.state, charge.state)}")


async def budget_lines(repo: Repository, session_id: str, tool_use_id: str) -> list[str]:
    """One line per budget the call is charged to (none without budgets)."""
    return [budget_line(c) for c in await repo.call_charges(session_id, tool_use_id)]
