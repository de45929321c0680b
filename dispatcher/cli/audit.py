"""`parkgate audit verify|export|prune`: tamper evidence, exports and retention."""

from __future__ import annotations

import re
import sys
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from parkgate.cli.common import (
    CliError,
    call_statuses,
    console,
    err_console,
    load_settings,
    open_repository,
    plural,
    run,
)

if TYPE_CHECKING:
    from parkgate.settings import Settings
    from parkgate.store.repository import Repository

app = typer.Typer(help="Audit the recorded history.", no_args_is_help=True)

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.I)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """'90d', '12h', '30m', '2w', '45s' -> timedelta; BadParameter otherwise."""
    match = _DURATION.match(text or "")
    if not match or int(match.group(1)) <= 0:
        raise typer.BadParameter(
            f"invalid age {text!r}; use a positive number with s, m, h, d or w (e.g. 90d)",
            param_hint="--older-than",
        )
    return timedelta(**{_UNITS[match.group(2).lower()]: int(match.group(1))})


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


@app.command("verify")
def verify(
    session: str | None = typer.Option(None, "--session", "-s", help="Only this session."),
    against_temporal: bool = typer.Option(
        False,
        "--against-temporal",
        help="Also compare each call with the workflow history Temporal still keeps.",
    ),
) -> None:
    """Re-compute every hash chain and check what each call's history says.

    Exit 1 naming the first tampered event and every call whose history cannot
    be true (two resolutions, a decision the rows contradict, a tool that ran
    after a denial, failed and completed, ran twice, a recorded integrity error).
    """
    settings = load_settings()

    async def go() -> int:
        async with open_repository(settings) as repo:
            report = await repo.verify_chain(session)
            meaning = await repo.verify_meaning(session)
            temporal = None
            if against_temporal:
                temporal = await _against_temporal(settings, repo, session)
        code = 0
        first = report.first
        if first is None:
            console.print(
                f"OK: {plural(report.events, 'event')} in "
                f"{plural(report.chains, 'call chain')} verified",
                soft_wrap=True,
            )
        else:
            code = 1
            err_console.print(
                f"TAMPERED: {first.describe()}"
                + (f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""),
                soft_wrap=True,
            )
            for problem in report.problems[1:]:
                err_console.print(f"  also {problem.describe()}", soft_wrap=True)
        problems = list(meaning.problems) + (list(temporal.problems) if temporal else [])
        for problem in problems:
            err_console.print(f"INCONSISTENT: {problem.describe()}", soft_wrap=True)
        if problems:
            code = 1
        else:
            says = "says" if meaning.calls == 1 else "say"
            console.print(f"OK: {plural(meaning.calls, 'call')} {says} what happened",
                          soft_wrap=True)
        if temporal is not None and temporal.ok:
            console.print(
                f"OK: {plural(temporal.compared, 'call')} "
                f"{'matches' if temporal.compared == 1 else 'match'} Temporal's histories"
                f" ({temporal.not_kept} no longer kept by Temporal)",
                soft_wrap=True,
            )
        return code

    code = run(go())
    if code:
        raise typer.Exit(code)


async def _against_temporal(settings: Settings, repo: Repository, session: str | None) -> Any:
    from parkgate.cli.decide import CONNECT_TIMEOUT
    from parkgate.durable.audit import compare_store_with_temporal
    from parkgate.runtime.embedded import StartupError, connect_temporal, temporal_address_for

    try:
        client = await connect_temporal(
            settings, address=temporal_address_for(settings), timeout=CONNECT_TIMEOUT
        )
    except StartupError as exc:
        raise CliError(str(exc)) from exc
    return await compare_store_with_temporal(repo, client, session)


@app.command("export")
def export(
    fmt: ExportFormat = typer.Option(..., "--format", "-f", help="jsonl or csv."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="File to write (default: stdout).", show_default=False
    ),
    session: str | None = typer.Option(None, "--session", "-s"),
    turn: str | None = typer.Option(None, "--turn"),
    tool: str | None = typer.Option(None, "--tool", "-t"),
    status: list[str] | None = typer.Option(None, "--status", help="Repeatable."),
    side_effects: str | None = typer.Option(None, "--side-effects"),
    decided_by: str | None = typer.Option(None, "--decided-by"),
    since: datetime | None = typer.Option(None, "--since", help="Created at or after (UTC)."),
    until: datetime | None = typer.Option(None, "--until", help="Created before (UTC)."),
    no_events: bool = typer.Option(False, "--no-events", help="JSONL without each call's events."),
) -> None:
    """Export calls (oldest first) as JSON Lines (with events) or CSV."""
    from parkgate.store import CallFilters

    statuses = call_statuses(status)
    filters = CallFilters(
        session_id=session,
        turn_id=turn,
        tool_name=tool,
        status=statuses or None,
        side_effects=side_effects,
        decided_by=decided_by,
        since=since,
        until=until,
    )
    settings = load_settings()

    async def go(out: IO[str]) -> int:
        async with open_repository(settings) as repo:
            if not err_console.is_terminal:
                return await repo.export(fmt.value, out, filters, include_events=not no_events)
            with Progress(
                TextColumn("exporting"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
                transient=True,
            ) as progress:
                task = progress.add_task("export", total=None)

                def tick(done: int, total: int) -> None:
                    progress.update(task, completed=done, total=total)

                return await repo.export(
                    fmt.value, out, filters, include_events=not no_events, on_progress=tick
                )

    with ExitStack() as stack:
        if output is None:
            out: IO[str] = sys.stdout
        else:
            try:
                out = stack.enter_context(output.open("w", encoding="utf-8", newline=""))
            except OSError as exc:
                raise typer.BadParameter(
                    f"cannot write {output}: {exc.strerror}", param_hint="--output"
                ) from None
        count = run(go(out))
    if output is not None:
        err_console.print(f"exported {plural(count, 'call')} to {output}")


@app.command("verify-export")
def verify_export(
    path: Path = typer.Argument(..., help="A JSON Lines file written by `audit export`."),
) -> None:
    """Re-compute the hash of every event in an export, without the database.

    Exit 1 naming each event whose fields no longer match its hash or that does
    not follow the event before it. Events hashed before RFC 8785 verify too.
    """
    from parkgate.store.chain import check_exported, exported_events

    try:
        with path.open(encoding="utf-8") as lines:
            report = check_exported(exported_events(lines))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{path} is not a JSON Lines export with events: {exc}") from None
    for problem in report.problems:
        err_console.print(f"TAMPERED: {problem.describe()}", soft_wrap=True)
    if report.problems:
        raise typer.Exit(1)
    console.print(f"OK: {plural(report.events, 'event')} in "
                  f"{plural(report.chains, 'call chain')} verified", soft_wrap=True)


@app.command("prune")
def prune(
    older_than: str = typer.Option(..., "--older-than", help="Age, e.g. 90d, 12h, 2w."),
    check: bool = typer.Option(False, "--verify", help="Verify the remaining history after."),
) -> None:
    """Delete finished calls (with their events and approvals) older than the age."""
    age = parse_age(older_than)
    settings = load_settings()

    async def go() -> tuple[int, int, bool]:
        async with open_repository(settings) as repo:
            removed = await repo.prune(age)
            windows = await repo.prune_budget_windows(settings.budgets, datetime.now(UTC) - age)
            ok = (await repo.verify_chain()).ok if check else True
        return removed, windows, ok

    removed, windows, ok = run(go())
    console.print(
        f"pruned {removed} finished calls older than {older_than.strip()}"
        + (f" and {plural(windows, 'ended budget window')}" if windows else "")
        + ("; the remaining history verifies" if check and ok else ""),
        soft_wrap=True,
    )
    if not ok:
        err_console.print(
            "warning: the remaining history does not verify; run `parkgate audit verify`"
        )
        raise typer.Exit(1)
