"""The approver inbox: every call waiting for me, newest first, decided in place.

`/inbox` is for API keys with the approver role (sign in with the key, like
the audit pages: a signed HttpOnly cookie naming the key; a revoked key or a
lost role ends the session). `/inbox/p/<token>` is a named approver's
personal inbox link (signed, timestamped, `inbox_link_days`). Both list the
requests their viewer may decide (see inbox.py), filter with a plain GET form,
and decide with plain form POSTs (signed double-submit CSRF, as the approval
page) that go through `CallService.decide` (the workflow's `decide` update:
first decision wins) and redirect back with a flash message: the page works
without JavaScript. With it, `<base>/stream` (SSE) says when the set of
waiting calls changes and a small script swaps the list in.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sse_starlette import EventSourceResponse, ServerSentEvent

from parkgate import identity
from parkgate.access import Role
from parkgate.api import csrf, metrics, oidc_sessions, routes_oidc
from parkgate.api.approval_links import quorum_of
from parkgate.api.decisions import answer_refused, outcome
from parkgate.api.deps import principal_of
from parkgate.api.errors import ApiError
from parkgate.api.inbox import (
    SIDE_EFFECTS,
    Filters,
    Viewer,
    Waiting,
    present,
    signature,
    waiting_for,
)
from parkgate.api.key_sessions import posted_form, sign_in, signed_in_key
from parkgate.api.routes_approve import REMEMBER_TTLS
from parkgate.api.routes_remembered import remember_spec
from parkgate.api.service import CallService
from parkgate.durable.client import TEMPORAL_NO_ANSWER
from parkgate.durable.payloads import DecideInput, DecideResult
from parkgate.links import LinkError, verify_inbox_token
from parkgate.models import utcnow
from parkgate.records import ApprovalRecord
from parkgate.remember_spec import RememberSpec
from parkgate.schema import depth_error
from parkgate.settings import Settings
from parkgate.store.repository import Repository

router = APIRouter(include_in_schema=False)

COOKIE = "pg_inbox"
_SESSION_SALT = "parkgate.inbox-session.v1"
_FLASH_SALT = "parkgate.inbox-flash.v1"
FLASH_COOKIE = "pg_inbox_flash"
SESSION_SECONDS = 12 * 3600
_LOGIN_PURPOSE = "inbox-login"
_HEADERS = {
    "Cache-Control": "no-store",
    # Personal inbox URLs carry their credential: never send them on.
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}
_WORDS = {"allow": "approved", "allow_with_edits": "approved with edits", "deny": "denied",
          "expired": "expired"}
#: How often a key's stream re-checks that the key is still valid.
_RECHECK_SECONDS = 10.0

# ----------------------------------------------------------------- helpers
def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _secure(request: Request) -> bool:
    settings: Settings = request.app.state.settings
    return settings.public_base_url.startswith("https://")


def _page(request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    response: HTMLResponse = request.app.state.templates.TemplateResponse(
        request, template,
        {"static_url": request.app.state.static_url, "root": _root(request), **ctx},
        status_code=status, headers=_HEADERS,
    )
    return response


def _message(request: Request, status: int, title: str, text: str, detail: str = "",
             kind: str = "error") -> HTMLResponse:
    return _page(request, "message.html", status, title=title, text=text, detail=detail,
                 kind=kind)


def _session_serializer(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_SESSION_SALT)


def _flash_serializer(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_FLASH_SALT)


def _set_csrf(response: Response, request: Request, purpose: str, nonce: str) -> None:
    response.set_cookie(
        csrf.cookie_name(purpose), nonce, max_age=csrf.MAX_AGE_SECONDS, httponly=True,
        samesite="strict", secure=_secure(request), path="/inbox",
    )


async def _key_viewer(request: Request) -> Viewer | None:
    """The approver of a signed-in inbox session (an API key, else a person
    signed in through OIDC whose groups grant the approver role), or None."""
    key = await signed_in_key(
        request, cookie=COOKIE, salt=_SESSION_SALT, max_age=SESSION_SECONDS, role=Role.APPROVER
    )
    if key is not None:
        return Viewer(principal=principal_of(key))
    person = oidc_sessions.person_with(request, Role.APPROVER)
    return None if person is None else Viewer(principal=person.principal)


def _link_viewer(request: Request, token: str) -> Viewer | None:
    """The named approver a personal inbox link names (still configured), or None."""
    settings: Settings = request.app.state.settings
    try:
        name = verify_inbox_token(request.app.state.secret, token,
                                  settings.inbox_link_days * 86400)
    except LinkError:
        return None
    return Viewer(approver=name, token=token) if name in settings.approvers else None


def _link_needs_signin(request: Request, viewer: Viewer) -> Response | None:
    """With `link_decisions: signin`, a personal link works only for the person
    it names, signed in: anyone else holding it (a forwarded link) is refused."""
    settings: Settings = request.app.state.settings
    if settings.link_decisions != "signin":
        return None
    person = oidc_sessions.signed_in(request)
    if person is not None and person.principal.approver == viewer.approver:
        return None
    if person is None and settings.oidc_enabled:
        return routes_oidc.sign_in_page(
            request, 401, "Sign in first",
            f"This inbox link belongs to {viewer.approver}; on this server a link decides "
            "only together with their sign-in.", request.url.path,
            "Sign in, then open the link again.")
    return _message(request, 403, "Not your link",
                    f"This inbox link belongs to {viewer.approver}; you are signed in as "
                    f"{person.principal.name if person else 'nobody'}. A forwarded link "
                    "decides nothing.")


def _signed_out_page(request: Request) -> Response:
    """A page without an approver session: the sign-in (OIDC or key form), or
    why a signed-in person may not use the inbox."""
    settings: Settings = request.app.state.settings
    person = oidc_sessions.signed_in(request)
    if person is not None:
        response = _message(request, 403, "No approver role",
                            f"You are signed in as {person.principal.name}, but your groups "
                            "grant no approver role.",
                            "Ask an admin to add you to a group that oidc_group_roles maps "
                            "to the approver role.")
        return response
    if settings.oidc_enabled and not settings.api_key_signin:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(routes_oidc.login_url(request, target), status_code=303)
    return _login_redirect(request)


def _bad_link(request: Request) -> HTMLResponse:
    return _message(request, 403, "Invalid inbox link",
                    "This inbox link is not valid: altered, expired, or for an approver "
                    "no longer configured.", "Ask an admin for a new one "
                    "(parkgate approvers inbox-link NAME).")


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(
        f"{_root(request)}/inbox/login?{urlencode({'next': target})}", status_code=303
    )


def _safe_next(value: str | None) -> str:
    """Only /inbox paths (no open redirect, no personal-link detour)."""
    if value and value.startswith("/inbox") and not value.startswith(("//", "/inbox/p/")):
        return value
    return "/inbox"


def _filters(viewer: Viewer, project: str | None, session_id: str | None,
             tool_name: str | None, side_effects: str | None) -> Filters:
    return Filters(
        project=(project or None) if viewer.principal is None
        or viewer.principal.projects is not None else None,
        session_id=session_id or None, tool_name=tool_name or None,
        side_effects=side_effects if side_effects in SIDE_EFFECTS else None,
    )


def _take_flash(request: Request) -> dict[str, str] | None:
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


async def _votes(request: Request, item: Waiting) -> list[str]:
    """Named approvers who allowed so far (the workflow holds them while parked)."""
    approval = item.approval
    if not (approval.info or {}).get("approvers"):
        return []
    service: CallService = request.app.state.calls
    try:
        view = await service.query(approval.session_id, approval.tool_use_id)
    except TEMPORAL_NO_ANSWER:
        return []
    return list(view.votes) if view is not None else []


# ------------------------------------------------------------------- pages
async def _render(
    request: Request, viewer: Viewer, filters: Filters, *, partial: bool = False,
    status: int = 200, flash: dict[str, str] | None = None,
    form_error: dict[str, Any] | None = None,
) -> HTMLResponse:
    repo: Repository = request.app.state.deps.repo
    settings: Settings = request.app.state.settings
    now = utcnow()
    waiting = await waiting_for(repo, settings, viewer, filters, now)
    if flash is not None and flash.get("decided"):
        # Just decided here: the workflow has it, its store row may trail by a moment.
        waiting = [w for w in waiting if w.approval.request_id != flash["decided"]]
    items = [await present(repo, w, now, await _votes(request, w)) for w in waiting]
    nonce, token = csrf.issue(request.app.state.secret, viewer.csrf_purpose,
                              request.cookies.get(csrf.cookie_name(viewer.csrf_purpose)))
    base = _root(request) + viewer.base
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
        ctx["remembered"] = await _remembered_for(repo, viewer, now)
        ctx["remember_ttls"] = REMEMBER_TTLS
    signout: list[str] = []
    if not partial:
        ctx.update(routes_oidc.signout_context(request, signout))
    if not partial and viewer.principal is not None and not signout:
        nonce_out, token_out = csrf.issue(
            request.app.state.secret, "inbox-logout",
            request.cookies.get(csrf.cookie_name("inbox-logout")))
        ctx["logout_csrf"] = token_out
    response = _page(request, "_inbox_items.html" if partial else "inbox.html", status, **ctx)
    _set_csrf(response, request, viewer.csrf_purpose, nonce)
    if "logout_csrf" in ctx:
        _set_csrf(response, request, "inbox-logout", nonce_out)
    for nonce_signout in signout:
        routes_oidc.set_signout_cookie(response, request, nonce_signout)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path="/inbox")
    return response


_Project = Annotated[str | None, Query(max_length=100)]
_Text = Annotated[str | None, Query(max_length=200)]
_SideEffects = Annotated[str | None, Query(max_length=20)]


@router.get("/inbox", response_class=HTMLResponse)
async def inbox(
    request: Request, project: _Project = None, session_id: _Text = None,
    tool_name: _Text = None, side_effects: _SideEffects = None, partial: bool = False,
) -> Response:
    viewer = await _key_viewer(request)
    if viewer is None:
        if partial:
            return _message(request, 401, "Signed out", "Sign in again to see your inbox.")
        return _signed_out_page(request)
    filters = _filters(viewer, project, session_id, tool_name, side_effects)
    return await _render(request, viewer, filters, partial=partial,
                         flash=None if partial else _take_flash(request))


@router.get("/inbox/p/{token}", response_class=HTMLResponse)
async def personal_inbox(
    request: Request, token: str, project: _Project = None, session_id: _Text = None,
    tool_name: _Text = None, side_effects: _SideEffects = None, partial: bool = False,
) -> Response:
    viewer = _link_viewer(request, token)
    if viewer is None:
        return _bad_link(request)
    refused = _link_needs_signin(request, viewer)
    if refused is not None:
        return refused
    filters = _filters(viewer, project, session_id, tool_name, side_effects)
    return await _render(request, viewer, filters, partial=partial,
                         flash=None if partial else _take_flash(request))


# ------------------------------------------------------------------ stream
def _stream(request: Request, viewer: Viewer, filters: Filters) -> EventSourceResponse:
    repo: Repository = request.app.state.deps.repo
    settings: Settings = request.app.state.settings
    poll = max(float(request.app.state.deps.sse_poll_seconds), 0.05)
    loop = asyncio.get_running_loop()

    async def events() -> AsyncIterator[ServerSentEvent]:
        last: str | None = None
        checked = loop.time()
        while True:
            if viewer.principal is not None and loop.time() - checked > _RECHECK_SECONDS:
                # A revoked key (or a lost approver role) ends the stream too.
                checked = loop.time()
                if await _key_viewer(request) is None:
                    return
            waiting = await waiting_for(repo, settings, viewer, filters, utcnow())
            sig = signature(waiting)
            if sig != last:
                last = sig
                yield ServerSentEvent(
                    event="inbox",
                    data=json.dumps({"sig": sig, "count": len(waiting),
                                     "request_ids": [w.approval.request_id for w in waiting]}),
                )
            if await request.is_disconnected():
                return
            await asyncio.sleep(poll)

    return EventSourceResponse(events(), ping=15,
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/inbox/stream")
async def inbox_stream(
    request: Request, project: _Project = None, session_id: _Text = None,
    tool_name: _Text = None, side_effects: _SideEffects = None,
) -> Response:
    viewer = await _key_viewer(request)
    if viewer is None:
        return _message(request, 401, "Signed out", "Sign in again to see your inbox.")
    return _stream(request, viewer,
                   _filters(viewer, project, session_id, tool_name, side_effects))


@router.get("/inbox/p/{token}/stream")
async def personal_stream(
    request: Request, token: str, project: _Project = None, session_id: _Text = None,
    tool_name: _Text = None, side_effects: _SideEffects = None,
) -> Response:
    viewer = _link_viewer(request, token)
    if viewer is None:
        return _bad_link(request)
    refused = _link_needs_signin(request, viewer)
    if refused is not None:
        return refused
    return _stream(request, viewer,
                   _filters(viewer, project, session_id, tool_name, side_effects))


# ------------------------------------------------------------------ decide
@router.post("/inbox/decide", response_class=HTMLResponse)
async def inbox_decide(request: Request) -> Response:
    viewer = await _key_viewer(request)
    if viewer is None:
        if oidc_sessions.signed_in(request) is not None:
            return _signed_out_page(request)  # signed in, but no approver role (any more)
        return _message(request, 403, "Signed out",
                        "Your inbox session ended; sign in again and retry.")
    return await _decide(request, viewer)


@router.post("/inbox/p/{token}", response_class=HTMLResponse)
async def personal_decide(request: Request, token: str) -> Response:
    viewer = _link_viewer(request, token)
    if viewer is None:
        return _bad_link(request)
    refused = _link_needs_signin(request, viewer)
    if refused is not None:
        return refused
    return await _decide(request, viewer)


def _back(request: Request, viewer: Viewer, query: str, text: str,
          kind: str, decided: str | None = None) -> RedirectResponse:
    """PRG: back to the inbox (same filters) with a signed one-shot flash (and the
    request just decided, which that page leaves out)."""
    safe = query if query and "\n" not in query and "\r" not in query else ""
    url = _root(request) + viewer.base + (f"?{safe}" if safe else "")
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        FLASH_COOKIE, _flash_serializer(request).dumps({"t": text, "k": kind, "r": decided}),
        max_age=300, httponly=True, samesite="strict", secure=_secure(request), path="/inbox",
    )
    return response


def _winner_text(approval: ApprovalRecord, result: DecideResult | None) -> str:
    if result is not None and result.winner is not None:
        win = result.winner
        who = win.decided_by or (f"{win.claimed_name} (unverified)" if win.claimed_name
                                 else "someone")
        word = _WORDS.get(win.decision, win.decision)
        return f"Already decided by {who}: {word} {approval.tool_name} ({approval.tool_use_id})."
    who = approval.decided_by or (f"{approval.claimed_name} (unverified)"
                                  if approval.claimed_name else "someone")
    word = _WORDS.get(approval.decision or "", approval.decision or "")
    if approval.decision == "expired":
        return f"{approval.tool_name} ({approval.tool_use_id}) expired before a decision."
    return f"Already decided by {who}: {word} {approval.tool_name} ({approval.tool_use_id})."


def _parse_edits(raw: str, max_depth: int) -> dict[str, Any] | str:
    """The edited arguments as an object, or what is wrong with them."""
    try:
        parsed = json.loads(raw)
    except RecursionError:
        return "The edited arguments are nested too deeply."
    except ValueError as exc:
        return f"The edited arguments are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return "The edited arguments must be a JSON object."
    if depth_error(parsed, max_depth) is not None:
        return f"The edited arguments nest deeper than {max_depth} levels."
    return parsed


async def _checked_form(
    request: Request, viewer: Viewer, max_fields: int
) -> dict[str, str] | Response:
    """The POSTed form's text fields once its origin and CSRF token check out,
    else the page that says why (400 unreadable, 403 expired)."""
    settings: Settings = request.app.state.settings
    try:
        form = await request.form(max_fields=max_fields, max_files=0)
    except Exception:  # malformed bodies
        return _message(request, 400, "Bad request", "The form could not be read.")
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    purpose = viewer.csrf_purpose
    if not csrf.origin_ok(request, settings.public_base_url) or not csrf.check(
        request.app.state.secret, purpose, fields.get("csrf"),
        request.cookies.get(csrf.cookie_name(purpose)),
    ):
        return _message(request, 403, "Form expired",
                        "This form could not be verified. Reload your inbox and try again.")
    return fields


async def _decide(request: Request, viewer: Viewer) -> Response:
    checked = await _checked_form(request, viewer, 20)
    if isinstance(checked, Response):
        return checked
    fields = checked
    settings: Settings = request.app.state.settings
    person = oidc_sessions.signed_in(request) if (
        viewer.principal is not None and viewer.principal.oidc is not None
    ) or (viewer.principal is None and settings.link_decisions == "signin") else None
    if person is not None and not oidc_sessions.fresh_enough(request, person):
        # Claims asserted too long ago: renew them through the provider (which
        # re-reads the groups), then decide again.
        return routes_oidc.renew_page(request, viewer.base)
    back = fields.get("back", "")[:1000]
    repo: Repository = request.app.state.deps.repo
    request_id = fields.get("request_id", "")[:200]
    approval = await repo.get_approval(request_id) if request_id else None
    item = await _visible(request, viewer, approval) if approval is not None else None
    if approval is None:
        return _back(request, viewer, back, "That request does not exist.", "error")
    if approval.decision is not None:
        return _back(request, viewer, back, _winner_text(approval, None), "warn")
    if item is None:
        # Not (or no longer) decidable by this viewer: expired, call ended,
        # another project, its own submission, not named. Never say which.
        return _back(request, viewer, back,
                     f"{approval.tool_name} ({approval.tool_use_id}) is not waiting for you.",
                     "warn")
    decision = fields.get("decision", "")
    reason = fields.get("reason", "").strip()[:4000] or None
    if decision not in ("allow", "deny", "allow_with_edits"):
        return _back(request, viewer, back, "Choose Approve, Deny or Approve with edits.",
                     "error")
    edited: dict[str, Any] | None = None
    raw = fields.get("edited_input", "")
    if decision == "allow_with_edits":
        parsed = _parse_edits(raw, settings.max_input_depth)
        if isinstance(parsed, str):
            return await _form_error(request, viewer, back, request_id, parsed, raw, reason)
        edited = parsed
    remember = None
    if fields.get("remember") == "on":
        try:
            remember = await _remember(request, viewer, item, fields, decision, edited)
        except ApiError as exc:
            return _back(request, viewer, back, f"Not remembered: {exc.message}", "error")
    service: CallService = request.app.state.calls
    decide = _decide_input(viewer, item, decision, reason, edited, person)
    if remember is not None:
        decide = decide.model_copy(update={"remember": remember})
    result = await service.decide(approval.session_id, approval.tool_use_id, decide)
    return await _outcome(request, viewer, back, item, decision, reason, raw, result)


# ---------------------------------------------------- remembered decisions
async def _remembered_for(repo: Repository, viewer: Viewer, now: Any) -> list[Any]:
    """Active remembered rules this viewer may revoke: a key's project's, or
    those a named approver made."""
    if viewer.principal is not None:
        return await repo.list_remembered(project=viewer.principal.project, now=now)
    return [r for r in await repo.list_remembered_by_approver(str(viewer.approver), now=now)]


async def _remember(request: Request, viewer: Viewer, item: Waiting, fields: dict[str, str],
                    decision: str, edited: dict[str, Any] | None) -> RememberSpec:
    approval = item.approval
    try:
        ttl = int(fields.get("remember_ttl", ""))
    except ValueError:
        ttl = 0
    return await remember_spec(
        request.app.state.deps.repo, scope=fields.get("remember_scope", ""), ttl_seconds=ttl,
        command_prefix=None, decision=decision, quorum=quorum_of(approval),
        sub_call=bool((approval.info or {}).get("parent_tool_use_id")),
        session_id=approval.session_id, tool_use_id=approval.tool_use_id, edited_input=edited,
        approver=item.acting_as if viewer.principal is not None else viewer.approver,
    )


@router.post("/inbox/remembered/revoke", response_class=HTMLResponse)
async def inbox_revoke(request: Request) -> Response:
    viewer = await _key_viewer(request)
    if viewer is None:
        return _message(request, 403, "Signed out",
                        "Your inbox session ended; sign in again and retry.")
    return await _revoke(request, viewer)


@router.post("/inbox/p/{token}/remembered/revoke", response_class=HTMLResponse)
async def personal_revoke(request: Request, token: str) -> Response:
    viewer = _link_viewer(request, token)
    if viewer is None:
        return _bad_link(request)
    refused = _link_needs_signin(request, viewer)
    if refused is not None:
        return refused
    return await _revoke(request, viewer)


async def _revoke(request: Request, viewer: Viewer) -> Response:
    checked = await _checked_form(request, viewer, 10)
    if isinstance(checked, Response):
        return checked
    fields = checked
    back = fields.get("back", "")[:1000]
    repo: Repository = request.app.state.deps.repo
    rule_id = fields.get("rule_id", "")[:40]
    mine = {r.rule_id for r in await _remembered_for(repo, viewer, utcnow())}
    if rule_id not in mine:
        return _back(request, viewer, back, "That remembered decision is not yours to revoke "
                     "(or no longer active).", "warn")
    await repo.revoke_remembered(rule_id, by=viewer.label, now=utcnow())
    return _back(request, viewer, back,
                 f"Revoked remembered decision {rule_id}: those calls ask again.", "ok")


def _decide_input(viewer: Viewer, item: Waiting, decision: str, reason: str | None,
                  edited: dict[str, Any] | None,
                  person: oidc_sessions.Person | None = None) -> DecideInput:
    approval = item.approval
    if viewer.principal is None and person is not None:
        # A personal link used by its named approver, signed in (link_decisions: signin).
        who = person.oidc
        return DecideInput(
            request_id=approval.request_id, decision=decision, reason=reason,
            decided_by=viewer.approver, via="inbox", edited_input=edited,
            principal_id=person.principal.principal_id, approver=viewer.approver,
            identity=identity.oidc(who["issuer"], who["subject"], who.get("email"),
                                   link="personal", approver=viewer.approver),
        )
    if viewer.principal is not None:
        key = viewer.principal
        if key.oidc is not None:
            who = identity.oidc(key.oidc["issuer"], key.oidc["subject"], key.oidc.get("email"),
                                approver=item.acting_as)
        else:
            who = identity.key(key.key_id, key.name)
        return DecideInput(
            request_id=approval.request_id, decision=decision, reason=reason,
            decided_by=(item.acting_as or key.name) if key.oidc is not None else key.name,
            via="inbox", edited_input=edited,
            principal_id=key.principal_id, self_approved=item.self_approved,
            approver=item.acting_as, identity=who,
        )
    return DecideInput(
        request_id=approval.request_id, decision=decision, reason=reason,
        decided_by=viewer.approver, via="inbox", edited_input=edited,
        principal_id=f"approver:{viewer.approver}", approver=viewer.approver,
        identity=identity.personal_link(str(viewer.approver)),
    )


async def _visible(request: Request, viewer: Viewer,
                   approval: ApprovalRecord) -> Waiting | None:
    """The request as an inbox item of `viewer`, when it may decide it now."""
    repo: Repository = request.app.state.deps.repo
    settings: Settings = request.app.state.settings
    filters = Filters(session_id=approval.session_id, tool_name=approval.tool_name)
    for item in await waiting_for(repo, settings, viewer, filters, utcnow()):
        if item.approval.request_id == approval.request_id:
            return item
    return None


async def _form_error(request: Request, viewer: Viewer, back: str, request_id: str,
                      error: str, raw: str, reason: str | None) -> HTMLResponse:
    """Bad edits: the inbox again (422), the item's form open with the text kept."""
    clean = dict(parse_qsl(back))
    filters = _filters(viewer, clean.get("project"), clean.get("session_id"),
                       clean.get("tool_name"), clean.get("side_effects"))
    return await _render(request, viewer, filters, status=422, form_error={
        "request_id": request_id, "text": error, "edited_input": raw, "reason": reason or "",
    })


async def _outcome(request: Request, viewer: Viewer, back: str, item: Waiting, decision: str,
                   reason: str | None, raw: str, result: DecideResult) -> Response:
    approval = item.approval
    what = f"{approval.tool_name} ({approval.tool_use_id})"
    metrics.count_decision(decision, outcome(result))
    if result.accepted and result.winner is None:
        return _back(request, viewer, back,
                     f"Your approval of {what} is counted ({len(result.votes)} of "
                     f"{result.quorum}: {', '.join(result.votes)}). It runs when "
                     f"{result.quorum} approvers have approved.", "info")
    if result.accepted and result.winner is not None:
        metrics.observe_approval_latency(
            decision, "inbox",
            (result.winner.decided_at - approval.requested_at).total_seconds())
        after = ("The agent has been told, with your reason." if decision == "deny"
                 else "The call is running now.")
        did = (f"You approved {what} with your edits." if decision == "allow_with_edits"
               else f"You {_WORDS[decision]} {what}.")
        return _back(request, viewer, back, f"{did} {after}", "ok", approval.request_id)
    if result.winner is not None:
        return _back(request, viewer, back, _winner_text(approval, result), "warn")
    refused = answer_refused(result)
    if refused.fix_input:
        return await _form_error(request, viewer, back, approval.request_id, refused.message,
                                 raw, reason)
    repo: Repository = request.app.state.deps.repo
    stored = await repo.get_approval(approval.request_id)
    if stored is not None and stored.decision is not None:
        return _back(request, viewer, back, _winner_text(stored, None), "warn")
    return _back(request, viewer, back,
                 f"{what} is no longer waiting: {result.message or 'it ended'}.", "warn")


# ------------------------------------------------------------ login/logout
@router.get("/inbox/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    nonce, token = csrf.issue(request.app.state.secret, _LOGIN_PURPOSE,
                              request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)))
    response = _page(request, "inbox_login.html", csrf=token, next=_safe_next(next),
                     error=None, **_signin_options(request, _safe_next(next)))
    _set_csrf(response, request, _LOGIN_PURPOSE, nonce)
    return response


def _signin_options(request: Request, next_url: str) -> dict[str, Any]:
    """What the sign-in page offers: the provider's sign-in, the key form, or both."""
    settings: Settings = request.app.state.settings
    return {"oidc_url": routes_oidc.login_url(request, next_url) if settings.oidc_enabled
            else None, "key_form": settings.api_key_signin}


@router.post("/inbox/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    if not request.app.state.settings.api_key_signin:
        return _message(request, 403, "API-key sign-in is off",
                        "Sign in with your identity provider instead.")
    signed = await sign_in(request, purpose=_LOGIN_PURPOSE, role=Role.APPROVER,
                           no_role="This API key has no approver role; the inbox needs one.")
    next_url, key = _safe_next(signed.next), signed.key
    if key is None:
        nonce, token = csrf.issue(request.app.state.secret, _LOGIN_PURPOSE,
                                  request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)))
        response = _page(request, "inbox_login.html", signed.status, csrf=token, next=next_url,
                         error=signed.error, **_signin_options(request, next_url))
        _set_csrf(response, request, _LOGIN_PURPOSE, nonce)
        return response
    redirect = RedirectResponse(_root(request) + next_url, status_code=303)
    redirect.set_cookie(
        COOKIE, _session_serializer(request).dumps({"kid": key.id}), max_age=SESSION_SECONDS,
        httponly=True, samesite="lax", secure=_secure(request), path="/inbox",
    )
    return redirect


@router.post("/inbox/logout")
async def logout(request: Request) -> Response:
    _, ok = await posted_form(request, "inbox-logout")
    if not ok:
        return _message(request, 403, "Sign-out refused",
                        "This sign-out form is stale or came from another site.",
                        "Reload the inbox and sign out from there.")
    redirect = RedirectResponse(f"{_root(request)}/inbox/login", status_code=303)
    redirect.delete_cookie(COOKIE, path="/inbox")
    return redirect
