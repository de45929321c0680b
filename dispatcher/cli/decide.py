"""`parkgate approve|deny|cancel`: decide or stop parked and running calls from a terminal.

Decisions go through the same Temporal update as the approval page and the
HTTP API (first write wins; the loser learns who won), recorded with via=cli.
"""

from __future__ import annotations

import getpass
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import typer

from parkgate.cli.common import CliError, console, load_settings, open_repository, run

if TYPE_CHECKING:
    from parkgate.durable.client import DurableDispatcher
    from parkgate.records import ApprovalRecord
    from parkgate.settings import Settings

#: How long a CLI command waits for Temporal before giving up with one line.
CONNECT_TIMEOUT = 5.0


def register(app: typer.Typer) -> None:
    app.command("approve")(approve)
    app.command("deny")(deny)
    app.command("cancel")(cancel)


@asynccontextmanager
async def durable(
    settings: Settings, request_id: str | None = None
) -> AsyncIterator[tuple[DurableDispatcher, ApprovalRecord | None]]:
    """A DurableDispatcher that can locate approval requests in the store; with
    `request_id`, the request is looked up first so an unknown id fails fast."""
    from parkgate.durable.client import DurableDispatcher
    from parkgate.runtime.embedded import StartupError, connect_temporal, temporal_address_for

    async with open_repository(settings) as repo:
        approval = None
        if request_id is not None:
            approval = await repo.get_approval(request_id)
            if approval is None:
                raise CliError(f"no approval request {request_id!r}")
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


async def _decide(request_id: str, decision: str, reason: str | None, decided_by: str) -> str:
    from parkgate.durable.client import UnknownCallError

    settings = load_settings()
    async with durable(settings, request_id) as (dispatcher, approval):
        assert approval is not None
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
        if result.winner is None:  # one approval of a quorum: counted, still parked
            return f"{session_id}/{tool_use_id}; {result.message}"
        return f"{session_id}/{tool_use_id}"


def approve(
    request_id: str = typer.Argument(..., help="The approval request id (from the call)."),
    reason: str | None = typer.Option(None, "--reason", "-r", help="Why (kept in the audit)."),
    decided_by: str | None = typer.Option(
        None, "--as",
        help="Approver name recorded in the audit (default: your user name); on a request with "
        "named approvers, the approver this vote counts for.",
    ),
) -> None:
    """Approve a parked call; it runs at once (or once its quorum is met)."""
    call = run(_decide(request_id, "allow", reason, decided_by or _default_name()))
    console.print(f"approved {request_id} ({call})")


def deny(
    request_id: str = typer.Argument(..., help="The approval request id (from the call)."),
    reason: str = typer.Option(..., "--reason", "-r", help="Why; the model sees this text."),
    decided_by: str | None = typer.Option(
        None, "--as", help="Approver name recorded in the audit (default: your user name)."
    ),
) -> None:
    """Deny a parked call; the reason reaches the model in the tool result."""
    if not reason.strip():
        raise typer.BadParameter("a reason is required when denying", param_hint="--reason")
    call = run(_decide(request_id, "deny", reason, decided_by or _default_name()))
    console.print(f"denied {request_id} ({call})")


def cancel(
    session_id: str = typer.Argument(..., help="Session id."),
    tool_use_id: str | None = typer.Argument(
        None, help="One call to cancel; omit to cancel every running call of the session."
    ),
) -> None:
    """Cancel one call, or every running call of a session."""
    from parkgate.durable.client import UnknownCallError

    settings = load_settings()

    async def go() -> str:
        async with durable(settings) as (dispatcher, _):
            if tool_use_id is None:
                count = await dispatcher.cancel_session_tools(session_id)
                return f"cancelled {count} running call(s) of session {session_id}"
            try:
                ended = await dispatcher.cancel(session_id, tool_use_id)
            except UnknownCallError as exc:
                raise CliError(str(exc).strip("'\"")) from exc
            if ended:
                return (f"cancelled {session_id}/{tool_use_id} (its workflow could not "
                        "proceed; see `parkgate calls show`)")
            return f"cancellation requested for {session_id}/{tool_use_id}"

    console.print(run(go()))
