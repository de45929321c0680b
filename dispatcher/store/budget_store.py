"""Budgets' counts (budget_windows) and each call's charges (budget_charges).

A call's charges are reserved in ONE transaction when it is classified: each
budget's window row is raised by a conditional UPDATE (`used + amount <=
limit`), which PostgreSQL runs under the row's lock and SQLite under its one
writer, so concurrent calls never pass a limit. A charge that does not fit is
kept as `over` (not counted) while its call waits parked; a budget that
denies instead rolls the whole reservation back. Charges are keyed by the
call, so a retried classification finds them and reserves nothing twice.

A call's final row settles them in the same transaction (`settle_charges`,
from store/call_store.py): a call that ran keeps its reservation and is
charged its `over` ones (a person let it pass the limit); one that never ran
(denied, expired, cancelled before it started, unclaimed) releases them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Table, and_, delete, exists, or_, select, tuple_, update
from sqlalchemy.engine import Connection

from parkgate.calls.records import CallStatus
from parkgate.models import utcnow
from parkgate.rules.budgets import BudgetSpec, Charge, window_seconds
from parkgate.store import statements
from parkgate.store.base import StoreBase
from parkgate.store.models import Base
from parkgate.store.statements import CALLS, TERMINAL

WINDOWS: Table = Base.metadata.tables["budget_windows"]
CHARGES: Table = Base.metadata.tables["budget_charges"]

RESERVED, OVER, CHARGED, RELEASED = "reserved", "over", "charged", "released"
#: A call that ended with one of these ran (or may have) without a start time.
_RAN = (CallStatus.SUCCEEDED.value, CallStatus.OUTCOME_UNKNOWN.value)


class ChargeRecord(BaseModel):
    """One stored charge of a call (the approval page, the inbox, the audit)."""

    session_id: str
    tool_use_id: str
    budget: str
    scope: str
    window_start: datetime
    amount: int
    cap: int
    used_before: int
    state: str
    created_at: datetime
    settled_at: datetime | None = None
    #: The window's units now (read with it).
    used_now: int = 0


@dataclass(frozen=True)
class Reserved:
    """One budget's answer to a reservation: the units before the call, and
    whether it fit (else the charge waits as `over`)."""

    charge: Charge
    used_before: int
    fits: bool


class _Refused(Exception):
    """Rolls a reservation back: a budget that denies does not fit."""

    def __init__(self, answers: list[Reserved]) -> None:
        self.answers = answers


def _window_key(charge: Charge) -> dict[str, object]:
    return {"budget": charge.budget, "scope": charge.scope, "window_start": charge.window_start}


def _window_where(budget: str, scope: str, start: datetime) -> ColumnElement[bool]:
    return and_(WINDOWS.c.budget == budget, WINDOWS.c.scope == scope,
                WINDOWS.c.window_start == start)


def _insert_charges(conn: Connection, session_id: str, tool_use_id: str,
                    answers: Sequence[Reserved], now: datetime) -> None:
    """A call's charge rows: `reserved` where the window took it, else `over`."""
    if answers:
        conn.execute(CHARGES.insert(), [
            {"session_id": session_id, "tool_use_id": tool_use_id, **_window_key(a.charge),
             "amount": a.charge.amount, "cap": a.charge.limit, "used_before": a.used_before,
             "state": RESERVED if a.fits else OVER, "created_at": now, "settled_at": None}
            for a in answers])


def settle_charges(conn: Connection, session_id: str, tool_use_id: str) -> None:
    """Settle a finished call's open charges (see the module's docstring).

    Conditional on each charge's state, so a repeated final write changes
    nothing; a call whose stored row is not final is left alone.
    """
    open_rows = conn.execute(
        select(CHARGES.c.budget, CHARGES.c.scope, CHARGES.c.window_start, CHARGES.c.amount,
               CHARGES.c.state)
        .where(CHARGES.c.session_id == session_id, CHARGES.c.tool_use_id == tool_use_id,
               CHARGES.c.state.in_((RESERVED, OVER)))
        .order_by(CHARGES.c.budget, CHARGES.c.scope, CHARGES.c.window_start)  # lock order
    ).mappings().all()
    if not open_rows:
        return
    call = conn.execute(
        select(CALLS.c.status, CALLS.c.started_at)
        .where(CALLS.c.session_id == session_id, CALLS.c.tool_use_id == tool_use_id)
    ).mappings().first()
    if call is None or call["status"] not in TERMINAL:
        return
    ran = call["started_at"] is not None or call["status"] in _RAN
    now = utcnow()
    for row in open_rows:
        moved = conn.execute(
            update(CHARGES)
            .where(CHARGES.c.session_id == session_id, CHARGES.c.tool_use_id == tool_use_id,
                   CHARGES.c.budget == row["budget"], CHARGES.c.state == row["state"])
            .values(state=CHARGED if ran else RELEASED, settled_at=now))
        if moved.rowcount != 1:
            continue
        delta = row["amount"] if ran and row["state"] == OVER else \
            -row["amount"] if not ran and row["state"] == RESERVED else 0
        if delta:
            conn.execute(update(WINDOWS)
                         .where(_window_where(row["budget"], row["scope"], row["window_start"]))
                         .values(used=WINDOWS.c.used + delta, updated_at=now))


class BudgetStore(StoreBase):
    """Budgets' windows and calls' charges."""

    async def reserve_budgets(self, session_id: str, tool_use_id: str,
                              charges: Sequence[Charge], deny: frozenset[str] = frozenset(),
                              ) -> tuple[list[Reserved], bool]:
        """Reserve a call's charges at once; (answers, kept). kept is False when a
        budget in `deny` did not fit: then nothing was written. A call that has
        charges already gets their answers back (a retried classification)."""
        if not charges:
            return [], True
        try:
            answers = await self._in_write(self._reserve_in, session_id, tool_use_id,
                                           list(charges), deny)
        except _Refused as refused:
            return refused.answers, False
        return answers, True

    def _reserve_in(self, conn: Connection, session_id: str, tool_use_id: str,
                    charges: list[Charge], deny: frozenset[str]) -> list[Reserved]:
        self._lock_sessions(conn, {session_id})  # a call's retries queue here
        stored = conn.execute(
            select(CHARGES).where(CHARGES.c.session_id == session_id,
                                  CHARGES.c.tool_use_id == tool_use_id)
        ).mappings().all()
        if stored:
            return [Reserved(Charge(r["budget"], r["scope"], r["window_start"], r["amount"],
                                    r["cap"]), r["used_before"], r["state"] != OVER)
                    for r in stored]
        now = utcnow()
        answers = [self._raise(conn, charge, now)
                   for charge in sorted(charges, key=lambda c: c.key)]  # one lock order
        if any(not a.fits and a.charge.budget in deny for a in answers):
            raise _Refused(answers)
        _insert_charges(conn, session_id, tool_use_id, answers, now)
        return answers

    def _raise(self, conn: Connection, charge: Charge, now: datetime) -> Reserved:
        """Raise the charge's window by its amount if it fits (the window's row is
        made first when missing); the window's units before, and whether it fit."""
        conn.execute(statements.insert(self.dialect, WINDOWS)
                     .values(**_window_key(charge), used=0, updated_at=now)
                     .on_conflict_do_nothing())
        where = _window_where(charge.budget, charge.scope, charge.window_start)
        raised = conn.execute(
            update(WINDOWS).where(where, WINDOWS.c.used + charge.amount <= charge.limit)
            .values(used=WINDOWS.c.used + charge.amount, updated_at=now))
        used = conn.execute(select(WINDOWS.c.used).where(where)).scalar_one()
        fits = raised.rowcount == 1
        return Reserved(charge, used - charge.amount if fits else used, fits)

    async def reprice_charges(self, session_id: str, tool_use_id: str,
                              charges: Sequence[Charge]) -> list[tuple[str, int, int]]:
        """Charge an approver's edited input instead of the one the call was
        classified with: `charges` is what the edited input costs, in the
        classification's windows. A reserved charge's window moves by the
        difference (past the limit if need be: a person approved it); an `over`
        charge only changes amount (settled as before); a budget the edit
        makes count the call is reserved like a classification's. Nothing
        changes for a call whose charges have settled, and a repeat changes
        nothing. Returns (budget, amount before, amount now) of each change."""
        return await self._in_write(self._reprice_in, session_id, tool_use_id, list(charges))

    def _reprice_in(self, conn: Connection, session_id: str, tool_use_id: str,
                    charges: list[Charge]) -> list[tuple[str, int, int]]:
        self._lock_sessions(conn, {session_id})
        stored = {r["budget"]: r for r in conn.execute(
            select(CHARGES).where(CHARGES.c.session_id == session_id,
                                  CHARGES.c.tool_use_id == tool_use_id)
            .order_by(CHARGES.c.budget)).mappings()}
        if any(r["state"] not in (RESERVED, OVER) for r in stored.values()):
            return []
        wanted = {c.budget: c for c in charges}
        now, changes = utcnow(), []
        for budget, row in stored.items():
            amount = wanted[budget].amount if budget in wanted else 0
            if amount == row["amount"]:
                continue
            conn.execute(update(CHARGES).where(
                CHARGES.c.session_id == session_id, CHARGES.c.tool_use_id == tool_use_id,
                CHARGES.c.budget == budget).values(amount=amount))
            if row["state"] == RESERVED:
                conn.execute(update(WINDOWS)
                             .where(_window_where(budget, row["scope"], row["window_start"]))
                             .values(used=WINDOWS.c.used + amount - row["amount"],
                                     updated_at=now))
            changes.append((budget, int(row["amount"]), amount))
        added = [self._raise(conn, c, now) for c in charges if c.budget not in stored]
        _insert_charges(conn, session_id, tool_use_id, added, now)
        return changes + [(a.charge.budget, 0, a.charge.amount) for a in added]

    async def prune_budget_windows(self, budgets: Mapping[str, BudgetSpec],
                                   cutoff: datetime) -> int:
        """Delete the windows that ended before `cutoff` and that no stored charge
        names (`parkgate audit prune` removes the charges of the calls it prunes
        first); returns how many. A window of a configured budget ended when
        its length has passed since its start; a budget's one window for ever
        (no `window`) never ends. A budget no longer configured counts nothing
        more: its windows go once untouched since `cutoff`."""
        unreferenced = ~exists().where(CHARGES.c.budget == WINDOWS.c.budget,
                                       CHARGES.c.scope == WINDOWS.c.scope,
                                       CHARGES.c.window_start == WINDOWS.c.window_start)
        ended = [and_(WINDOWS.c.budget == name, WINDOWS.c.window_start
                      < cutoff - timedelta(seconds=window_seconds(spec.window)))
                 for name, spec in sorted(budgets.items()) if spec.window is not None]
        ended.append(and_(WINDOWS.c.budget.not_in(sorted(budgets)), WINDOWS.c.updated_at < cutoff))
        async with self._write() as conn:
            result = await conn.execute(delete(WINDOWS).where(or_(*ended), unreferenced))
        return int(result.rowcount or 0)

    async def budget_usage(self, keys: Sequence[tuple[str, str, datetime]],
                           ) -> dict[tuple[str, str, datetime], int]:
        """The units each window holds (absent windows are left out)."""
        if not keys:
            return {}
        async with self._read() as conn:
            rows = (await conn.execute(
                select(WINDOWS.c.budget, WINDOWS.c.scope, WINDOWS.c.window_start,
                       WINDOWS.c.used)
                .where(tuple_(WINDOWS.c.budget, WINDOWS.c.scope).in_(
                    sorted({(b, s) for b, s, _ in keys}))))).all()
        wanted = set(keys)
        return {(b, s, w): used for b, s, w, used in rows if (b, s, w) in wanted}

    async def call_charges(self, session_id: str, tool_use_id: str) -> list[ChargeRecord]:
        """A call's charges, each with its window's units now."""
        query = (
            select(CHARGES, WINDOWS.c.used.label("used_now"))
            .join(WINDOWS, and_(WINDOWS.c.budget == CHARGES.c.budget,
                                WINDOWS.c.scope == CHARGES.c.scope,
                                WINDOWS.c.window_start == CHARGES.c.window_start))
            .where(CHARGES.c.session_id == session_id, CHARGES.c.tool_use_id == tool_use_id)
            .order_by(CHARGES.c.budget))
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ChargeRecord.model_validate(dict(r)) for r in rows]
