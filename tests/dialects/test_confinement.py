"""Issue 36 (2) for every agent behind POST /v1/hooks/{agent}: Codex's, Gemini
CLI's and opencode's path tools (read, list, search, glob, patch, LSP) and
shell commands are judged by the same confinement as Claude Code's. A path of
parkgate's own is denied whatever policy says (here everything is auto), and
the denial is a denied call in the audit. Real worker, Temporal dev server,
Postgres."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.claude_code.conftest import until
from tests.claude_code.test_confinement import EVERYTHING_AUTO

AUTO = {**EVERYTHING_AUTO, "per_tool": {}, "rules": []}


@pytest.fixture
async def api(dev_temporal: Client, pg_repo: Repository, tmp_path: Path
              ) -> AsyncIterator[ApiRig]:
    async with api_rig(dev_temporal, pg_repo, tmp_path, policy=AUTO, codex_wait_seconds=10,
                       gemini_wait_seconds=10, opencode_wait_seconds=10) as rig:
        data = rig.rig.settings.data_dir
        data.mkdir(parents=True, exist_ok=True)
        (data / "link-secret").write_text("SECRET-0123\n")
        yield rig


def body(api: ApiRig, agent: str, tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """One pre-tool event of `agent` in a fresh session, as its hook sends it."""
    sid = f"{agent[:2]}-{uuid.uuid4().hex[:10]}"
    common = {"session_id": sid, "cwd": str(api.workspace), "tool_name": tool,
              "tool_input": tool_input}
    cid = f"call_{uuid.uuid4().hex[:10]}"
    if agent == "codex":
        return {**common, "hook_event_name": "PreToolUse", "tool_use_id": cid,
                "turn_id": "turn-1"}
    if agent == "gemini":
        return {**common, "hook_event_name": "BeforeTool"}
    return {**common, "hook_event_name": "tool.execute.before", "call_id": cid}


def verdict(agent: str, answer: dict[str, Any]) -> tuple[str, str]:
    if agent == "codex":
        out = answer.get("hookSpecificOutput") or {}
        return out.get("permissionDecision", "allow"), out.get("permissionDecisionReason", "")
    return answer["decision"], answer.get("reason", "")


def cases(data: Path) -> list[tuple[str, str, dict[str, Any]]]:
    secret = str(data / "link-secret")
    patch = f"*** Begin Patch\n*** Add File: {data}/planted\n+x\n*** End Patch\n"
    return [
        ("codex", "read_file", {"file_path": secret}),
        ("codex", "list_dir", {"dir_path": str(data)}),
        ("codex", "grep_files", {"pattern": "SECRET", "path": str(data)}),
        ("codex", "Bash", {"command": f"cat {secret}"}),
        ("gemini", "read_file", {"file_path": secret}),
        ("gemini", "read_file", {"absolute_path": secret}),
        ("gemini", "read_many_files", {"include": [secret]}),
        ("gemini", "read_many_files", {"include": ["README.md", f"{data}/*"]}),
        ("gemini", "read_many_files", {"paths": [f"../{data.name}/link-secret"]}),
        ("gemini", "read_many_files", {"include": ["{README.md," + secret + "}"]}),
        ("gemini", "read_many_files", {"include": ["{a,b}" * 8]}),  # too many to read: as /
        ("gemini", "list_directory", {"dir_path": str(data)}),
        ("gemini", "glob", {"pattern": "*", "dir_path": str(data)}),
        ("gemini", "grep_search", {"pattern": "SECRET", "dir_path": str(data)}),
        ("gemini", "search_file_content", {"pattern": "SECRET", "path": str(data)}),
        ("gemini", "run_shell_command", {"command": f"cat {secret}"}),
        ("opencode", "read", {"filePath": secret}),
        ("opencode", "list", {"path": str(data)}),
        ("opencode", "glob", {"pattern": "**/*", "path": str(data)}),
        ("opencode", "grep", {"pattern": "SECRET", "path": str(data)}),
        ("opencode", "lsp", {"operation": "hover", "filePath": secret, "line": 1,
                             "character": 1}),
        ("opencode", "apply_patch", {"patchText": patch}),
        ("opencode", "patch", {"patchText": patch}),
        ("opencode", "bash", {"command": f"cat {secret}"}),
    ]


async def test_every_agents_path_tools_are_confined_and_audited(api: ApiRig) -> None:
    data = api.rig.settings.data_dir
    for agent, tool, tool_input in cases(data):
        event = body(api, agent, tool, tool_input)
        r = await api.http.post(f"/v1/hooks/{agent}", json=event)
        assert r.status_code == 200, (agent, tool, r.text)
        said, reason = verdict(agent, r.json())
        assert said == "deny" and "parkgate's data directory" in reason, (agent, tool, r.json())
        assert "may not reach it" in reason, (agent, tool, reason)
        sid = event["session_id"]

        async def denied(sid: str = sid) -> Any:  # the audit query
            r = await api.http.get("/v1/tool-calls", params={"session_id": sid})
            return r.json()["items"]
        rows = await until(denied)
        assert [c["status"] for c in rows] == ["denied"], (agent, tool, rows)
        meaning = await api.repo.verify_meaning(sid)
        assert meaning.ok, [p.describe() for p in meaning.problems]
    assert not (data / "planted").exists()


async def test_the_same_tools_inside_the_workspace_are_left_to_policy(api: ApiRig) -> None:
    (api.workspace / "a.txt").write_text("fine\n")
    for agent, tool, tool_input in [
        ("gemini", "read_many_files", {"include": ["a.txt", "*.md"]}),
        ("gemini", "read_file", {"file_path": "a.txt"}),
        ("opencode", "read", {"filePath": str(api.workspace / "a.txt")}),
        ("opencode", "lsp", {"operation": "hover", "filePath": "a.txt", "line": 1,
                             "character": 1}),
        ("opencode", "apply_patch", {"patchText": "*** Begin Patch\n*** Add File: b.txt\n+x\n"
                                                  "*** End Patch\n"}),
        ("codex", "read_file", {"file_path": "a.txt"}),
    ]:
        r = await api.http.post(f"/v1/hooks/{agent}", json=body(api, agent, tool, tool_input))
        assert verdict(agent, r.json())[0] == "allow", (agent, tool, r.json())
