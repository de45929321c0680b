"""CLI commands against a real SQLite history: config check, tools list, db upgrade,
keys create/list/revoke, calls list/show, approve/deny lookups."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.settings import Settings
from parkgate.store import Repository

runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.stdout


def _fails(args: list[str], code: int) -> str:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == code, f"{args}: {result.output}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("parkgate: error: "), result.stderr
    return lines[0]


def test_config_check_prints_the_effective_policy(cli_env: dict[str, str], tmp_path: Path) -> None:
    trusted = tmp_path / "work" / "trusted"
    config = tmp_path / "server.yaml"
    config.write_text(
        "api_port: 9999\n"
        "link_secret: do-not-print-me\n"
        "tool_confirmation:\n"
        "  default: {WRITE: prompt, EXECUTE: deny}\n"
        "  per_tool: {list_dir: auto, patch_file: deny}\n"
        f"  trusted_workspaces: [{trusted}]\n"
        "  trusted_workspace_overrides: {EXECUTE: prompt}\n"
        "  rules:\n"
        "    - {tool: shell, command: git status, mode: auto}\n"
    )
    out = _ok(["--config", str(config), "config", "check"])
    assert "configuration OK" in out
    assert "tool sandbox: " in out  # on, unavailable or off: always said
    assert str(config) in out
    assert "9999" in out
    assert "do-not-print-me" not in out
    assert "Confirmation policy" in out
    assert "rules[0]" in out and "git status" in out
    rows = {
        (line.split("│")[1].strip(), line.split("│")[3].strip()): line.split("│")[4].strip()
        for line in out.splitlines()
        if line.count("│") >= 6
        and line.split("│")[1].strip()
        in ("write_file", "shell", "patch_file", "read_file", "list_dir")
    }
    assert rows[("write_file", "untrusted")] == "prompt"
    assert rows[("write_file", "trusted")] == "auto"
    assert rows[("shell", "untrusted")] == "deny"
    assert rows[("shell", "trusted")] == "deny"  # deny from any layer wins
    assert rows[("patch_file", "trusted")] == "deny"
    assert rows[("read_file", "untrusted")] == "auto"


def test_config_check_rejects_missing_tls_files(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKGATE_TEMPORAL_TLS_CERT_PATH", "/nonexistent/cert.pem")
    line = _fails(["config", "check"], 2)
    assert "temporal_tls_cert_path: file not found" in line


def test_tools_list(cli_env: dict[str, str]) -> None:
    out = _ok(["tools", "list"])
    for name, cls in (
        ("read_file", "READ"),
        ("write_file", "WRITE"),
        ("patch_file", "WRITE"),
        ("list_dir", "READ"),
        ("shell", "EXECUTE"),
    ):
        line = next(line for line in out.splitlines() if f" {name} " in line)
        assert cls in line
    as_json = _ok(["tools", "list", "--json"])
    assert '"input_schema"' in as_json


def test_keys_round_trip_on_sqlite(cli_env: dict[str, str]) -> None:
    assert "No such" not in _ok(["db", "upgrade"])
    created = runner.invoke(app, ["keys", "create", "--name", "agent-1"])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[-1].strip()
    assert len(key) >= 24

    async def verify() -> bool:
        settings = Settings()
        async with await Repository.connect(settings.effective_database_url) as repo:
            return await repo.verify_api_key(key) is not None

    assert asyncio.run(verify()) is True
    listed = _ok(["keys", "list"])
    assert "agent-1" in listed and "active" in listed
    assert key not in listed  # only the prefix is ever shown
    assert "No such" not in _fails(["keys", "create", "--name", "agent-1"], 2)
    assert "agent-1" in _ok(["keys", "revoke", "agent-1"])
    assert "revoked" in _ok(["keys", "list"])
    assert asyncio.run(verify()) is False
    _fails(["keys", "revoke", "agent-1"], 2)


def test_calls_on_an_empty_history(cli_env: dict[str, str]) -> None:
    _ok(["db", "upgrade"])
    assert "Tool calls (0)" in _ok(["calls", "list", "--status", "parked"])
    assert "no call" in _fails(["calls", "show", "s1", "nope"], 1)
    assert "status must be one of" in _fails(["calls", "list", "--status", "sleeping"], 2)
    assert "--after" in _fails(["calls", "list", "--after", "garbage"], 2)
    assert "no approval request" in _fails(["approve", "nope"], 1)
    assert "Missing option" in _fails(["deny", "nope"], 2)


def test_calls_open_longer_than(cli_env: dict[str, str]) -> None:
    """Calls that have not ended, created more than N seconds ago (issue 37)."""
    from parkgate.calls.records import CallStatus, CallUpdate

    _ok(["db", "upgrade"])

    async def store() -> None:
        settings = Settings()
        async with await Repository.connect(settings.effective_database_url) as repo:
            for tool_use_id, status in (("tu_open", CallStatus.PARKED),
                                        ("tu_done", CallStatus.SUCCEEDED)):
                await repo.update_call(CallUpdate(
                    session_id="s-open", tool_use_id=tool_use_id, turn_id="t",
                    tool_name="write_file", status=status))

    asyncio.run(store())
    listed = _ok(["calls", "list", "--open-longer-than", "0"])
    assert "tu_open" in listed and "tu_done" not in listed
    assert "Tool calls (0)" in _ok(["calls", "list", "--open-longer-than", "3600"])
    assert "tu_open" in _ok(["calls", "list", "--open-longer-than", "0", "--status", "parked"])
    assert "have not ended" in _fails(
        ["calls", "list", "--open-longer-than", "0", "--status", "succeeded"], 2)


def test_an_unmigrated_database_is_one_line(cli_env: dict[str, str]) -> None:
    data = Path(cli_env["PARKGATE_DATA_DIR"])
    data.mkdir()
    (data / "parkgate.db").touch()
    line = _fails(["calls", "list"], 1)
    assert "db upgrade" in line


def test_config_check_never_prints_mail_or_slack_secrets(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(
        "smtp_host: mail.example.org\n"
        "smtp_username: parkgate\n"
        "smtp_password: smtp-do-not-print\n"
        "slack_bot_token: xoxb-do-not-print\n"
        "slack_signing_secret: signing-do-not-print\n"
        "slack_channel: C0APPROVALS\n"
        "approvers: {alice: {email: alice@example.org, slack_user_id: U0ALICE}}\n"
    )
    out = _ok(["--config", str(config), "config", "check"])
    assert "configuration OK" in out
    assert "mail.example.org" in out and "C0APPROVALS" in out
    for secret in ("smtp-do-not-print", "xoxb-do-not-print", "signing-do-not-print"):
        assert secret not in out


def test_remembered_list_and_revoke(cli_env: dict[str, str]) -> None:
    from datetime import timedelta

    from parkgate.models import utcnow
    from parkgate.rules.remember_spec import RememberSpec
    from parkgate.rules.remembered import rule_for

    _ok(["db", "upgrade"])
    assert "Remembered decisions (0)" in _ok(["remembered", "list"])
    rule = rule_for(
        RememberSpec(scope="session", ttl_seconds=3600), request_id="req1", project="default",
        session_id="s1", workspace_path="/w", tool_name="shell",
        tool_input={"command": "git status"}, decided_at=utcnow() - timedelta(seconds=5),
        created_by="alice", principal_id="key:k1", approver=None,
    )

    async def save() -> None:
        repo = await Repository.connect(Settings().effective_database_url)
        try:
            await repo.save_remembered(rule)
        finally:
            await repo.close()

    asyncio.run(save())
    out = _ok(["remembered", "list"])
    assert "Remembered decisions (1)" in out and rule.rule_id in out
    assert "prefix: git status" in out and "alice" in out and "active" in out
    assert f"revoked {rule.rule_id}" in _ok(["remembered", "revoke", rule.rule_id])
    assert "Remembered decisions (0)" in _ok(["remembered", "list"])
    assert "revoked" in _ok(["remembered", "list", "--all"])
    assert "no remembered rule" in _fails(["remembered", "revoke", "nope"], 1)


def test_approvers_inbox_link(cli_env: dict[str, str], tmp_path: Path) -> None:
    from parkgate.approvals.links import verify_inbox_token

    config = tmp_path / "people.yaml"
    config.write_text("public_base_url: https://gate.example.org\n"
                      "approvers: {alice: {email: alice@example.org}}\n")
    out = _ok(["--config", str(config), "approvers", "inbox-link", "alice"])
    link = out.split()[0]
    assert link.startswith("https://gate.example.org/inbox/p/")
    secret = (Path(cli_env["PARKGATE_DATA_DIR"]) / "link-secret").read_text().strip()
    assert verify_inbox_token(secret, link.rsplit("/", 1)[1], 86400) == "alice"
    bad = runner.invoke(app, ["--config", str(config), "approvers", "inbox-link", "mallory"])
    assert bad.exit_code == 1 and "unknown approver 'mallory'" in bad.output
