"""`parkgate.notify`: deliver a parked call's notice to every webhook and, by
e-mail, to each named approver (their own link each).

Temporal retries the activity (the workflow sets the retry policy); the
indices already delivered travel in the heartbeat details so a retry does not
re-send to targets that succeeded. The workflow starts it without waiting on
it, so a dead webhook never holds or loses a call.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from parkgate.approvals.links import approval_url, sign_personal_token
from parkgate.channels import mail
from parkgate.channels.webhook import WebhookError, deliver
from parkgate.durable.payloads import ACT_NOTIFY, NotifyInput, NotifyOutput
from parkgate.settings import Settings


class NotifyActivities:
    """Holds the settings (the webhook list); one instance per worker."""

    def __init__(self, settings: Settings, *, timeout: float = 10.0) -> None:
        self.settings = settings
        self.timeout = timeout

    @activity.defn(name=ACT_NOTIFY)
    async def notify(self, req: NotifyInput) -> NotifyOutput:
        hooks = self.settings.webhooks
        if req.approval_url is None:  # derived here: no token in workflow history
            req = req.model_copy(update={"approval_url": approval_url(
                self.settings.public_base_url, self.settings.signing_secret(),
                req.info.request_id, req.expires_at,
            )})
        # Progress travels in the heartbeat: a retry skips what already went out.
        # Keys: a webhook's index (as before mail existed, so any worker reads
        # them) and "mail:<approver>".
        delivered: set[int | str] = set()
        details = activity.info().heartbeat_details
        if details and isinstance(details[0], list):
            delivered = {i if isinstance(i, int) else str(i) for i in details[0]}
        failures: list[str] = []
        approvers = self._approvers(req)
        import httpx  # here, not at import: a worker without webhooks never loads it (~7 MB)

        async with httpx.AsyncClient() as client:
            for index, hook in enumerate(hooks):
                if index in delivered:
                    continue
                try:
                    await deliver(client, hook, req, timeout=self.timeout, approvers=approvers)
                except WebhookError as exc:
                    failures.append(f"webhook[{index}] ({hook.kind}): {exc}")
                    continue
                delivered.add(index)
                activity.heartbeat(_progress(delivered))
        if self.settings.email_enabled:
            for approver in approvers:
                key = f"mail:{approver['name']}"
                if not approver["email"] or key in delivered:
                    continue
                message = mail.build_message(
                    req, sender=self.settings.smtp_from, approver=approver["name"],
                    address=approver["email"], link=approver["approval_url"],
                )
                try:
                    await mail.send(self.settings, message)
                except mail.MailError as exc:
                    failures.append(f"mail to {approver['name']}: {exc}")
                    continue
                delivered.add(key)
                activity.heartbeat(_progress(delivered))
        if failures:
            # Retryable: Temporal tries again with the workflow's retry policy.
            raise ApplicationError("; ".join(failures), type="NotifyError")
        return NotifyOutput(delivered=len(delivered), failed=0)

    def _approvers(self, req: NotifyInput) -> list[dict[str, Any]]:
        """Each named approver with their personal link, derived here from the
        secret (links never travel through workflow history)."""
        base = self.settings.public_base_url.rstrip("/") + "/approve/"
        secret = self.settings.signing_secret()
        info = req.info
        if req.kind == "escalation":
            names = list(info.escalate_to)
        else:  # escalation people hear of the call only when it escalates
            names = [n for n in info.approvers if n not in info.escalate_to]
        out: list[dict[str, Any]] = []
        for name in names:
            entry = self.settings.approvers.get(name)
            if name in info.approvers:
                link = base + sign_personal_token(secret, info.request_id, req.expires_at, name)
            else:  # a request any approver decides: its generic link
                link = req.approval_url or ""
            out.append({"name": name, "email": entry.email if entry else None,
                        "approval_url": link})
        return out


def _progress(delivered: set[int | str]) -> list[int | str]:
    """Heartbeat details: webhook indices first, then mail keys, each sorted."""
    return [*sorted(i for i in delivered if isinstance(i, int)),
            *sorted(k for k in delivered if isinstance(k, str))]
