"""Budgets' charges on real SQLite and PostgreSQL: twenty calls racing for the last
units overspend by 0; a retried reservation charges once; a call's final row
keeps or releases its charges; windows roll over."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from parkgate.calls.records import CallStatus
from parkgate.models import utcnow
from parkgate.rules.budgets import UNIT, BudgetSpec, charges_for
from parkgate.store import Repository
from parkgate.store.budget_store import CHARGED, OVER, RELEASED, RESERVED
from tests.store.helpers import finished, uid

NOW = datetime(2026, 11, 28, 7, 30, tzinfo=UTC)


def _charges(spec: BudgetSpec, session: str, tool_input: dict | None = None,
             now: datetime = NOW) -> list:
    return charges_for({"b": spec}, "shell", tool_input or {}, session, "p", "k", now)


async def _race(repo: Repository, spec: BudgetSpec, calls: int, deny: bool) -> list[bool]:
    """`calls` agents, each its own session (no session lock between them), one
    project budget: only the window row's conditional UPDATE keeps them apart."""
    sessions = [uid("s") for _ in range(calls)]
    charges = _charges(spec, sessions[0])
    start = asyncio.Event()

    async def one(i: int) -> bool:
        await start.wait()
        answers, kept = await repo.reserve_budgets(
            sessions[i], "c", charges, frozenset({"b"}) if deny else frozenset())
        assert kept == answers[0].fits or not deny
        return answers[0].fits

    tasks = [asyncio.create_task(one(i)) for i in range(calls)]
    start.set()
    fits = await asyncio.gather(*tasks)
    usage = await repo.budget_usage([charges[0].key])
    assert usage[charges[0].key] == sum(fits) * UNIT  # overspent by 0
    return list(fits)


async def test_twenty_calls_race_for_the_last_five_park(repo: Repository) -> None:
    spec = BudgetSpec(limit=5, window="1d", per="project")
    fits = await _race(repo, spec, 20, deny=False)
    assert sum(fits) == 5 and fits.count(False) == 15


async def test_twenty_calls_race_deny_mode_writes_nothing_for_the_refused(
        repo: Repository) -> None:
    spec = BudgetSpec(limit=5, window="1d", per="project", on_exceed="deny")
    fits = await _race(repo, spec, 20, deny=True)
    assert sum(fits) == 5 and fits.count(False) == 15


async def test_costs_from_input_race_for_a_dollar_limit(repo: Repository) -> None:
    """Fractional costs: exact micro-units, 100.0 taken by 40 calls of 2.5 at most."""
    spec = BudgetSpec(limit=100, window="1d", counts="input.cost")
    session = uid("s")
    charges = _charges(spec, session, {"cost": 2.5})
    results = await asyncio.gather(*(repo.reserve_budgets(session, f"c{i}", charges)
                                     for i in range(45)))
    assert sum(answers[0].fits for answers, _ in results) == 40
    assert (await repo.budget_usage([charges[0].key]))[charges[0].key] == 100 * UNIT


async def test_a_retried_reservation_charges_once(repo: Repository) -> None:
    spec = BudgetSpec(limit=2)
    session = uid("s")
    charges = _charges(spec, session)
    first, _ = await repo.reserve_budgets(session, "c1", charges)
    again = await asyncio.gather(*(repo.reserve_budgets(session, "c1", charges)
                                   for _ in range(5)))
    assert all(a[0][0].fits == first[0].fits for a in again)
    assert (await repo.budget_usage([charges[0].key]))[charges[0].key] == UNIT
    (charge,) = await repo.call_charges(session, "c1")
    assert charge.state == RESERVED and charge.used_before == 0


async def test_final_row_keeps_a_run_call_and_releases_one_that_never_ran(
        repo: Repository) -> None:
    spec = BudgetSpec(limit=2)
    session = uid("s")
    charges = _charges(spec, session)
    for cid in ("ran", "denied", "parked"):
        await repo.reserve_budgets(session, cid, charges)
    # The limit is 2: the third waits `over` (parked at the cap, not counted).
    assert [c.state for c in await repo.call_charges(session, "parked")] == [OVER]
    await repo.apply([], finished(session, "ran", started_at=NOW))
    await repo.apply([], finished(session, "denied", status=CallStatus.DENIED))
    await repo.apply([], finished(session, "denied", status=CallStatus.DENIED))  # again
    assert [c.state for c in await repo.call_charges(session, "ran")] == [CHARGED]
    assert [c.state for c in await repo.call_charges(session, "denied")] == [RELEASED]
    assert (await repo.budget_usage([charges[0].key]))[charges[0].key] == UNIT
    # A person let the parked one pass the limit, and it ran: charged once.
    await repo.apply([], finished(session, "parked", started_at=NOW))
    await repo.apply([], finished(session, "parked", started_at=NOW))
    (charge,) = await repo.call_charges(session, "parked")
    assert charge.state == CHARGED and charge.used_now == 2 * UNIT
    assert (await repo.budget_usage([charges[0].key]))[charges[0].key] == 2 * UNIT


async def test_a_live_row_settles_nothing(repo: Repository) -> None:
    session = uid("s")
    charges = _charges(BudgetSpec(limit=2), session)
    await repo.reserve_budgets(session, "c", charges)
    await repo.apply([], finished(session, "c", status=CallStatus.PARKED))
    assert [c.state for c in await repo.call_charges(session, "c")] == [RESERVED]


async def test_windows_roll_over(repo: Repository) -> None:
    spec = BudgetSpec(limit=1, window="1h")
    session = uid("s")
    at_cap = _charges(spec, session, now=NOW)
    assert (await repo.reserve_budgets(session, "a", at_cap))[0][0].fits
    assert not (await repo.reserve_budgets(session, "b", at_cap))[0][0].fits
    later = _charges(spec, session, now=NOW + timedelta(hours=1))
    assert later[0].window_start == at_cap[0].window_start + timedelta(hours=1)
    answers, _ = await repo.reserve_budgets(session, "c", later)
    assert answers[0].fits and answers[0].used_before == 0


async def test_pruning_a_call_removes_its_charges_not_the_windows_count(
        repo: Repository) -> None:
    session = uid("s")
    charges = _charges(BudgetSpec(limit=2), session)
    await repo.reserve_budgets(session, "c", charges)
    await repo.apply([], finished(session, "c", started_at=NOW, finished_at=NOW))
    assert await repo.prune(timedelta(days=1), now=NOW + timedelta(days=2)) == 1
    assert await repo.call_charges(session, "c") == []
    assert (await repo.budget_usage([charges[0].key]))[charges[0].key] == UNIT


async def test_pruning_drops_ended_windows_nobody_names_and_keeps_the_rest(
        repo: Repository) -> None:
    """`parkgate audit prune`'s second half: a window that ended before the
    cutoff and holds no charge goes; the current window, a window a kept
    charge names, a budget's one window for ever and a recent window of a
    budget no longer configured stay."""
    hourly, forever = BudgetSpec(limit=5, window="1h"), BudgetSpec(limit=5)
    session = uid("s")
    old = _charges(hourly, session, now=NOW - timedelta(days=3))
    named = _charges(hourly, session, now=NOW - timedelta(days=2))
    current = _charges(hourly, session, now=NOW)
    ever = charges_for({"ever": forever}, "shell", {}, session, "p", "k", NOW - timedelta(days=3))
    gone = charges_for({"gone": hourly}, "shell", {}, session, "p", "k", NOW)
    for call, charges in (("old", old), ("named", named), ("now", current), ("ever", ever),
                          ("gone", gone)):
        await repo.reserve_budgets(session, call, charges)
    await repo.apply([], finished(session, "old", started_at=NOW, finished_at=NOW))
    assert await repo.prune(timedelta(days=1), now=NOW + timedelta(days=2)) == 1
    assert await repo.call_charges(session, "old") == []  # its window is named by none

    budgets = {"b": hourly, "ever": forever}
    assert await repo.prune_budget_windows(budgets, NOW - timedelta(days=1)) == 1
    keys = [c[0].key for c in (old, named, current, ever, gone)]
    usage = await repo.budget_usage(keys)
    assert old[0].key not in usage
    assert usage[named[0].key] == usage[current[0].key] == usage[ever[0].key] == UNIT
    assert usage[gone[0].key] == UNIT  # unconfigured, but touched after the cutoff
    # Once its call is pruned, the unconfigured budget's window goes too (it was
    # last touched before the cutoff); a second pass finds nothing.
    await repo.apply([], finished(session, "gone", started_at=NOW, finished_at=NOW))
    assert await repo.prune(timedelta(days=1), now=NOW + timedelta(days=2)) == 1
    later = utcnow() + timedelta(days=1)
    assert await repo.prune_budget_windows(budgets, later) == 1
    assert gone[0].key not in await repo.budget_usage(keys)
    assert await repo.prune_budget_windows(budgets, later) == 0


async def test_repricing_an_edit_moves_the_window_once_and_never_after_the_end(
        repo: Repository) -> None:
    spend = BudgetSpec(limit=10, counts="input.cost")
    session = uid("s")
    budgets = {"spend": spend, "calls": BudgetSpec(limit=1, counts="input.n")}
    before = charges_for(budgets, "shell", {"cost": 8}, session, "p", "k", NOW)
    await repo.reserve_budgets(session, "c", before)
    edited = charges_for(budgets, "shell", {"cost": 3, "n": 2}, session, "p", "k", NOW)
    changes = await repo.reprice_charges(session, "c", edited)
    assert sorted(changes) == [("calls", 0, 2 * UNIT), ("spend", 8 * UNIT, 3 * UNIT)]
    assert await repo.reprice_charges(session, "c", edited) == []  # a retry: nothing more
    usage = await repo.budget_usage([c.key for c in edited])
    assert usage[edited[1].key] == 3 * UNIT  # spend: reserved 8, now 3
    assert usage[edited[0].key] == 0  # calls: 2 over a limit of 1, kept `over`
    states = {c.budget: c.state for c in await repo.call_charges(session, "c")}
    assert states == {"spend": RESERVED, "calls": OVER}
    # Edited to cost nothing: the reservation goes back; once settled, nothing moves.
    free = charges_for(budgets, "shell", {}, session, "p", "k", NOW)
    assert await repo.reprice_charges(session, "c", free) == [("calls", 2 * UNIT, 0),
                                                              ("spend", 3 * UNIT, 0)]
    await repo.apply([], finished(session, "c", started_at=NOW, finished_at=NOW))
    assert await repo.reprice_charges(session, "c", edited) == []
