"""`parkgate approve|deny|cancel`: decide or stop parked and running calls from a terminal.

Decisions go through the same Temporal update as the approval page and the
HTTP API (first write wins; the loser learns who won), recorded with via=cli.
A call is named by its approval request id or by `SESSION TOOL_USE_ID`. The
terminal needs no API key: whoever can read the data directory (the database
and Temporal) decides, as `cli:<OS user>`.
"""

from __future__ import annotations

import getpass
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import typer

from parkgate.cli.common import (
    EXIT_USAGE,
    CliError,
    console,
    load_settings,
    open_repository,
    plural,
    run,
)

if TYPE_CHECKING:
    from parkgate.calls.records import ApprovalRecord
    from parkgate.durable.dispatcher import DurableDispatcher
    from parkgate.settings import Settings
    from parkgate.store import Repository

#: How long a CLI command waits for Temporal before giving up with one line.
CONNECT_TIMEOUT = 5.0


def register(app: typer.Typer) -> None:
    app.command("approve")(approve)
    app.command("deny")(deny)
    app.command("cancel")(cancel)


#: The call, as the user names it: a request id, or (session id, tool_use id).
CallRef = tuple[str, str | None]

_CALL_HELP = "The approval request id, or SESSION (then TOOL_USE_ID)."
_TOOL_USE_HELP = "With SESSION as the first argument: the call's tool_use id."


async def _find_request(repo: Repository, ref: CallRef) -> ApprovalRecord:
    """The approval request a CLI argument names; one line when there is none."""
    first, tool_use_id = ref
    if tool_use_id is None:
        approval = await repo.get_approval(first)
        if approval is None:
            # A listing's shortened request id: a unique prefix names the request.
            found = await repo.request_ids_by_prefix(first) if first else []
            if len(found) > 1:
                raise CliError(f"request id {first!r} is ambiguous: give more of it "
                               "(`parkgate calls list --wide` shows ids whole)")
            approval = await repo.get_approval(found[0]) if found else None
        if approval is None:
            raise CliError(f"no approval request {first!r} (to name a call, give "
                           "SESSION TOOL_USE_ID; `parkgate calls list --status parked` "
                           "lists both)")
        return approval
    from parkgate.cli.calls import find_call

    first, tool_use_id = await find_call(repo, first, tool_use_id)
    call = await repo.get_call(first, tool_use_id)
    if call is None:
        raise CliError(f"no call {tool_use_id!r} in session {first!r}")
    status = str(getattr(call.status, "value", call.status))
    approval = await repo.get_approval(call.request_id) if call.request_id else None
    if approval is None or status != "parked":
        raise CliError(f"call {first}/{tool_use_id} is not waiting for a decision "
                       f"(status {status})")
    return approval


@asynccontextmanager
async def durable(
    settings: Settings, ref: CallRef | None = None
) -> AsyncIterator[tuple[DurableDispatcher, ApprovalRecord | None]]:
    """A DurableDispatcher that can locate approval requests in the store; with
    `ref`, the request is looked up first so an unknown id fails fast."""
    from parkgate.durable.dispatcher import DurableDispatcher
    from parkgate.runtime.embedded import StartupError, connect_temporal, temporal_address_for

    async with open_repository(settings) as repo:
        approval = None if ref is None else await _find_request(repo, ref)
        try:
            client = await connect_temporal(
                settings, address=temporal_address_for(settings), timeout=CONNECT_TIMEOUT
            )
        except StartupError as exc:
            raise CliError(str(exc)) from exc
        yield DurableDispatcher(client, settings, approvals=repo), approval


def _default_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


async def _decide(ref: CallRef, decision: str, reason: str | None, decided_by: str) -> str:
    """Decide the call; returns what happened, in words."""
    from parkgate.durable.call_errors import UnknownCallError

    settings = load_settings()
    async with durable(settings, ref) as (dispatcher, approval):
        assert approval is not None
        request_id = approval.request_id
        session_id, tool_use_id = approval.session_id, approval.tool_use_id
        # The operator at the terminal (who can reach the database and Temporal)
        # is the principal; on a request with named approvers, --as names the
        # approver the vote counts for.
        named = (approval.info or {}).get("approvers") or []
        try:
            result = await dispatcher.decide(
                request_id,
                decision,
                reason=reason,
                decided_by=decided_by,
                via="cli",
                session_id=session_id,
                tool_use_id=tool_use_id,
                principal_id=f"cli:{_default_name()}",
                approver=decided_by if decided_by in named else None,
            )
        except UnknownCallError as exc:
            raise CliError(str(exc).strip("'\"")) from exc
        if not result.accepted:
            winner = result.winner
            if winner is not None:
                # The authenticated decider, else the name typed on a generic link
                # (a claim): a loser is always told who won when anyone is known.
                if winner.decided_by:
                    who = f" by {winner.decided_by}"
                elif winner.claimed_name:
                    who = f" by {winner.claimed_name} (name given on the link, not verified)"
                else:
                    who = ""
                when = winner.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC")
                raise CliError(
                    f"request {request_id} was already decided: {winner.decision}{who} at {when}"
                )
            raise CliError(f"request {request_id}: {result.message or 'decision rejected'}")
        call = f"{session_id}/{tool_use_id} (request {request_id})"
        if result.winner is None:  # one approval of a quorum: counted, still parked
            return f"{call}; {result.message}"
        return call


def _ref(first: str, tool_use_id: str | None) -> CallRef:
    if not first.strip() or (tool_use_id is not None and not tool_use_id.strip()):
        raise typer.BadParameter("give a request id, or SESSION TOOL_USE_ID")
    return first, tool_use_id


def approve(
    call: str = typer.Argument(..., metavar="REQUEST_ID|SESSION", help=_CALL_HELP),
    tool_use_id: str | None = typer.Argument(None, metavar="[TOOL_USE_ID]",
                                             help=_TOOL_USE_HELP, show_default=False),
    reason: str | None = typer.Option(None, "--reason", "-r", help="Why (kept in the audit)."),
    decided_by: str | None = typer.Option(
        None, "--as",
        help="Approver name recorded in the audit (default: your user name); on a request with "
        "named approvers, the approver this vote counts for.",
    ),
) -> None:
    """Approve a parked call; it runs at once (or once its quorum is met)."""
    done = run(_decide(_ref(call, tool_use_id), "allow", reason, decided_by or _default_name()))
    console.print(f"approved {done}", soft_wrap=True)


def deny(
    call: str = typer.Argument(..., metavar="REQUEST_ID|SESSION", help=_CALL_HELP),
    tool_use_id: str | None = typer.Argument(None, metavar="[TOOL_USE_ID]",
                                             help=_TOOL_USE_HELP, show_default=False),
    reason: str = typer.Option(..., "--reason", "-r", help="Why; the model sees this text."),
    decided_by: str | None = typer.Option(
        None, "--as", help="Approver name recorded in the audit (default: your user name)."
    ),
) -> None:
    """Deny a parked call; the reason reaches the model in the tool result."""
    if not reason.strip():
        raise typer.BadParameter("a reason is required when denying", param_hint="--reason")
    done = run(_decide(_ref(call, tool_use_id), "deny", reason, decided_by or _default_name()))
    console.print(f"denied {done}", soft_wrap=True)


def cancel(
    session_id: str = typer.Argument(..., help="Session id."),
    tool_use_id: str | None = typer.Argument(
        None, help="One call to cancel; omit to cancel every unfinished call of the session."
    ),
    reason: str | None = typer.Option(
        None, "--reason", "-r",
        help="Why: recorded with the call's end, beside cli:<your user name>.",
    ),
) -> None:
    """Cancel one call, or every parked or running call of a session."""
    from parkgate.calls.cancellation import VIA_CLI, Cancellation, check_reason
    from parkgate.durable.call_errors import UnknownCallError

    try:
        why = Cancellation(by=f"cli:{_default_name()}", via=VIA_CLI, reason=check_reason(reason))
    except ValueError as exc:
        raise CliError(f"--reason refused: {exc}", EXIT_USAGE) from exc
    settings = load_settings()

    async def go() -> str:
        async with durable(settings) as (dispatcher, _):
            if tool_use_id is None:
                before = await _unfinished(settings, session_id)
                count = await dispatcher.cancel_session_tools(session_id, why)
                return _cancelled_words(count, before, session_id)
            try:
                ended = await dispatcher.cancel(session_id, tool_use_id, why)
            except UnknownCallError as exc:
                raise CliError(str(exc).strip("'\"")) from exc
            if ended:
                return (f"cancelled {session_id}/{tool_use_id} (its workflow could not "
                        "proceed; see `parkgate calls show`)")
            return (f"cancelling {session_id}/{tool_use_id}: a parked call ends now, a "
                    f"running tool is stopped (`parkgate calls show {session_id} "
                    f"{tool_use_id}` shows when)")

    console.print(run(go()), soft_wrap=True)


#: The statuses `cancel` ends, in the order a message names them.
_UNFINISHED = ("parked", "queued", "running")


async def _unfinished(settings: Settings, session_id: str) -> dict[str, int]:
    """How many of the session's calls are in each unfinished status (for the message)."""
    from parkgate.calls.records import CallStatus
    from parkgate.store.results import CallFilters

    counts = dict.fromkeys(_UNFINISHED, 0)
    async with open_repository(settings) as repo:
        filters = CallFilters(session_id=session_id,
                              status=[CallStatus(s) for s in _UNFINISHED])
        page = await repo.list_calls(filters, limit=1000)
        for call in page.items:
            counts[str(getattr(call.status, "value", call.status))] += 1
    return counts


def _cancelled_words(count: int, before: dict[str, int], session_id: str) -> str:
    """'cancelled 2 parked calls of session s1', or '... 1 parked and 1 running call ...'."""
    if count == 0:
        return f"nothing to cancel: session {session_id} has no parked or running calls"
    parts = [f"{n} {status}" for status in _UNFINISHED if (n := before.get(status, 0))]
    if sum(before.values()) != count or not parts:
        return f"cancelled {plural(count, 'call')} of session {session_id}"
    noun = "call" if count == 1 else "calls"
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"cancelled {listed} {noun} of session {session_id}"
