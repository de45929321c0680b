"""How a decider was identified: the record the audit keeps beside `decided_by`.

A decision names its decider (`decided_by`, `principal_id`); this says how
parkgate knew it was them, in a small JSON object stored on the approval row,
the call row and in `tool.confirmation_resolved`: an OIDC sign-in (issuer,
subject, email as the provider asserted them), an API key (its id), a Slack
member (the id Slack signed), a personal link (the named approver it was
signed for) or a generic link (nobody: the typed name is a claim). Pure: the
HTTP layer builds these, `parkgate audit verify` checks them (`problems`).
"""

from __future__ import annotations

from typing import Any

#: Methods, as recorded in `identity["method"]`.
OIDC = "oidc"
KEY = "key"
SLACK = "slack"
PERSONAL_LINK = "personal_link"
LINK = "link"
METHODS = (OIDC, KEY, SLACK, PERSONAL_LINK, LINK)

#: What each method must name.
_REQUIRED: dict[str, tuple[str, ...]] = {
    OIDC: ("issuer", "subject"),
    KEY: ("key_id",),
    SLACK: ("slack_user", "approver"),
    PERSONAL_LINK: ("approver",),
    LINK: (),
}


def oidc_principal_id(subject: str) -> str:
    """The principal id of a signed-in person (one issuer per deployment)."""
    return f"oidc:{subject}"[:240]


def oidc(issuer: str, subject: str, email: str | None, *, link: str | None = None,
         approver: str | None = None) -> dict[str, Any]:
    """A person the provider signed in; `link`: the page they decided on was
    a personal or generic link, `approver`: the named approver they act as."""
    out: dict[str, Any] = {"method": OIDC, "issuer": issuer, "subject": subject}
    if email:
        out["email"] = email
    if link:
        out["link"] = link
    if approver:
        out["approver"] = approver
    return out


def key(key_id: str, name: str) -> dict[str, Any]:
    return {"method": KEY, "key_id": key_id, "key_name": name}


def slack(user_id: str, approver: str) -> dict[str, Any]:
    return {"method": SLACK, "slack_user": user_id, "approver": approver}


def personal_link(approver: str) -> dict[str, Any]:
    return {"method": PERSONAL_LINK, "approver": approver}


def generic_link() -> dict[str, Any]:
    return {"method": LINK}


def describe(identity: dict[str, Any] | None) -> str:
    """One line for pages and the CLI."""
    if not identity:
        return ""
    method = identity.get("method")
    if method == OIDC:
        who = identity.get("email") or identity.get("subject")
        return f"signed in via {identity.get('issuer')} as {who} (sub {identity.get('subject')})"
    if method == KEY:
        return f"API key {identity.get('key_name')} ({identity.get('key_id')})"
    if method == SLACK:
        return f"Slack member {identity.get('slack_user')}"
    if method == PERSONAL_LINK:
        return f"personal link of {identity.get('approver')}"
    if method == LINK:
        return "generic link (name not verified)"
    return str(method)


def problems(identity: Any, principal_id: Any, decided_by: Any) -> list[str]:
    """What is wrong with a recorded identity (empty: consistent).

    Checks the shape for its method and that it agrees with the principal id
    and the decider's name recorded beside it.
    """
    if identity is None:
        return []
    if not isinstance(identity, dict):
        return ["identity is not an object"]
    method = identity.get("method")
    if method not in _REQUIRED:
        return [f"identity method {method!r} is unknown"]
    found = [f"{method} identity without {field}" for field in _REQUIRED[method]
             if not isinstance(identity.get(field), str) or not identity.get(field)]
    if found:
        return found
    expected: str | None
    if method == OIDC:
        expected = oidc_principal_id(str(identity["subject"]))
    elif method == KEY:
        expected = f"key:{identity['key_id']}"
    elif method in (SLACK, PERSONAL_LINK):
        expected = f"approver:{identity['approver']}"
    else:
        expected = None
    if principal_id != expected:
        found.append(f"{method} identity names principal {expected}, the record says "
                     f"{principal_id}")
    if method == LINK and decided_by is not None:
        found.append("a generic link names no decider, but decided_by is set")
    if method in (SLACK, PERSONAL_LINK) and decided_by != identity["approver"]:
        found.append(f"{method} identity of {identity['approver']} but decided_by is "
                     f"{decided_by}")
    return found
