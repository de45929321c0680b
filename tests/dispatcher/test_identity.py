"""How a decider was identified: what `audit verify` accepts and reports, and
how a person's groups become roles (parkgate.approvals.identity, oidc_group_roles)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parkgate.approvals import identity
from parkgate.settings import Settings


def test_consistent_identities_have_no_problems() -> None:
    cases = [
        (identity.oidc("https://idp", "sub-1", "a@x"), "oidc:sub-1", "a@x"),
        (identity.key("k1", "ci"), "key:k1", "ci"),
        (identity.slack("U1", "alice"), "approver:alice", "alice"),
        (identity.personal_link("alice"), "approver:alice", "alice"),
        (identity.generic_link(), None, None),
        (None, "key:whatever", "anyone"),  # recorded before identities existed
    ]
    for who, principal, decided_by in cases:
        assert identity.problems(who, principal, decided_by) == [], who


def test_inconsistent_identities_are_reported() -> None:
    assert identity.problems({"method": "oidc", "issuer": "https://idp"}, "oidc:x", "x") == [
        "oidc identity without subject"]
    assert identity.problems(identity.oidc("https://idp", "sub-1", None), "oidc:sub-2",
                             "x") == ["oidc identity names principal oidc:sub-1, the record "
                                      "says oidc:sub-2"]
    assert identity.problems(identity.personal_link("alice"), "approver:alice", "bob") == [
        "personal_link identity of alice but decided_by is bob"]
    assert identity.problems(identity.generic_link(), None, "mallory") == [
        "a generic link names no decider, but decided_by is set"]
    assert identity.problems({"method": "telepathy"}, None, None) == [
        "identity method 'telepathy' is unknown"]
    assert identity.problems("oidc", None, None) == ["identity is not an object"]


def test_groups_grant_human_roles_only() -> None:
    with pytest.raises(ValidationError, match="a group grants approver, auditor or admin"):
        Settings(oidc_group_roles={"bots": {"roles": ["agent"]}})
    settings = Settings(
        oidc_issuer="https://idp", oidc_client_id="parkgate",
        oidc_group_roles={"oncall": {"roles": ["approver"], "projects": ["pay", "infra"]},
                          "audit": {"roles": ["auditor"], "projects": ["*"]}},
        approvers={"alice": {"email": "alice@example.com"}, "bob": {"oidc_subject": "b-1"}},
    )
    assert settings.oidc_redirect_uri == "http://127.0.0.1:8420/auth/oidc/callback"
    assert settings.approver_for_oidc("x", "ALICE@example.com") == "alice"
    assert settings.approver_for_oidc("b-1", None) == "bob"
    assert settings.approver_for_oidc("x", None) is None


def test_a_persons_principal_follows_their_groups() -> None:
    from parkgate.api.shared.oidc_sessions import principal_for, session_data

    settings = Settings(
        oidc_issuer="https://idp", oidc_client_id="parkgate",
        oidc_group_roles={"oncall": {"roles": ["approver"], "projects": ["pay", "infra"]},
                          "audit": {"roles": ["auditor"], "projects": ["*"]}},
        approvers={"alice": {"email": "alice@example.com"}},
    )
    claims = {"iss": "https://idp", "sub": "a-1", "email": "alice@example.com",
              "groups": ["oncall", "audit", "unrelated"]}
    person = principal_for(settings, session_data(settings, claims))
    assert person.roles == ["approver", "auditor"] and person.projects == ["pay", "infra", "*"]
    assert person.name == "alice@example.com" and person.approver == "alice"
    assert person.principal_id == "oidc:a-1" and person.sees("anything")
    unverified = principal_for(settings, session_data(
        settings, claims | {"email_verified": False, "groups": "oncall"}))
    assert unverified.approver is None and unverified.roles == ["approver"]
    assert unverified.sees("pay") and not unverified.sees("other")
    by_sub = principal_for(settings.model_copy(update={"oidc_identity_claim": "sub"}),
                           session_data(settings, claims | {"groups": []}))
    assert by_sub.name == "a-1" and by_sub.roles == []


def test_sign_in_settings_that_cannot_work_are_refused() -> None:
    for bad, why in [
        ({"oidc_issuer": "https://idp"}, "go together"),
        ({"oidc_issuer": "idp.example.com", "oidc_client_id": "p"}, "not an http"),
        ({"oidc_issuer": "https://idp", "oidc_client_id": "p", "oidc_scopes": ["email"]},
         "must include openid"),
        ({"link_decisions": "signin"}, "needs OIDC sign-in"),
        ({"api_key_signin": False}, "nobody could sign in"),
    ]:
        with pytest.raises(ValidationError, match=why):
            Settings(**bad)
