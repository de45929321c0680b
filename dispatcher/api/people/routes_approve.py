"""Approval links: GET renders (and never changes state), POST decides.

Link unfurlers and mail scanners fetch links, so GET only reads. The POST is
CSRF-protected (see csrf.py) and goes through the workflow's `decide` update,
so the first decision wins whichever way it arrives (link, API, CLI). A
tampered token gets a 403 page, an expired request a 410 page; a decided
request shows who decided what and when.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from parkgate.api.people import routes_oidc
from parkgate.api.people.approve_page import (
    decided_block,
    is_expired,
    page_context,
    person_for,
    state_of,
)
from parkgate.api.people.decide_forms import parse_edits
from parkgate.api.shared import csrf, metrics, oidc_sessions, signin
from parkgate.api.shared.approval_links import (
    named_approvers,
    not_your_project,
    project_of,
)
from parkgate.api.shared.decisions import answer_refused, outcome
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.remember_checks import remember_spec
from parkgate.api.shared.service import CallService
from parkgate.api.shared.views import fmt_dt, page_headers
from parkgate.approvals import identity
from parkgate.approvals.decisions import DecideInput
from parkgate.approvals.links import LinkError, token_approver, token_hash, verify_token
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.models import utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository

router = APIRouter(include_in_schema=False)

#: Pages carrying a token must not leak it (Referer) nor be cached or framed.
_SECURITY_HEADERS = page_headers(
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def _page(request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    templates = request.app.state.templates
    signout: list[str] = []
    if template == "approve.html":  # a signed-in person gets the sign-out button
        ctx.update(signin.signout_context(request, signout))
    response: HTMLResponse = templates.TemplateResponse(
        request, template, {"static_url": request.app.state.static_url, **ctx},
        status_code=status, headers=_SECURITY_HEADERS,
    )
    for nonce in signout:
        signin.set_signout_cookie(response, request, nonce)
    return response


def _message(request: Request, status: int, title: str, text: str, detail: str = "",
             kind: str = "error") -> HTMLResponse:
    return _page(request, "message.html", status, title=title, text=text, detail=detail,
                 kind=kind)


async def _load(request: Request, token: str) -> tuple[ApprovalRecord, str | None] | HTMLResponse:
    """The approval a token names and the named approver it is bound to (None
    for the generic link), or the error page to show instead."""
    secret: str = request.app.state.secret
    try:
        request_id, exp = verify_token(secret, token)
        approver = token_approver(secret, token)
    except LinkError:
        return _message(request, 403, "Invalid link",
                        "This approval link is not valid. It may have been altered or truncated.")
    repo: Repository = request.app.state.deps.repo
    if approver is None:
        approval = await repo.get_approval_by_token_hash(token_hash(token))
    else:
        # A personal link is derived, never stored: it is valid when signed for
        # a named approver of this request and its expiry.
        approval = await repo.get_approval(request_id)
        if approval is not None and (
            approver not in named_approvers(approval)
            or exp != (int(approval.expires_at.timestamp()) if approval.expires_at else None)
        ):
            approval = None
    if approval is None or approval.request_id != request_id:
        return _message(request, 403, "Invalid link",
                        "This approval link does not match any approval request.")
    settings: Settings = request.app.state.settings
    if approver is not None and not settings.approver_decides_in(
        approver, await project_of(repo, approval)
    ):
        # A personal link decides as its approver, and only in their projects.
        return _message(request, 403, "Not your project", not_your_project(approver))
    return approval, approver


def _expired_page(request: Request, approval: ApprovalRecord) -> HTMLResponse:
    return _message(
        request, 410, "This request has expired",
        f"No decision arrived for {approval.tool_name} ({approval.tool_use_id}) before "
        f"{fmt_dt(approval.expires_at)}; the call did not run.",
        detail=f"Requested {fmt_dt(approval.requested_at)} in session {approval.session_id}.",
    )


def _form_page(
    request: Request,
    ctx: dict[str, Any],
    approval: ApprovalRecord,
    *,
    status: int = 200,
    form: dict[str, str] | None = None,
    error: str | None = None,
) -> HTMLResponse:
    secret: str = request.app.state.secret
    purpose = f"approve:{approval.request_id}"
    nonce, token = csrf.issue(secret, purpose, request.cookies.get(csrf.cookie_name(purpose)))
    state, state_text = state_of(approval, ctx["call_status"], utcnow())
    approver = ctx["as_approver"]
    # A request with named approvers is decided only through their own links;
    # each link counts once.
    personal_only = bool(ctx["named"]) and approver is None
    used = approver is not None and approver in ctx["votes"]
    response = _page(
        request, "approve.html", status,
        state=state, state_text=state_text, decided=None,
        can_decide=state == "pending" and not personal_only and not used,
        personal_only=personal_only, used=used, csrf=token, form_error=error,
        form=form or {"approver": "", "reason": "", "edited_input": ""},
        **{k: v for k, v in ctx.items() if k != "call_status"},
    )
    settings: Settings = request.app.state.settings
    response.set_cookie(
        csrf.cookie_name(f"approve:{approval.request_id}"), nonce,
        max_age=csrf.MAX_AGE_SECONDS, httponly=True, samesite="strict",
        secure=settings.public_base_url.startswith("https://"), path="/approve",
    )
    return response


def _signin_required(request: Request, token: str, link_approver: str | None) -> HTMLResponse:
    """`link_decisions: signin`: the link alone decides nothing."""
    who = f"{link_approver}, signed in" if link_approver else \
        "an approver of this project, signed in"
    person = oidc_sessions.signed_in(request)
    if person is None:
        return routes_oidc.sign_in_page(
            request, 401, "Sign in to decide",
            f"On this server an approval link decides only together with the sign-in of "
            f"the person it is for ({who}). Nothing was decided.", f"/approve/{token}")
    return _message(request, 403, "Not yours to decide",
                    f"You are signed in as {person.principal.name}; this link decides only "
                    f"for {who}. A forwarded link decides nothing.")


@router.get("/approve/{token}", response_class=HTMLResponse)
async def approval_page(token: str, request: Request) -> Response:
    loaded = await _load(request, token)
    if isinstance(loaded, Response):
        return loaded
    approval, approver = loaded
    ctx = await page_context(request, approval, approver)
    if approval.decision is None and ctx["call_status"] not in (None, CallStatus.PARKED):
        # The call moved on after the request was read: its decision is stored
        # by now (it is written before the call runs or ends); show who decided.
        repo: Repository = request.app.state.deps.repo
        approval = await repo.get_approval(approval.request_id) or approval
    now = utcnow()
    if is_expired(approval, now):
        return _expired_page(request, approval)
    if approval.decision is not None:
        state, state_text = state_of(approval, ctx["call_status"], now)
        return _page(request, "approve.html", 200, state=state, state_text=state_text,
                     decided=decided_block(approval), can_decide=False,
                     **{k: v for k, v in ctx.items() if k != "call_status"})
    return _form_page(request, ctx, approval)


@router.post("/approve/{token}", response_class=HTMLResponse)
async def approval_decide(token: str, request: Request) -> Response:
    loaded = await _load(request, token)
    if isinstance(loaded, Response):
        return loaded
    approval, link_approver = loaded
    settings: Settings = request.app.state.settings
    if is_expired(approval, utcnow()):
        return _expired_page(request, approval)
    purpose = f"approve:{approval.request_id}"
    try:
        form = await request.form(max_fields=20, max_files=0)
    except Exception:  # malformed multipart/urlencoded bodies
        return _message(request, 400, "Bad request", "The form could not be read.")
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not csrf.origin_ok(request, settings.public_base_url) or not csrf.check(
        request.app.state.secret, purpose, fields.get("csrf"),
        request.cookies.get(csrf.cookie_name(purpose)),
    ):
        return _message(request, 403, "Form expired",
                        "This form could not be verified. Reload the approval page and try again.")
    ctx = await page_context(request, approval, link_approver)
    if ctx["named"] and link_approver is None:
        return _message(request, 403, "Personal links only",
                        "This request is decided by its named approvers ("
                        + ", ".join(ctx["named"]) + "), each through their own link.")
    if link_approver is not None and link_approver in ctx["votes"]:
        return _message(request, 409, "Already approved",
                        f"{link_approver} has already approved this call "
                        f"({len(ctx['votes'])} of {ctx['quorum']} approvals).", kind="info")
    person = await person_for(request, approval, link_approver)
    if settings.link_decisions == "signin" and person is None:
        return _signin_required(request, token, link_approver)
    if person is not None and not oidc_sessions.fresh_enough(request, person):
        # Claims asserted too long ago: renew them (groups re-read), then decide.
        return routes_oidc.renew_page(request, f"/approve/{token}")
    decision = fields.get("decision", "")
    approver = link_approver or fields.get("approver", "").strip()[:200]
    if person is not None and not approver:
        approver = person.principal.name
    reason = fields.get("reason", "").strip()[:4000] or None
    edited_raw = fields.get("edited_input", "")
    kept = {"approver": approver, "reason": reason or "",
            "edited_input": edited_raw if decision == "allow_with_edits" else ""}
    if decision not in ("allow", "deny", "allow_with_edits"):
        return _form_page(request, ctx, approval, status=422, form=kept,
                          error="Choose Approve, Deny or Approve with edits.")
    if not approver:
        return _form_page(request, ctx, approval, status=422, form=kept,
                          error="Enter your name so the decision can be audited.")
    edited: dict[str, Any] | None = None
    if decision == "allow_with_edits":
        parsed = parse_edits(edited_raw, settings.max_input_depth)
        if isinstance(parsed, str):
            return _form_page(request, ctx, approval, status=422, form=kept, error=parsed)
        edited = parsed
    service: CallService = request.app.state.calls
    remember = None
    if fields.get("remember") == "on":
        if not ctx["can_remember"]:
            return _form_page(request, ctx, approval, status=422, form=kept,
                              error="Only a named approver's own link can remember a decision "
                                    "(and not for quorum requests).")
        try:
            ttl = int(fields.get("remember_ttl", ""))
        except ValueError:
            ttl = 0
        try:
            remember = await remember_spec(
                request.app.state.deps.repo, scope=fields.get("remember_scope", ""),
                ttl_seconds=ttl, command_prefix=None, decision=decision,
                quorum=ctx["quorum"], sub_call=False, session_id=approval.session_id,
                tool_use_id=approval.tool_use_id, edited_input=edited, approver=link_approver,
            )
        except ApiError as exc:
            return _form_page(request, ctx, approval, status=422, form=kept, error=exc.message)
    if person is not None:
        # Signed in as the person the link is for (or an approver who may decide
        # a generic link's request): the provider's identity is the decider.
        asserted = person.oidc
        who = DecideInput(
            request_id=approval.request_id, decision=decision, reason=reason,
            decided_by=link_approver or person.principal.name, via="link",
            edited_input=edited, principal_id=person.principal.principal_id,
            approver=link_approver, remember=remember,
            identity=identity.oidc(asserted["issuer"], asserted["subject"],
                                   asserted.get("email"), approver=link_approver,
                                   link="personal" if link_approver else "generic"))
    elif link_approver is not None:
        # A personal link authenticates its named approver.
        who = DecideInput(request_id=approval.request_id, decision=decision, reason=reason,
                          decided_by=link_approver, via="link", edited_input=edited,
                          principal_id=f"approver:{link_approver}", approver=link_approver,
                          remember=remember, identity=identity.personal_link(link_approver))
    else:
        # A generic link proves only that its holder has the link: the typed
        # name is recorded as a claim, never as the decider.
        who = DecideInput(request_id=approval.request_id, decision=decision, reason=reason,
                          decided_by=None, via="link", edited_input=edited,
                          claimed_name=approver, identity=identity.generic_link())
    result = await service.decide(approval.session_id, approval.tool_use_id, who)
    repo: Repository = request.app.state.deps.repo
    metrics.count_decision(decision, outcome(result))
    if result.accepted and result.winner is None:
        return _message(
            request, 202, "Approval recorded",
            f"Your approval is counted ({len(result.votes)} of {result.quorum}: "
            f"{', '.join(result.votes)}). The call runs when {result.quorum} approvers "
            "have approved; any deny stops it.", kind="info",
        )
    if result.accepted and result.winner is not None:
        metrics.observe_approval_latency(
            decision, "link", (result.winner.decided_at - approval.requested_at).total_seconds()
        )
        shown = approval.model_copy(update={
            "decision": result.winner.decision, "decided_by": result.winner.decided_by,
            "via": "link", "reason": result.winner.reason,
            "decided_at": result.winner.decided_at,
            "claimed_name": result.winner.claimed_name,
        })
        after = "The call is running now." if decision != "deny" else \
            "The agent has been told, with your reason."
        block = decided_block(shown, you=True)
        assert block is not None
        block["text"] += " " + after
        state, state_text = state_of(shown, None, utcnow())
        ctx = await page_context(request, shown, link_approver,
                                 edited if decision == "allow_with_edits" else None)
        return _page(request, "approve.html", 200, state=state, state_text=state_text,
                     decided=block, can_decide=False,
                     **{k: v for k, v in ctx.items() if k != "call_status"})
    refused = answer_refused(result)
    if result.winner is not None:
        shown = approval.model_copy(update={
            "decision": result.winner.decision, "decided_by": result.winner.decided_by,
            "via": result.winner.via, "reason": result.winner.reason,
            "decided_at": result.winner.decided_at,
            "claimed_name": result.winner.claimed_name,
        })
        block = decided_block(shown)
        assert block is not None
        block["title"] = f"Already decided: {block['title']}"
        state, state_text = state_of(shown, None, utcnow())
        ctx = await page_context(request, shown, link_approver)
        return _page(request, "approve.html", 409, state=state, state_text=state_text,
                     decided=block, can_decide=False,
                     **{k: v for k, v in ctx.items() if k != "call_status"})
    if refused.fix_input:  # the decision as sent cannot apply: the form again
        return _form_page(request, ctx, approval, status=refused.status, form=kept,
                          error=refused.message)
    stored = await repo.get_approval(approval.request_id) or approval
    state, state_text = state_of(stored, ctx["call_status"], utcnow())
    return _page(request, "approve.html", refused.status, state=state, state_text=state_text,
                 decided=decided_block(stored) or {
                     "decision": "expired", "title": "No longer waiting",
                     "text": result.message or "This call is no longer waiting for a decision.",
                     "reason": None},
                 can_decide=False, **{k: v for k, v in ctx.items() if k != "call_status"})
