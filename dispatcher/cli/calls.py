"""`parkgate calls list|show`: the audit history as terminal tables.

Reads go through the same Repository API the HTTP audit pages use.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from parkgate.approvals.decisions import decider_label
from parkgate.cli.common import (
    CliError,
    call_statuses,
    console,
    in_repository,
)
from parkgate.cli.output import (
    Cell,
    Output,
    output_option,
    print_json,
    print_rows,
    shortened,
    wide_option,
)

if TYPE_CHECKING:
    from parkgate.store import Repository

app = typer.Typer(help="Browse recorded tool calls.", no_args_is_help=True)

_STATUS_STYLE = {
    "succeeded": "green",
    "parked": "yellow",
    "running": "cyan",
    "queued": "cyan",
    "failed": "red",
    "denied": "red",
    "expired": "magenta",
    "cancelled": "magenta",
    "outcome_unknown": "magenta",
    "unclaimed": "magenta",
}


def _when(value: datetime | None, *, short: bool = False) -> str:
    if value is None:
        return "-"
    return value.strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def _status(value: Any) -> str:
    text = str(getattr(value, "value", value))
    style = _STATUS_STYLE.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def _duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.2f}s" if ms >= 1000 else f"{ms:.0f}ms"


def _parse_statuses(values: list[str] | None) -> Any:
    """None, one status, or several (the store's filter takes each)."""
    statuses = call_statuses(values)
    if not statuses:
        return None
    return statuses[0] if len(statuses) == 1 else statuses


@app.command("list")
def list_calls(
    session: str | None = typer.Option(None, "--session", "-s", help="Only this session."),
    turn: str | None = typer.Option(None, "--turn", help="Only this turn."),
    tool: str | None = typer.Option(None, "--tool", "-t", help="Only this tool."),
    status: list[str] | None = typer.Option(
        None, "--status", help="Only this status (repeatable): parked, succeeded, denied..."
    ),
    decided_by: str | None = typer.Option(
        None, "--decided-by", help="Only calls this person decided: NAME (verified or typed "
        "on a link), 'NAME (verified)' or 'NAME (unverified)'."
    ),
    since: datetime | None = typer.Option(None, "--since", help="Created at or after (UTC)."),
    until: datetime | None = typer.Option(None, "--until", help="Created before (UTC)."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=1000, help="Rows per page."),
    after: str | None = typer.Option(None, "--after", help="Cursor printed by a previous page."),
    open_longer_than: float | None = typer.Option(
        None, "--open-longer-than", min=0, metavar="SECONDS",
        help="Only calls not ended (queued, parked, running, released, claimed) created "
             "more than SECONDS ago: waits that may have no end (the "
             "parkgate_calls_open_too_long metric counts them past "
             "open_call_report_seconds)."),
    output: Output = output_option(),
    wide: bool = wide_option(),
) -> None:
    """Recent calls, newest first, with the filters of the audit API.

    A parked call shows its approval request id: `parkgate approve REQUEST_ID`
    (or `parkgate approve SESSION TOOL_USE_ID`) decides it."""
    from parkgate.store.results import CallFilters

    statuses = _parse_statuses(status)
    if open_longer_than is not None:
        statuses, until = _open_longer_than(open_longer_than, statuses, until)
    filters = CallFilters(
        session_id=session,
        turn_id=turn,
        tool_name=tool,
        status=statuses,
        decided_by=decided_by,
        since=since,
        until=until,
    )
    async def fetch(repo: Repository) -> Any:
        from parkgate.store.errors import InvalidCursorError

        try:
            return await repo.list_calls(filters, limit=limit, after=after)
        except InvalidCursorError as exc:
            raise CliError(f"--after: {exc}", 2) from exc

    page = in_repository(fetch)
    if output is Output.json:
        print_json({"calls": [_call_json(call) for call in page.items],
                    "next_cursor": page.next_cursor})
        return
    print_call_rows(page.items, wide=wide)
    if page.next_cursor:
        hint = _next_page_command(
            [
                ("--session", session),
                ("--turn", turn),
                ("--tool", tool),
                *(("--status", value) for value in status or ()),
                ("--decided-by", decided_by),
                ("--since", since.isoformat() if since else None),
                ("--until", until.isoformat() if until else None),
                ("--limit", str(limit) if limit != 50 else None),
                ("--open-longer-than", str(open_longer_than)
                 if open_longer_than is not None else None),
            ],
            page.next_cursor,
        )
        console.print(f"more: {hint}", soft_wrap=True, markup=False, highlight=False)


def print_call_rows(calls: list[Any], *, wide: bool = False) -> None:
    """The calls as a table: at 80 columns ids are shortened (unique prefixes,
    which `calls show` and `approve` accept), times lose their date when every
    call is from today, and the session column goes before the table does."""
    from parkgate.models import utcnow

    today = utcnow().date()
    same_day = all(c.created_at is not None and c.created_at.date() == today for c in calls)
    clock = "%H:%M:%S" if same_day else "%m-%d %H:%M"
    sessions = shortened([c.session_id for c in calls])
    tool_uses = shortened([c.tool_use_id for c in calls])
    requests = shortened([c.request_id for c in calls])
    rows: list[list[Cell]] = [
        [(_when(call.created_at, short=True),
          call.created_at.strftime(clock) if call.created_at else "-"),
         sessions[i], tool_uses[i], escape(call.tool_name or "-"), _status(call.status),
         requests[i], _decider_cell(call), _duration(call.duration_ms)]
        for i, call in enumerate(calls)
    ]
    print_rows(f"Tool calls ({len(calls)}), times in UTC",
               ["created", "session", "tool_use_id", "tool", "status", "request",
                "decided by", "time"],
               rows, right=["time"], drop=["session"], wide=wide)


def _decider_cell(call: Any) -> Cell:
    """Who decided; a narrow table puts the `(unverified)` mark on a line of its own."""
    who = escape(call.decider() or "-")
    if call.decided_by or not call.claimed_name:
        return who
    return who, who.replace(" (", "\n(", 1)


def _open_longer_than(seconds: float, statuses: Any,
                      until: datetime | None) -> tuple[Any, datetime]:
    """The filters of --open-longer-than: the live statuses (those of --status
    among them) and a creation before now minus `seconds` (or --until)."""
    from datetime import UTC, timedelta

    from parkgate.calls.records import LIVE_STATUSES

    asked = [statuses] if statuses is not None and not isinstance(statuses, list) \
        else statuses
    live = [s for s in LIVE_STATUSES if asked is None or s in asked]
    if not live:
        raise CliError("--open-longer-than lists calls that have not ended: "
                       "--status names only ended ones", 2)
    cutoff = datetime.now(UTC) - timedelta(seconds=seconds)
    if until is not None:
        cutoff = min(cutoff, until if until.tzinfo else until.replace(tzinfo=UTC))
    return live if len(live) > 1 else live[0], cutoff


def _call_json(call: Any) -> dict[str, Any]:
    """One listed call for `--output json` (what the table shows, unabridged).
    `decided_by` is the authenticated decider only; `decider` is who the
    listing shows (the name typed on a generic link, marked unverified)."""
    return {
        "session_id": call.session_id, "tool_use_id": call.tool_use_id,
        "turn_id": call.turn_id, "tool_name": call.tool_name,
        "status": str(getattr(call.status, "value", call.status)),
        "request_id": call.request_id, "decided_by": call.decided_by,
        "claimed_name": call.claimed_name, "decider": call.decider(),
        "created_at": call.created_at, "finished_at": call.finished_at,
        "duration_ms": call.duration_ms,
    }


def _next_page_command(options: list[tuple[str, str | None]], cursor: str) -> str:
    """The command that prints the next page: the same filters, plus `--after`."""
    words = ["parkgate", "calls", "list"]
    for name, value in options:
        if value is not None:
            words += [name, value]
    return shlex.join([*words, "--after", cursor])


async def find_call(repo: Any, first: str, second: str | None) -> tuple[str, str]:
    """(session, tool_use_id) of the call named by SESSION TOOL_USE_ID or by a
    TOOL_USE_ID alone, either given whole or as a unique prefix (what a listing
    prints when it shortens ids); one line when none or several match."""
    if second is not None and await repo.get_call(first, second) is not None:
        return first, second
    session, tool_use = (None, first) if second is None else (first, second)
    found = await repo.calls_by_prefix(tool_use, session)
    if len(found) == 1:
        return found[0]  # type: ignore[no-any-return]
    named = f"{tool_use!r}" + (f" in session {session!r}" if session is not None else "")
    if not found:
        raise CliError(f"no call {named}")
    raise CliError(f"call {named} is ambiguous: give more of the id "
                   "(`parkgate calls list --wide` shows ids whole)")


@app.command("show")
def show_call(
    session: str = typer.Argument(
        ..., help="Session id, or the call's tool_use id alone (a unique prefix will do)."),
    tool_use_id: str | None = typer.Argument(
        None, help="The call's tool_use id (a unique prefix will do)."),
    as_json: bool = typer.Option(False, "--json", help="Same as --output json."),
    output: Output = output_option(),
) -> None:
    """One call: its record, the result the model got, and its timeline."""
    async def fetch(repo: Repository) -> tuple[Any, Any]:
        sid, tid = await find_call(repo, session, tool_use_id)
        call = await repo.get_call(sid, tid)
        if call is None:
            raise CliError(f"no call {tid!r} in session {sid!r}")
        return call, await repo.timeline(sid, tid)

    call, timeline = in_repository(fetch)
    if as_json or output is Output.json:
        print_json(call.model_dump(mode="json"))
        return
    info = Table(title="Call", title_justify="left", show_header=False)
    info.add_column("field", style="bold")
    info.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("session", escape(call.session_id)),
        ("tool_use_id", escape(call.tool_use_id)),
        ("tool", f"{call.tool_name or '-'} ({call.side_effects or '-'})"),
        ("status", _status(call.status)),
        ("turn", call.turn_id or "-"),
        ("verdict", f"{call.verdict or '-'} by rule {call.rule or '-'}"),
        ("input", json.dumps(call.input, indent=2) if call.input is not None else "-"),
        ("approval request", call.request_id or "-"),
        (
            "decision",
            " ".join(
                x
                for x in (
                    call.decision,
                    f"by {call.decider()}" if call.decider() else None,
                    f"via {call.via}" if call.via else None,
                )
                if x
            )
            or "-",
        ),
        ("reason", call.reason or "-"),
        ("error class", call.error_class or "-"),
        ("created / finished", f"{_when(call.created_at)} / {_when(call.finished_at)}"),
        ("duration", _duration(call.duration_ms)),
        ("workflow", f"{call.workflow_id or '-'} run {call.run_id or '-'}"),
    ]
    if call.result is not None:
        text = "\n".join(getattr(block, "text", f"[{block.type}]") for block in call.result.content)
        rows.append(("result" + (" (error)" if call.result.is_error else ""), text or "-"))
    for key, value in rows:
        info.add_row(key, value)
    console.print(info)

    print_timeline(timeline)


def print_timeline(timeline: list[Any]) -> None:
    """The call's events as a table when it fits whole; else one line per event
    with its details indented below, wrapped between words (never mid-token)."""
    from rich import box

    events = Table(title="Timeline (UTC)", title_justify="left", box=box.SIMPLE_HEAD,
                   show_edge=False, pad_edge=False, collapse_padding=True)
    events.add_column("#", justify="right")
    events.add_column("at", no_wrap=True)
    events.add_column("event", no_wrap=True)
    events.add_column("+ms", justify="right")
    events.add_column("details", overflow="fold")
    lines: list[tuple[str, str]] = []
    for entry in timeline:
        event = entry.event
        since = "-" if entry.since_previous_ms is None else f"{entry.since_previous_ms:.0f}"
        details = escape(_event_details(event))
        events.add_row(str(event.seq), _when(event.at, short=True),
                       event.type.removeprefix("tool."), since, details)
        head = (f"{event.seq:>3}  {_when(event.at, short=True)}  "
                f"{event.type.removeprefix('tool.')}  +{since}ms")
        lines.append((head, details))
    wide = console.options.update(width=max(console.width, 10_000))
    if console.measure(events, options=wide).maximum <= console.width:
        console.print(events)
        return
    console.print("[italic]Timeline (UTC)[/]")
    for head, details in lines:
        console.print(head, markup=False)
        if details != "-":
            console.print(Padding(details, (0, 0, 0, 5)))


#: Event data worth a column in a terminal (diffs, hashes and links stay in --json/API).
_DETAIL_KEYS = ("rule", "decision", "decided_by", "cancelled_by", "via", "reason", "duration_ms",
                "expires_at")


def _detail(key: str, value: Any) -> str:
    """One detail as a terminal shows it: durations rounded, times to the second."""
    if key == "duration_ms" and isinstance(value, int | float):
        return _duration(float(value))
    if key == "expires_at" and isinstance(value, str):
        try:
            return _when(datetime.fromisoformat(value), short=True)
        except ValueError:
            return value
    return str(value)


def _event_details(event: Any) -> str:
    parts = [event.message] if event.message else []
    if event.error_class:
        parts.append(f"error_class={event.error_class}")
    for key in _DETAIL_KEYS:
        value = event.data.get(key)
        if key == "decided_by" and not value and event.data.get("claimed_name"):
            value = decider_label(None, event.data["claimed_name"])
        if value not in (None, ""):
            parts.append(f"{key}={_detail(key, value)}")
    return ", ".join(parts) or "-"
