"""What the approver inbox renders: the list page, messages, and flash redirects.

routes_inbox.py routes and decides; this module turns a viewer's waiting
requests into the page (`render`), answers with a message page, and sends the
viewer back to the list with a signed one-shot flash message (POST, redirect,
GET: the page works without JavaScript).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from parkgate.api.people.approve_page import REMEMBER_TTLS
from parkgate.api.people.inbox import (
    SIDE_EFFECTS,
    Filters,
    Viewer,
    call_key,
    present,
    signature,
    votes,
    waiting_for,
)
from parkgate.api.shared import csrf, signin
from parkgate.api.shared.views import page_headers
from parkgate.calls.records import ApprovalRecord
from parkgate.durable.payloads import DecideResult
from parkgate.models import utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository

_FLASH_SALT = "parkgate.inbox-flash.v1"
FLASH_COOKIE = "pg_inbox_flash"
# Personal inbox URLs carry their credential: never send them on (no-referrer).
_HEADERS = page_headers(
    "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
WORDS = {"allow": "approved", "allow_with_edits": "approved with edits", "deny": "denied",
         "expired": "expired"}


def page(request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    response: HTMLResponse = request.app.state.templates.TemplateResponse(
        request, template,
        {"static_url": request.app.state.static_url, "root": signin.root(request), **ctx},
        status_code=status, headers=_HEADERS,
    )
    return response


def message(request: Request, status: int, title: str, text: str, detail: str = "",
            kind: str = "error") -> HTMLResponse:
    return page(request, "message.html", status, title=title, text=text, detail=detail,
                kind=kind)


def bad_link(request: Request) -> HTMLResponse:
    return message(request, 403, "Invalid inbox link",
                   "This inbox link is not valid: altered, expired, or for an approver "
                   "no longer configured.", "Ask an admin for a new one "
                   "(parkgate approvers inbox-link NAME).")


def set_csrf(response: Response, request: Request, purpose: str, nonce: str) -> None:
    response.set_cookie(
        csrf.cookie_name(purpose), nonce, max_age=csrf.MAX_AGE_SECONDS, httponly=True,
        samesite="strict", secure=signin.secure(request), path="/inbox",
    )


def _flash_serializer(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_FLASH_SALT)


def take_flash(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        data = _flash_serializer(request).loads(raw, max_age=300)
    except BadSignature:
        return None
    if isinstance(data, dict) and isinstance(data.get("t"), str):
        return {"text": data["t"], "kind": str(data.get("k") or "info"),
                "decided": str(data.get("r") or "")}
    return None


def to_inbox(request: Request, viewer: Viewer, query: str, text: str,
             kind: str, decided: str | None = None) -> RedirectResponse:
    """PRG: back to the inbox (same filters) with a signed one-shot flash (and the
    request just decided, which that page leaves out)."""
    safe = query if query and "\n" not in query and "\r" not in query else ""
    url = signin.root(request) + viewer.base + (f"?{safe}" if safe else "")
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        FLASH_COOKIE, _flash_serializer(request).dumps({"t": text, "k": kind, "r": decided}),
        max_age=300, httponly=True, samesite="strict", secure=signin.secure(request), path="/inbox",
    )
    return response


def winner_text(approval: ApprovalRecord, result: DecideResult | None) -> str:
    """Who decided a request before this viewer could (from the refusal, else the row)."""
    if result is not None and result.winner is not None:
        win = result.winner
        who = win.decided_by or (f"{win.claimed_name} (unverified)" if win.claimed_name
                                 else "someone")
        word = WORDS.get(win.decision, win.decision)
        return f"Already decided by {who}: {word} {approval.tool_name} ({approval.tool_use_id})."
    who = approval.decided_by or (f"{approval.claimed_name} (unverified)"
                                  if approval.claimed_name else "someone")
    word = WORDS.get(approval.decision or "", approval.decision or "")
    if approval.decision == "expired":
        return f"{approval.tool_name} ({approval.tool_use_id}) expired before a decision."
    return f"Already decided by {who}: {word} {approval.tool_name} ({approval.tool_use_id})."


async def render(
    request: Request, viewer: Viewer, filters: Filters, *, partial: bool = False,
    status: int = 200, flash: dict[str, str] | None = None,
    form_error: dict[str, Any] | None = None,
) -> HTMLResponse:
    """The inbox page (or, `partial`, just its list, which the live page swaps in)."""
    repo: Repository = request.app.state.deps.repo
    settings: Settings = request.app.state.settings
    now = utcnow()
    waiting = await waiting_for(repo, settings, viewer, filters, now)
    if flash is not None and flash.get("decided"):
        # Just decided here: the workflow has it, its store row may trail by a moment.
        waiting = [w for w in waiting if w.approval.request_id != flash["decided"]]
    calls = await repo.get_calls([call_key(w.approval) for w in waiting])
    items = [await present(repo, w, now, await votes(request.app.state.calls, w), calls)
             for w in waiting]
    nonce, token = csrf.issue(request.app.state.secret, viewer.csrf_purpose,
                              request.cookies.get(csrf.cookie_name(viewer.csrf_purpose)))
    base = signin.root(request) + viewer.base
    query = urlencode(filters.params())
    ctx: dict[str, Any] = {
        "viewer": viewer, "items": items, "f": filters, "side_effects": SIDE_EFFECTS,
        "csrf": token, "base": base,
        "post_url": base if viewer.token else f"{base}/decide", "back": query, "flash": flash,
        "form_error": form_error or {}, "sig": signature(waiting),
        "stream_url": f"{base}/stream" + (f"?{query}" if query else ""),
        "list_url": f"{base}?" + urlencode({**filters.params(), "partial": "1"}),
    }
    if not partial:
        ctx["remembered"] = await revocable(repo, viewer, now)
        ctx["remember_ttls"] = REMEMBER_TTLS
    signout: list[str] = []
    if not partial:
        ctx.update(signin.signout_context(request, signout))
    if not partial and viewer.principal is not None and not signout:
        nonce_out, token_out = csrf.issue(
            request.app.state.secret, "inbox-logout",
            request.cookies.get(csrf.cookie_name("inbox-logout")))
        ctx["logout_csrf"] = token_out
    response = page(request, "_inbox_items.html" if partial else "inbox.html", status, **ctx)
    set_csrf(response, request, viewer.csrf_purpose, nonce)
    if "logout_csrf" in ctx:
        set_csrf(response, request, "inbox-logout", nonce_out)
    for nonce_signout in signout:
        signin.set_signout_cookie(response, request, nonce_signout)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path="/inbox")
    return response


async def revocable(repo: Repository, viewer: Viewer, now: datetime) -> list[Any]:
    """Active remembered rules this viewer may revoke: a key's (or person's)
    project's, or those a named approver made."""
    project = viewer.principal.project if viewer.principal is not None else None
    return list(await repo.revocable_remembered(project=project, approver=viewer.approver,
                                                now=now))
