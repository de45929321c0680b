"""Issue 28, items 2 and 3, as a hostile agent runs them through the real
durable path (API, Temporal dev server, worker, SQLite history).

- A remembered `uname -a` and a directory literally named `uname\\r-a\\r`:
  `uname\\r-a\\r/../../usr/bin/python3 -c ...` must not run under the rule.
- A quorum-of-2 rule on `kubectl .*` and a deny rule on `rm .*` hold for
  every spelling of those programs, and for `atomic_edit_checked`'s check.

Each case asserts that nothing ran without a human, and that the audit names
only a rule the policy has (never a remembered rule or a default it slipped to).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_named_approvers import PEOPLE, bearer, parked_for_admin
from tests.api.test_remembered import approve, one_rule, outcome, park, wait_final

KUBECTL_RULE = "rules[0] (shell command_pattern 'kubectl .*' -> prompt)"
RM_RULE = "deny:rules[1] (shell command_pattern 'rm .*' -> deny)"
POLICY: dict[str, Any] = {"rules": [
    {"tool": "shell", "command_pattern": "kubectl .*", "mode": "prompt",
     "approvers": ["group:oncall"], "quorum": 2},
    {"tool": "shell", "command_pattern": "rm .*", "mode": "deny"},
]}


async def nothing_ran(api: ApiRig, sid: str, call_id: str) -> Any:
    """The call's row and events: no tool.called, no decider, no remembered rule."""
    row = await api.repo.get_call(sid, call_id)
    assert row is not None
    events = await api.repo.call_events(sid, call_id)
    assert not any(e.type in ("tool.called", "tool.completed") for e in events), events
    assert row.decided_by is None and row.principal_id is None, row
    assert not (row.rule or "").startswith("remembered:"), row.rule
    for event in events:
        assert not str(event.data.get("rule") or "").startswith("remembered:"), event
    return row


async def test_remembered_uname_never_runs_python_through_a_carriage_return_directory(
    api: ApiRig,
) -> None:
    sid = await api.register()
    (api.workspace / "uname\r-a\r").mkdir()
    first = await park(api, sid, "shell", {"command": "uname -a"})
    assert (await approve(api, sid, first, {"scope": "session", "ttl_seconds": 600})
            ).status_code == 200
    assert (await wait_final(api, sid, first["tool_use_id"]))["status"] == "succeeded"
    rule = await one_rule(api)
    assert (rule["match"], rule["command_prefix"]) == ("prefix", "uname -a")
    # The rule does what it was made for ...
    again = await outcome(api, sid, "shell", {"command": "uname  -a"})
    assert again["status"] == "succeeded" and again["rule"] == rule["rule"], again

    # ... and nothing else: /bin/sh would run python3 through the directory.
    payload = "open('pwned', 'w').write('ran without a human')"
    sneaky = "uname\r-a\r/" + "../" * 30 + f'usr/bin/python3 -c "{payload}"'
    got = await outcome(api, sid, "shell", {"command": sneaky})
    assert got["status"] == "failed", got
    text = "".join(b.get("text", "") for b in got["result"]["content"])
    assert "control character U+000D (carriage return)" in text, text
    row = await nothing_ran(api, sid, got["tool_use_id"])
    assert row.rule == "schema"
    # The same line through the checked edit's `check` field: refused as well.
    checked = await outcome(api, sid, "atomic_edit_checked", {
        "path": "f.txt", "old": "a", "new": "b", "check": sneaky})
    assert checked["status"] == "failed", checked
    await nothing_ran(api, sid, checked["tool_use_id"])
    assert not (api.workspace / "pwned").exists()


async def test_spellings_of_kubectl_need_the_quorum_and_of_rm_are_denied(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=POLICY, **PEOPLE) as api:
        admin, _ = await api.repo.create_api_key("admin-key", roles=["admin"])
        sid = await api.register()
        victim = api.workspace / "victim"
        victim.mkdir()
        (victim / "keep.txt").write_text("still here")
        (api.workspace / "f.txt").write_text("a\n")

        spellings = ["/usr/bin/kubectl get pods", "env kubectl get pods",
                     '"kubectl" get pods', "k\\ubectl get pods", "command kubectl get pods",
                     "KUBECONFIG=k.yaml kubectl get pods", "ls && kubectl delete ns prod"]
        for n, command in enumerate(spellings):
            cid = f"toolu_kube{n}"
            await api.submit(sid, "shell", {"command": command}, call_id=cid)
            parked = await parked_for_admin(api, sid, cid, admin)
            assert (parked["quorum"], parked["approvers"], parked["rule"]) == (
                2, ["alice", "bob", "carol"], KUBECTL_RULE), (command, parked)
            await nothing_ran(api, sid, cid)
        # The approval page names the rule that decided and shows the path.
        view = await parked_for_admin(api, sid, "toolu_kube0", admin)
        path = view["approver_links"]["alice"].removeprefix(api.base_url)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            page = await browser.get(path)
        assert page.status_code == 200, page.text
        text = html.unescape(page.text)
        assert KUBECTL_RULE in text
        assert "runs `/usr/bin/kubectl` (rules see it as `kubectl`)" in text

        for command in ["/bin/rm -rf victim", "env rm -rf victim", "'rm' -rf victim",
                        "git status; \\rm -rf victim"]:
            got = await outcome(api, sid, "shell", {"command": command})
            assert got["status"] in ("denied", "failed"), (command, got)
            assert got["rule"] == RM_RULE, (command, got)
            await nothing_ran(api, sid, got["tool_use_id"])

        # atomic_edit_checked's check is judged by the shell rules.
        edit = {"path": "f.txt", "old": "a", "new": "b"}
        got = await outcome(api, sid, "atomic_edit_checked",
                            {**edit, "check": "/bin/rm -rf victim"})
        assert got["rule"] == f"{RM_RULE} on check", got
        await nothing_ran(api, sid, got["tool_use_id"])
        await api.submit(sid, "atomic_edit_checked", {**edit, "check": "env kubectl apply -f x"},
                         call_id="toolu_edit_kube")
        parked = await parked_for_admin(api, sid, "toolu_edit_kube", admin)
        assert (parked["quorum"], parked["rule"]) == (2, f"{KUBECTL_RULE} on check"), parked
        await nothing_ran(api, sid, "toolu_edit_kube")

        assert (victim / "keep.txt").read_text() == "still here"
        assert (api.workspace / "f.txt").read_text() == "a\n"
        # The agent's own key never sees a way to decide these.
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_kube0",
                                   headers=bearer(api.key))).json()
        assert view["approval_url"] is None and view["approver_links"] is None
