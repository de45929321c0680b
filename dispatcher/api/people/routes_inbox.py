"""The approver inbox's routes: every call waiting for me, newest first, decided in place.

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

Each action has one implementation for both kinds of viewer (`_viewer` tells
who is asking, or answers for them); the page itself is rendered by
inbox_pages.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from parkgate.api.people import routes_oidc
from parkgate.api.people.decide_forms import parse_edits
from parkgate.api.people.inbox import (
    SIDE_EFFECTS,
    Filters,
    Viewer,
    Waiting,
    decide_input,
    signature,
    visible,
    waiting_for,
)
from parkgate.api.people.inbox_pages import (
    WORDS,
    bad_link,
    message,
    render,
    revocable,
    take_flash,
    to_inbox,
    winner_text,
)
from parkgate.api.people.inbox_signin import key_viewer, signed_out_page
from parkgate.api.shared import csrf, metrics, oidc_sessions
from parkgate.api.shared.approval_links import quorum_of
from parkgate.api.shared.decisions import answer_refused, outcome
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.remember_checks import remember_spec
from parkgate.api.shared.service import CallService
from parkgate.approvals.links import LinkError, verify_inbox_token
from parkgate.durable.payloads import DecideResult
from parkgate.models import utcnow
from parkgate.rules.remember_spec import RememberSpec
from parkgate.settings import Settings
from parkgate.store.repository import Repository

router = APIRouter(include_in_schema=False)

#: How often a key's stream re-checks that the key is still valid.
_RECHECK_SECONDS = 10.0


# ------------------------------------------------------------------ viewers
async def _viewer(request: Request, token: str | None,
                  signed_out: Callable[[], Response]) -> Viewer | Response:
    """Who is asking: the signed-in approver (`token` None; else `signed_out()`
    answers), or the named approver of a personal link (else why not)."""
    if token is None:
        viewer = await key_viewer(request)
        return viewer if viewer is not None else signed_out()
    linked = _link_viewer(request, token)
    if linked is None:
        return bad_link(request)
    refused = _link_needs_signin(request, linked)
    return refused if refused is not None else linked


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
    return message(request, 403, "Not your link",
                   f"This inbox link belongs to {viewer.approver}; you are signed in as "
                   f"{person.principal.name if person else 'nobody'}. A forwarded link "
                   "decides nothing.")


@dataclass(frozen=True)
class _Query:
    """The list's filters as the query string gave them."""

    project: str | None = None
    session_id: str | None = None
    tool_name: str | None = None
    side_effects: str | None = None


def _query(
    project: Annotated[str | None, Query(max_length=100)] = None,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    side_effects: Annotated[str | None, Query(max_length=20)] = None,
) -> _Query:
    return _Query(project, session_id, tool_name, side_effects)


_Filtered = Annotated[_Query, Depends(_query)]


def _filters(viewer: Viewer, query: _Query) -> Filters:
    return Filters(
        project=(query.project or None) if viewer.principal is None
        or viewer.principal.projects is not None else None,
        session_id=query.session_id or None, tool_name=query.tool_name or None,
        side_effects=query.side_effects if query.side_effects in SIDE_EFFECTS else None,
    )


# ------------------------------------------------------------------- pages
@router.get("/inbox", response_class=HTMLResponse)
async def inbox(request: Request, query: _Filtered, partial: bool = False) -> Response:
    return await _inbox(request, None, query, partial)


@router.get("/inbox/p/{token}", response_class=HTMLResponse)
async def personal_inbox(request: Request, token: str, query: _Filtered,
                         partial: bool = False) -> Response:
    return await _inbox(request, token, query, partial)


async def _inbox(request: Request, token: str | None, query: _Query, partial: bool) -> Response:
    def signed_out() -> Response:
        if partial:
            return message(request, 401, "Signed out", "Sign in again to see your inbox.")
        return signed_out_page(request)

    viewer = await _viewer(request, token, signed_out)
    if isinstance(viewer, Response):
        return viewer
    return await render(request, viewer, _filters(viewer, query), partial=partial,
                        flash=None if partial else take_flash(request))


# ------------------------------------------------------------------ stream
@router.get("/inbox/stream")
async def inbox_stream(request: Request, query: _Filtered) -> Response:
    return await _stream_for(request, None, query)


@router.get("/inbox/p/{token}/stream")
async def personal_stream(request: Request, token: str, query: _Filtered) -> Response:
    return await _stream_for(request, token, query)


async def _stream_for(request: Request, token: str | None, query: _Query) -> Response:
    viewer = await _viewer(request, token, lambda: message(
        request, 401, "Signed out", "Sign in again to see your inbox."))
    if isinstance(viewer, Response):
        return viewer
    return _stream(request, viewer, _filters(viewer, query))


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
                if await key_viewer(request) is None:
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


# ------------------------------------------------------------------ decide
_Form = Callable[[Request, str | None], Awaitable[Response]]


def _posted_to(shared: str, personal: str) -> Callable[[_Form], _Form]:
    """Mount a form handler `(request, token)` twice, as every inbox form is:
    POST `shared` for the signed-in inbox (token None) and POST `personal`
    for a personal link's (its token from the path)."""
    def mount(handler: _Form) -> _Form:
        async def signed_in(request: Request) -> Response:
            return await handler(request, None)

        async def linked(request: Request, token: str) -> Response:
            return await handler(request, token)

        router.add_api_route(shared, signed_in, methods=["POST"], response_class=HTMLResponse)
        router.add_api_route(personal, linked, methods=["POST"], response_class=HTMLResponse)
        return handler
    return mount


@_posted_to("/inbox/decide", "/inbox/p/{token}")
async def _decide_for(request: Request, token: str | None) -> Response:
    def signed_out() -> Response:
        if oidc_sessions.signed_in(request) is not None:
            return signed_out_page(request)  # signed in, but no approver role (any more)
        return message(request, 403, "Signed out",
                       "Your inbox session ended; sign in again and retry.")

    viewer = await _viewer(request, token, signed_out)
    if isinstance(viewer, Response):
        return viewer
    return await _decide(request, viewer)


async def _checked_form(
    request: Request, viewer: Viewer, max_fields: int
) -> dict[str, str] | Response:
    """The POSTed form's text fields once its origin and CSRF token check out,
    else the page that says why (400 unreadable, 403 expired)."""
    settings: Settings = request.app.state.settings
    try:
        form = await request.form(max_fields=max_fields, max_files=0)
    except Exception:  # malformed bodies
        return message(request, 400, "Bad request", "The form could not be read.")
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    purpose = viewer.csrf_purpose
    if not csrf.origin_ok(request, settings.public_base_url) or not csrf.check(
        request.app.state.secret, purpose, fields.get("csrf"),
        request.cookies.get(csrf.cookie_name(purpose)),
    ):
        return message(request, 403, "Form expired",
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
    item = (await visible(repo, settings, viewer, approval, utcnow())
            if approval is not None else None)
    if approval is None:
        return to_inbox(request, viewer, back, "That request does not exist.", "error")
    if approval.decision is not None:
        return to_inbox(request, viewer, back, winner_text(approval, None), "warn")
    if item is None:
        # Not (or no longer) decidable by this viewer: expired, call ended,
        # another project, its own submission, not named. Never say which.
        return to_inbox(request, viewer, back,
                        f"{approval.tool_name} ({approval.tool_use_id}) is not waiting for you.",
                        "warn")
    decision = fields.get("decision", "")
    reason = fields.get("reason", "").strip()[:4000] or None
    if decision not in ("allow", "deny", "allow_with_edits"):
        return to_inbox(request, viewer, back, "Choose Approve, Deny or Approve with edits.",
                        "error")
    edited: dict[str, Any] | None = None
    raw = fields.get("edited_input", "")
    if decision == "allow_with_edits":
        parsed = parse_edits(raw, settings.max_input_depth)
        if isinstance(parsed, str):
            return await _form_error(request, viewer, back, request_id, parsed, raw, reason)
        edited = parsed
    remember = None
    if fields.get("remember") == "on":
        try:
            remember = await _remember(request, viewer, item, fields, decision, edited)
        except ApiError as exc:
            return to_inbox(request, viewer, back, f"Not remembered: {exc.message}", "error")
    service: CallService = request.app.state.calls
    decide = decide_input(viewer, item, decision, reason, edited, person)
    if remember is not None:
        decide = decide.model_copy(update={"remember": remember})
    result = await service.decide(approval.session_id, approval.tool_use_id, decide)
    return await _outcome(request, viewer, back, item, decision, reason, raw, result)


async def _form_error(request: Request, viewer: Viewer, back: str, request_id: str,
                      error: str, raw: str, reason: str | None) -> HTMLResponse:
    """Bad edits: the inbox again (422), the item's form open with the text kept."""
    clean = dict(parse_qsl(back))
    query = _Query(clean.get("project"), clean.get("session_id"), clean.get("tool_name"),
                   clean.get("side_effects"))
    filters = _filters(viewer, query)
    return await render(request, viewer, filters, status=422, form_error={
        "request_id": request_id, "text": error, "edited_input": raw, "reason": reason or "",
    })


async def _outcome(request: Request, viewer: Viewer, back: str, item: Waiting, decision: str,
                   reason: str | None, raw: str, result: DecideResult) -> Response:
    approval = item.approval
    what = f"{approval.tool_name} ({approval.tool_use_id})"
    metrics.count_decision(decision, outcome(result))
    if result.accepted and result.winner is None:
        return to_inbox(request, viewer, back,
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
               else f"You {WORDS[decision]} {what}.")
        return to_inbox(request, viewer, back, f"{did} {after}", "ok", approval.request_id)
    if result.winner is not None:
        return to_inbox(request, viewer, back, winner_text(approval, result), "warn")
    refused = answer_refused(result)
    if refused.fix_input:
        return await _form_error(request, viewer, back, approval.request_id, refused.message,
                                 raw, reason)
    repo: Repository = request.app.state.deps.repo
    stored = await repo.get_approval(approval.request_id)
    if stored is not None and stored.decision is not None:
        return to_inbox(request, viewer, back, winner_text(stored, None), "warn")
    return to_inbox(request, viewer, back,
                    f"{what} is no longer waiting: {result.message or 'it ended'}.", "warn")


# ---------------------------------------------------- remembered decisions
@_posted_to("/inbox/remembered/revoke", "/inbox/p/{token}/remembered/revoke")
async def _revoke_for(request: Request, token: str | None) -> Response:
    viewer = await _viewer(request, token, lambda: message(
        request, 403, "Signed out", "Your inbox session ended; sign in again and retry."))
    if isinstance(viewer, Response):
        return viewer
    return await _revoke(request, viewer)


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


async def _revoke(request: Request, viewer: Viewer) -> Response:
    checked = await _checked_form(request, viewer, 10)
    if isinstance(checked, Response):
        return checked
    fields = checked
    back = fields.get("back", "")[:1000]
    repo: Repository = request.app.state.deps.repo
    rule_id = fields.get("rule_id", "")[:40]
    mine = {r.rule_id for r in await revocable(repo, viewer, utcnow())}
    if rule_id not in mine:
        return to_inbox(request, viewer, back, "That remembered decision is not yours to revoke "
                        "(or no longer active).", "warn")
    await repo.revoke_remembered(rule_id, by=viewer.label, now=utcnow())
    return to_inbox(request, viewer, back,
                    f"Revoked remembered decision {rule_id}: those calls ask again.", "ok")
