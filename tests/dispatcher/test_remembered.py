"""Remembered rules (pure): chain-safe command prefixes, scopes, expiry, who may
stand behind a rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.remembered import (
    RememberError,
    check_remember,
    matching_rule,
    prefix_matches,
    rule_for,
    rule_id_for,
)

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def make(tool_input: dict[str, Any], scope: str = "session", prefix: str | None = None,
         **kw: Any) -> Any:
    spec = RememberSpec.model_validate({"scope": scope, "ttl_seconds": 600,
                                        "command_prefix": prefix})
    fields: dict[str, Any] = {"request_id": "req1", "project": "default", "session_id": "s1",
                              "workspace_path": "/w", "tool_name": "shell",
                              "decided_at": T0, "created_by": "alice",
                              "principal_id": "key:a", "approver": None, **kw}
    return rule_for(spec, tool_input=tool_input, **fields)


@pytest.mark.parametrize("line, ok", [
    ("git status", True),
    ("git status -s", True),
    ("git status && git status --short", True),
    ("git status; rm -rf /", False),
    ("git status && rm -rf /", False),
    ("git status | sh", False),
    ("git status $(rm -rf /)", False),
    ("git status `rm -rf /`", False),
    ("git status > /etc/passwd", False),
    ("git stash", False),
    ("'git status'", False),
    ("", False),
])
def test_prefix_is_chain_safe(line: str, ok: bool) -> None:
    assert prefix_matches(line, "git status") is ok


def test_rule_matches_scope_tool_input_and_time() -> None:
    rule = make({"command": "git status"})
    assert rule.match == "prefix" and rule.rule_id == rule_id_for("req1")
    assert rule.expires_at == T0 + timedelta(seconds=600)
    base: dict[str, Any] = {"session_id": "s1", "workspace_path": "/w", "tool_name": "shell",
                            "tool_input": {"command": "git status -s"}, "now": T0}
    assert matching_rule([rule], **base) is rule
    assert matching_rule([rule], **{**base, "session_id": "s2"}) is None
    assert matching_rule([rule], **{**base, "tool_name": "bash"}) is None
    assert matching_rule([rule], **{**base, "now": T0 + timedelta(seconds=600)}) is None
    assert matching_rule([rule.model_copy(update={"revoked_at": T0})], **base) is None
    # Named approvers: only a rule its maker could decide; never the submitter's own.
    assert matching_rule([rule], **base, approvers=["bob"]) is None
    assert matching_rule([rule], **base, submitter_key="key:a") is None
    ws = make({"command": "git status"}, scope="workspace")
    assert matching_rule([ws], **{**base, "session_id": "s2"}) is ws
    assert matching_rule([ws], **{**base, "workspace_path": "/other"}) is None


def test_input_rules_need_the_same_input() -> None:
    rule = make({"path": "a.txt", "content": "x"}, tool_name="write_file")
    base: dict[str, Any] = {"session_id": "s1", "workspace_path": "/w",
                            "tool_name": "write_file", "now": T0}
    assert rule.match == "input"
    assert matching_rule([rule], **base, tool_input={"content": "x", "path": "a.txt"}) is rule
    assert matching_rule([rule], **base, tool_input={"path": "a.txt", "content": "y"}) is None


def test_refusals() -> None:
    with pytest.raises(ValidationError):
        RememberSpec(scope="session", ttl_seconds=59)
    with pytest.raises(ValidationError):
        RememberSpec(scope="session", ttl_seconds=31 * 24 * 3600)
    with pytest.raises(RememberError):
        make({"command": "ls; whoami"})
    with pytest.raises(RememberError):
        make({"command": "git status"}, prefix="git stash")
    assert check_remember(RememberSpec(scope="session", ttl_seconds=60, command_prefix="x"),
                          {"path": "a"}) is not None
    assert check_remember(RememberSpec(scope="session", ttl_seconds=60,
                                       command_prefix="git"), {"command": "git log"}) is None
