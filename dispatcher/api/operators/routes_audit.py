"""Audit pages: calls newest first with filters, and one call's timeline.

Behind a login with an API key (a signed, HttpOnly session cookie that names
the key; a revoked key ends the session), or off entirely with
`audit_pages_enabled: false` (every /audit URL is then 404).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import select

from parkgate.api.shared import csrf, oidc_sessions, signin
from parkgate.api.shared.approval_links import link_for_principal, links_for_admin, submitter_of
from parkgate.api.shared.budget_view import budget_lines
from parkgate.api.shared.deps import principal_of
from parkgate.api.shared.full_output import OutputFormat, output_response
from parkgate.api.shared.key_sessions import posted_form, sign_in, signed_in_key
from parkgate.api.shared.views import page_headers, pretty_json
from parkgate.approvals import identity
from parkgate.approvals.access import Principal, Role
from parkgate.calls.records import CallStatus
from parkgate.settings import Settings
from parkgate.store.errors import InvalidCursorError
from parkgate.store.prompt_store import SessionPrompt
from parkgate.store.repository import CALLS, Repository
from parkgate.store.results import ApiKeyRecord, CallFilters, CallRecord

router = APIRouter(include_in_schema=False)

COOKIE = "pg_audit"
#: Where the session cookie is sent: the audit pages and the codec endpoints.
COOKIE_PATHS = ("/audit", "/codec")
_SALT = "parkgate.audit-session.v1"
SESSION_SECONDS = 12 * 3600
_HEADERS = page_headers(
    "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'",
    referrer="same-origin",
)
_LOGIN_PURPOSE = "audit-login"
_LOGOUT_PURPOSE = "audit-logout"


def _page(request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    response: HTMLResponse = request.app.state.templates.TemplateResponse(
        request, template,
        {"static_url": request.app.state.static_url, "root": signin.root(request), **ctx},
        status_code=status, headers=_HEADERS,
    )
    return response


def _not_found(request: Request) -> HTMLResponse:
    return _page(request, "message.html", 404, title="Not found",
                 text="Audit pages are not enabled on this server.", detail="", kind="error")


async def _auditor(request: Request) -> Principal | Response:
    """The signed-in auditor of an audit page, else its answer: 404 while the
    pages are off, the sign-in (or no-role) page when nobody may audit."""
    if not request.app.state.settings.audit_pages_enabled:
        return _not_found(request)
    key = await current_auditor(request)
    return key if key is not None else _signed_out(request)


def _serializer(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_SALT)


async def current_key(request: Request) -> ApiKeyRecord | None:
    """The API key of a signed-in audit session (cookie), or None."""
    return await signed_in_key(
        request, cookie=COOKIE, salt=_SALT, max_age=SESSION_SECONDS, role=Role.AUDITOR
    )


async def current_auditor(request: Request) -> Principal | None:
    """The auditor of a signed-in page session: an API key, else a person
    signed in through OIDC whose groups grant the auditor role."""
    key = await current_key(request)
    if key is not None:
        return principal_of(key)
    person = oidc_sessions.person_with(request, Role.AUDITOR)
    return None if person is None else person.principal


def _signed_out(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    person = oidc_sessions.signed_in(request)
    if person is not None:
        return _page(request, "message.html", 403, title="No auditor role",
                     text=f"You are signed in as {person.principal.name}, but your groups "
                     "grant no auditor role.", detail="", kind="error")
    if settings.oidc_enabled and not settings.api_key_signin:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(signin.login_url(request, target), status_code=303)
    return _login_redirect(request)


def _project_filter(principal: Principal) -> str | None:
    """The project the audit list shows: a key's own; a person's only one, or
    every project for "*" (several: the first; see docs/APPROVERS.md)."""
    if principal.projects is None:
        return principal.project
    return None if "*" in principal.projects else principal.project


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(
        f"{signin.root(request)}/audit/login?{urlencode({'next': target})}", status_code=303
    )


def _set_csrf(response: Response, request: Request, purpose: str, nonce: str) -> None:
    settings: Settings = request.app.state.settings
    response.set_cookie(
        csrf.cookie_name(purpose), nonce, max_age=csrf.MAX_AGE_SECONDS, httponly=True,
        samesite="strict", secure=settings.public_base_url.startswith("https://"),
        path="/audit",
    )


def _safe_next(value: str | None) -> str:
    """Only same-site paths under /audit (no open redirect)."""
    if value and value.startswith("/audit") and not value.startswith("//"):
        return value
    return "/audit"


@router.get("/audit/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    if not request.app.state.settings.audit_pages_enabled:
        return _not_found(request)
    nonce, token = csrf.issue(
        request.app.state.secret, _LOGIN_PURPOSE,
        request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)),
    )
    response = _page(request, "audit_login.html", csrf=token, next=_safe_next(next), error=None,
                     **signin.signin_options(request, _safe_next(next)))
    _set_csrf(response, request, _LOGIN_PURPOSE, nonce)
    return response



@router.post("/audit/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.audit_pages_enabled:
        return _not_found(request)
    if not settings.api_key_signin:
        return _page(request, "message.html", 403, title="API-key sign-in is off",
                     text="Sign in with your identity provider instead.", detail="",
                     kind="error")
    signed = await sign_in(
        request, purpose=_LOGIN_PURPOSE, role=Role.AUDITOR,
        no_role="This API key has no auditor role; the audit pages need one.",
    )
    next_url, key = _safe_next(signed.next), signed.key
    if key is None:
        nonce, token = csrf.issue(
            request.app.state.secret, _LOGIN_PURPOSE,
            request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)),
        )
        response = _page(
            request, "audit_login.html", signed.status, csrf=token, next=next_url,
            error=signed.error, **signin.signin_options(request, next_url),
        )
        _set_csrf(response, request, _LOGIN_PURPOSE, nonce)
        return response
    redirect = RedirectResponse(signin.root(request) + next_url, status_code=303)
    session = _serializer(request).dumps({"kid": key.id})
    # The same session also authenticates the Temporal UI's calls to /codec/*.
    for path in COOKIE_PATHS:
        redirect.set_cookie(
            COOKIE, session, max_age=SESSION_SECONDS, httponly=True, samesite="lax",
            secure=settings.public_base_url.startswith("https://"), path=path,
        )
    return redirect


@router.post("/audit/logout")
async def logout(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.audit_pages_enabled:
        return _not_found(request)
    # A cross-site form must not sign the operator out: same CSRF check as login.
    _, ok = await posted_form(request, _LOGOUT_PURPOSE)
    if not ok:
        return _page(request, "message.html", 403, title="Sign-out refused",
                     text="This sign-out form is stale or came from another site.",
                     detail="Reload the audit page and sign out from there.", kind="error")
    redirect = RedirectResponse(f"{signin.root(request)}/audit/login", status_code=303)
    for path in COOKIE_PATHS:
        redirect.delete_cookie(COOKIE, path=path)
    return redirect


@router.get("/audit", response_class=HTMLResponse)
async def audit_list(
    request: Request,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    decided_by: Annotated[str | None, Query(max_length=200)] = None,
    after: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    key = await _auditor(request)
    if isinstance(key, Response):
        return key
    statuses = [s.value for s in CallStatus]
    chosen = CallStatus(status) if status in statuses else None
    filters = CallFilters(
        session_id=session_id or None, tool_name=tool_name or None, status=chosen,
        decided_by=decided_by or None, project=_project_filter(key),
    )
    repo: Repository = request.app.state.deps.repo
    try:
        page = await repo.list_calls(filters, limit=limit, cursor=after or None)
    except InvalidCursorError:
        return _page(request, "message.html", 422, title="Bad page link",
                     text="That page cursor is not valid.", detail="", kind="error")
    params = {k: v for k, v in {
        "session_id": session_id, "tool_name": tool_name, "status": status,
        "decided_by": decided_by,
    }.items() if v}
    base = f"{signin.root(request)}/audit"
    next_url = (f"{base}?{urlencode({**params, 'after': page.next_cursor})}"
                if page.next_cursor else None)
    first_url = f"{base}?{urlencode(params)}" if after else None
    nonce, token = csrf.issue(
        request.app.state.secret, _LOGOUT_PURPOSE,
        request.cookies.get(csrf.cookie_name(_LOGOUT_PURPOSE)),
    )
    signout: list[str] = []
    response = _page(
        request, "audit_list.html", items=page.items, statuses=statuses,
        f={"session_id": session_id, "tool_name": tool_name, "status": status,
           "decided_by": decided_by},
        next_url=next_url, first_url=first_url, key_name=key.name, csrf=token,
        **(signin.signout_context(request, signout) if key.oidc is not None else {}),
    )
    _set_csrf(response, request, _LOGOUT_PURPOSE, nonce)
    for nonce_signout in signout:
        signin.set_signout_cookie(response, request, nonce_signout)
    return response


@router.get("/audit/calls/{call_id}", response_class=HTMLResponse)
async def audit_call(request: Request, call_id: str) -> Response:
    key = await _auditor(request)
    if isinstance(key, Response):
        return key
    record = await _audit_record(request, key, call_id)
    if record is None:
        return _page(request, "message.html", 404, title="Not found",
                     text=f"No tool call with id {call_id}.", detail="", kind="error")
    repo: Repository = request.app.state.deps.repo
    timeline = await repo.timeline(record.session_id, record.tool_use_id)
    turn_prompt = await _turn_prompt(repo, record)
    result_text = record.result.text if record.result is not None else None
    approval_url, approver_links = await _links(request, key, record)
    signout: list[str] = []
    response = _page(
        request, "audit_call.html", c=record, timeline=timeline,
        input_pretty=pretty_json(record.input or {}), result_text=result_text,
        approval_url=approval_url, approver_links=approver_links,
        output_url=f"/audit/calls/{call_id}/output" if record.full_output is not None else None,
        identified=identity.describe(record.identity), turn_prompt=turn_prompt,
        budgets=await budget_lines(repo, record.session_id, record.tool_use_id),
        **signin.signout_context(request, signout),
    )
    for nonce_signout in signout:
        signin.set_signout_cookie(response, request, nonce_signout)
    return response


@router.get("/audit/calls/{call_id}/output")
async def audit_call_output(
    request: Request, call_id: str, format: OutputFormat = "text"
) -> Response:
    """The whole stored output of a call (the model saw it truncated)."""
    key = await _auditor(request)
    if isinstance(key, Response):
        return key
    record = await _audit_record(request, key, call_id)
    out = output_response(record, format) if record is not None else None
    if out is None:
        return _page(request, "message.html", 404, title="Not found",
                     text=f"No stored output for tool call {call_id}.", detail="", kind="error")
    return out


async def _audit_record(request: Request, key: Principal, call_id: str) -> CallRecord | None:
    """The call with numeric id `call_id` when it is in the key's project."""
    repo: Repository = request.app.state.deps.repo
    record = None
    if call_id.isdigit() and len(call_id) < 19:
        async with repo.engine.connect() as conn:
            row = (await conn.execute(
                select(CALLS.c.session_id, CALLS.c.tool_use_id).where(CALLS.c.id == int(call_id))
            )).first()
        if row is not None:
            session = await repo.get_session(row[0])
            if session is not None and key.sees(session.project):
                record = await repo.get_call(row[0], row[1])
    return record


async def _turn_prompt(repo: Repository, record: CallRecord) -> SessionPrompt | None:
    """The prompt and permission mode of the call's turn, as the session's own
    project recorded them (Claude Code's UserPromptSubmit / PreToolUse)."""
    session = await repo.get_session(record.session_id)
    if session is None or not record.turn_id:
        return None
    return await repo.get_prompt(record.session_id, record.turn_id, session.project)


async def _links(
    request: Request, principal: Principal, record: CallRecord
) -> tuple[str | None, dict[str, str] | None]:
    """A parked call's link for a key that may decide it, and named approvers'
    personal links for an admin: how the link reaches approvers, never the agent."""
    if record.status != CallStatus.PARKED or not record.request_id:
        return None, None
    repo: Repository = request.app.state.deps.repo
    approval = await repo.get_approval(record.request_id)
    if approval is None or approval.decision is not None:
        return None, None
    settings: Settings = request.app.state.settings
    secret: str = request.app.state.secret
    url = link_for_principal(settings, secret, principal, approval,
                             await submitter_of(repo, approval))
    return url, links_for_admin(settings, secret, principal, approval)
