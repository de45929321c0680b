"""What the /v1 resources share: path parameters, the call service, the session
lookup with its project check, and the checks of submitted input."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Path as PathParam
from fastapi import Query, Request

from parkgate.api.shared.approval_links import (
    link_for_principal,
    links_for_admin,
    named_approvers,
    quorum_of,
    submitter_of,
)
from parkgate.api.shared.errors import ApiError, not_found
from parkgate.api.shared.schemas import ID_RE, CallResource
from parkgate.api.shared.service import CallService
from parkgate.approvals.access import Principal
from parkgate.calls.records import LIVE_STATUSES, CallStatus
from parkgate.models import ToolUseBlock
from parkgate.schema import MAX_INPUT_DEPTH, depth_error
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import SessionRecord

SessionId = Annotated[str, PathParam(pattern=ID_RE, description="Session id.")]
TurnId = Annotated[str, PathParam(pattern=ID_RE, description="Turn id.")]
ToolUseId = Annotated[str, PathParam(pattern=ID_RE, description="The tool_use block's id.")]
RequestId = Annotated[str, PathParam(pattern=ID_RE, description="Approval request id.")]
Wait = Annotated[
    float,
    Query(ge=0, le=60, description="Long-poll up to this many seconds for the result (0-60)."),
]

#: Event seqs are 63-bit integers in both databases.
MAX_SEQ = 2**63 - 1

LIVE = list(LIVE_STATUSES)


def call_service(request: Request) -> CallService:
    service: CallService = request.app.state.calls
    return service


async def session_of(repo: Repository, session_id: str, principal: Principal) -> SessionRecord:
    """The session, or 404 when it does not exist or belongs to another project."""
    record = await repo.get_session(session_id)
    if record is None or record.project != principal.project:
        raise not_found(f"session {session_id!r}")
    return record


async def for_principal(
    request: Request, principal: Principal, resource: CallResource
) -> CallResource:
    """The resource as this key may see it: the approval link only for a key
    that may decide, named approvers' personal links only for admins."""
    if resource.request_id is None:
        return resource
    repo: Repository = request.app.state.deps.repo
    approval = await repo.get_approval(resource.request_id)
    if approval is None:
        hidden = resource.links.model_copy(update={"approval": None})
        return resource.model_copy(update={"approval_url": None, "links": hidden})
    settings: Settings = request.app.state.settings
    secret: str = request.app.state.secret
    url = None
    if resource.approval_url is not None:
        url = link_for_principal(settings, secret, principal, approval,
                                 await submitter_of(repo, approval))
    update: dict[str, Any] = {
        "approval_url": url,
        "links": resource.links.model_copy(update={"approval": url}),
    }
    if resource.status == CallStatus.PARKED:
        update["approver_links"] = links_for_admin(settings, secret, principal, approval)
    if named_approvers(approval):
        update["approvers"] = named_approvers(approval)
        update["quorum"] = quorum_of(approval)
        if resource.votes is None and approval.votes:
            update["votes"] = approval.votes
    return resource.model_copy(update=update)


def reject_too_deep(value: Any, max_depth: int, root: str) -> None:
    """422 `input_too_deep` for a tool input (submitted or edited) nested too deeply:
    such an input could not travel the durable path."""
    too_deep = depth_error(value, max_depth, root=root)
    if too_deep is not None:
        path = too_deep.split(":", 1)[0]
        raise ApiError(
            422,
            "input_too_deep",
            too_deep,
            [{"loc": path.split("."), "msg": f"nested deeper than {max_depth} levels",
              "type": "too_deep", "max_depth": max_depth}],
        )


def check_tool_use_id(call: ToolUseBlock, max_depth: int = MAX_INPUT_DEPTH) -> None:
    reject_too_deep(call.input, max_depth, "body.input")
    reject_unencodable(call.name, ["body", "name"])
    reject_unencodable(call.input, ["body", "input"])
    if not re.fullmatch(ID_RE, call.id):
        raise ApiError(
            422,
            "invalid_request",
            "tool_use id may contain only letters, digits and _ . : -",
            [{"loc": ["body", "id"], "msg": "invalid characters", "type": "value_error"}],
        )


def reject_unencodable(value: Any, loc: list[str]) -> None:
    """422 for text that is valid JSON but not valid Unicode (lone surrogates such
    as "\\ud800"): it cannot be hashed, stored or sent to a worker."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(
                422,
                "invalid_text",
                f"{'.'.join(loc)}: text is not valid Unicode (lone surrogate at "
                f"position {exc.start})",
                [{"loc": loc, "msg": "lone surrogate", "type": "unicode_error"}],
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            reject_unencodable(key, [*loc, "<key>"])
            reject_unencodable(item, [*loc, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            reject_unencodable(item, [*loc, str(index)])
