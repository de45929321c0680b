"""E-mail notices for parked calls: one message per named approver, with their own link.

Building a message is pure; sending is one SMTP session per message through
aiosmtplib, done by the `parkgate.notify` activity (activities/notify.py),
which Temporal retries with backoff. Links are derived by the activity when it
runs (never stored, never in workflow history) and go only to their approver.
"""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from typing import TYPE_CHECKING

from parkgate.durable.payloads import NotifyInput

if TYPE_CHECKING:
    from parkgate.settings import Settings

#: A diff longer than this is cut in the mail (the approval page shows it whole).
MAX_DIFF_CHARS = 20_000


#: Said of a client tool's call (the agent's own process runs it).
CLIENT_RUNS = ("The agent's client runs this tool itself: approving releases exactly these "
               "arguments to it, once; parkgate records what it reports.")


class MailError(Exception):
    """The SMTP server refused the message or could not be reached."""


def subject(notice: NotifyInput) -> str:
    info = notice.info
    lead = {"reminder": "Reminder: ", "escalation": "Escalated: "}.get(notice.kind, "")
    return (f"[parkgate] {lead}Approve {info.tool_name} ({info.side_effects.value}) "
            f"in session {notice.session.session_id}?")


def body(notice: NotifyInput, approver: str, link: str) -> str:
    """The plain-text mail: what the call does, the diff or preview, the personal link."""
    info = notice.info
    expiry = (notice.expires_at.strftime("%Y-%m-%d %H:%M UTC") if notice.expires_at
              else "never")
    lines = [
        f"Hello {approver},",
        "",
        f"An agent wants to run {info.tool_name} ({info.side_effects.value}) and a rule "
        f"({info.rule or 'policy'}) asks a human first.",
        "",
        f"Session:   {notice.session.session_id} (turn {notice.session.turn_id})",
        f"Call:      {info.tool_use_id}",
        f"Expires:   {expiry}",
    ]
    if info.client_executed:
        lines += ["", CLIENT_RUNS]
    if info.approvers:
        lines.append(f"Approvers: {', '.join(info.approvers)} "
                     f"({info.quorum} approval{'s' if info.quorum != 1 else ''} needed)")
    if info.projected_impact:
        lines += ["", "Impact:"] + [f"  - {line}" for line in info.projected_impact]
    lines += ["", f"Your personal link (it decides as {approver}; do not forward it):", link, ""]
    if info.diff:
        diff = info.diff
        if len(diff) > MAX_DIFF_CHARS:
            diff = diff[:MAX_DIFF_CHARS] + "\n[... diff cut; the approval page shows it whole]"
        lines += ["Diff:", "", diff]
    else:
        lines += ["Arguments:", "", info.input_summary]
    lines += ["", "-- ", "parkgate: opening the link shows the call; only a button on "
              "the page decides."]
    return "\n".join(lines) + "\n"


def build_message(
    notice: NotifyInput, *, sender: str, approver: str, address: str, link: str
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = address
    msg["Subject"] = subject(notice)
    domain = sender.rpartition("@")[2] or "parkgate"
    # A reminder or escalation is a message of its own (clients drop repeated ids).
    again = "" if notice.kind == "request" else f".{notice.kind}"
    msg["Message-ID"] = make_msgid(idstring=f"{notice.info.request_id}.{approver}{again}",
                                   domain=domain)
    msg["X-Parkgate-Request"] = notice.info.request_id
    msg.set_content(body(notice, approver, link))
    return msg


async def send(settings: Settings, message: EmailMessage) -> None:
    """Send one message over SMTP with the configured security; MailError on failure."""
    import aiosmtplib  # network client: imported where used

    security = settings.smtp_security
    try:
        await aiosmtplib.send(
            message,
            hostname=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_username or None,
            password=settings.smtp_password if settings.smtp_username else None,
            use_tls=security == "ssl",
            start_tls=True if security == "starttls" else False,
            timeout=settings.smtp_timeout_seconds,
            cert_bundle=str(settings.smtp_ca_path) if settings.smtp_ca_path else None,
        )
    except (aiosmtplib.SMTPException, OSError) as exc:
        # The exception text names the server's reply, never the password.
        raise MailError(f"{type(exc).__name__}: {exc}"[:300]) from exc
