"""A decision's `remember`, checked the same way by every decider.

The confirmations API, the approval page and the inbox each accept an allow
with `remember`; this is the one reading of it into a RememberSpec, so all three
refuse the same input with the same words. routes_remembered lists and revokes
the rules it creates.
"""

from __future__ import annotations

from parkgate.api.shared.errors import ApiError
from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.remembered import check_remember
from parkgate.store.repository import Repository


async def remember_spec(
    repo: Repository, *, scope: str, ttl_seconds: int, command_prefix: str | None,
    decision: str, quorum: int, sub_call: bool, session_id: str, tool_use_id: str,
    edited_input: dict[str, object] | None, approver: str | None,
) -> RememberSpec:
    """The RememberSpec of a decision, or a 422 saying why it cannot be remembered.

    Only allows are remembered; quorum requests are refused (one approver
    cannot stand for the several the rule asks for).
    """
    if decision == "deny":
        raise ApiError(422, "invalid_remember", "remember is only for allow decisions")
    if sub_call:
        raise ApiError(422, "invalid_remember",
                       "remember is not available for a composed tool's sub-calls")
    if quorum > 1:
        raise ApiError(422, "invalid_remember",
                       "remember is not available for requests that need a quorum of approvers")
    try:
        spec = RememberSpec.model_validate({"scope": scope, "ttl_seconds": ttl_seconds,
                                            "command_prefix": command_prefix,
                                            "approver": approver})
    except ValueError as exc:
        raise ApiError(422, "invalid_remember", f"remember: {exc}") from None
    tool_input = edited_input
    if tool_input is None:
        call = await repo.get_call(session_id, tool_use_id)
        tool_input = call.input if call is not None and call.input is not None else {}
    problem = check_remember(spec, dict(tool_input))
    if problem is not None:
        raise ApiError(422, "invalid_remember", problem)
    return spec
