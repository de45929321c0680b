"""`parkgate approvers inbox-link NAME`: a named approver's personal inbox link.

The link lists every parked call naming that approver and lets them decide
in place (docs/APPROVERS.md, "Inbox"). It is signed with the link secret and
valid for `inbox_link_days`; rotating the secret (`link_secret`) revokes all.
"""

from __future__ import annotations

import typer

from parkgate.cli.common import CliError, console, load_settings

app = typer.Typer(help="Named approvers: personal inbox links.", no_args_is_help=True)


@app.command("inbox-link")
def inbox_link(
    name: str = typer.Argument(..., help="A named approver from `approvers:`."),
) -> None:
    """Print NAME's personal inbox link (send it to them privately)."""
    from parkgate.links import inbox_url

    settings = load_settings()
    if name not in settings.approvers:
        known = ", ".join(sorted(settings.approvers)) or "none configured"
        raise CliError(f"unknown approver {name!r} (approvers: {known})")
    console.print(inbox_url(settings.public_base_url, settings.signing_secret(), name),
                  soft_wrap=True)
    console.print(f"valid for {settings.inbox_link_days} days", style="dim")
