"""Cedar policies beside the YAML policy (issue 39), on the real Cedar engine.

Each test classifies real calls through the production pipeline with policies
written to files, so parsing, annotations, the request model and the combining
with the YAML policy are all exercised as `parkgate serve` runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parkgate import Deny, Execute, NeedsApproval, Session, ToolUseBlock
from parkgate.pipeline import Pipeline
from parkgate.rules.cedar import CedarError, CedarPolicies, split_policies
from parkgate.rules.policy import ConfirmationPolicy
from parkgate.runtime.cedar_policy import check_policies, policy_schema
from parkgate.runtime.worker import build_registry
from parkgate.settings import Settings

APPROVERS = {"alice": {}, "bob": {}, "carol": {}}
GROUPS = {"oncall": ["alice", "bob"]}


def pipeline(tmp_path: Path, cedar: str, yaml: dict[str, Any] | None = None) -> Pipeline:
    path = tmp_path / "policy.cedar"
    path.write_text(cedar)
    policies = CedarPolicies.load([path], approvers=APPROVERS, groups=GROUPS)
    policy = ConfirmationPolicy.from_mapping(yaml or {}).with_approvers(APPROVERS, GROUPS)
    return Pipeline(build_registry(), policy, cedar=policies)


def session(tmp_path: Path, turn: str = "t1") -> Session:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return Session(session_id="s1", turn_id=turn, workspace_path=str(ws))


async def classify(p: Pipeline, tmp_path: Path, name: str, tool_input: dict[str, Any],
                   **who: str) -> Execute | Deny | NeedsApproval:
    call = ToolUseBlock(id="c1", name=name, input=tool_input)
    return await p.classify(call, session(tmp_path), **who)  # type: ignore[return-value]


def rule_of(verdict: Execute | Deny | NeedsApproval) -> str | None:
    return verdict.rule if isinstance(verdict, Deny) else verdict.prepared.rule


KUBECTL = """
@id("k8s-permit")
@mode("auto")
permit(principal, action == Parkgate::Action::"call", resource == Parkgate::Tool::"shell")
when { context.programs.contains("kubectl") };

@id("no-delete")
forbid(principal, action, resource == Parkgate::Tool::"shell")
when { context.input has command && context.input.command like "*delete*" };
"""


async def test_forbid_beats_permit_and_names_the_policy(tmp_path: Path) -> None:
    p = pipeline(tmp_path, KUBECTL, {"default": {"EXECUTE": "auto"}})
    verdict = await classify(p, tmp_path, "shell", {"command": "kubectl delete pod x"})
    assert isinstance(verdict, Deny)
    assert verdict.rule == "cedar:no-delete"
    assert "Cedar policy cedar:no-delete refuses tool 'shell'" in verdict.result.text
    allowed = await classify(p, tmp_path, "shell", {"command": "kubectl get pods"})
    # As strict as the YAML default: both are named.
    assert isinstance(allowed, Execute)
    assert rule_of(allowed) == "default.EXECUTE=auto, cedar:k8s-permit"


async def test_annotations_map_to_modes(tmp_path: Path) -> None:
    cedar = """
    @id("reads") @mode("auto")
    permit(principal, action, resource) when { resource.side_effects == "read" };
    @id("writes")
    permit(principal, action, resource == Parkgate::Tool::"write_file");
    @id("patches") @mode("prompt_once")
    permit(principal, action, resource == Parkgate::Tool::"patch_file");
    @id("oncall") @mode("prompt") @approvers("group:oncall, carol") @quorum("2")
    permit(principal, action, resource == Parkgate::Tool::"shell");
    """
    # The YAML policy would let everything through: Cedar alone decides here.
    yaml = {"default": {c: "auto" for c in ("NONE", "READ", "WRITE", "EXECUTE", "NETWORK")}}
    p = pipeline(tmp_path, cedar, yaml)
    read = await classify(p, tmp_path, "read_file", {"path": "a.txt"})
    assert isinstance(read, Execute)
    write = await classify(p, tmp_path, "write_file", {"path": "a.txt", "content": "x"})
    assert isinstance(write, NeedsApproval)  # no @mode: prompt
    assert (write.info.mode, write.info.rule) == ("prompt", "cedar:writes")
    patch = await classify(p, tmp_path, "patch_file", {"path": "a", "old": "a", "new": "b"})
    assert isinstance(patch, NeedsApproval) and patch.info.mode == "prompt_once"
    shell = await classify(p, tmp_path, "shell", {"command": "make deploy"})
    assert isinstance(shell, NeedsApproval)
    assert shell.info.approvers == ["alice", "bob", "carol"] and shell.info.quorum == 2
    assert shell.info.rule == "cedar:oncall"


async def test_strictest_wins_across_cedar_and_yaml(tmp_path: Path) -> None:
    cedar = """
    @id("shell-auto") @mode("auto")
    permit(principal, action, resource == Parkgate::Tool::"shell");
    @id("write-prompt")
    permit(principal, action, resource == Parkgate::Tool::"write_file");
    """
    yaml = {"default": {"WRITE": "auto", "EXECUTE": "prompt"},
            "rules": [{"tool": "shell", "command_pattern": "rm .*", "mode": "deny"}]}
    p = pipeline(tmp_path, cedar, yaml)
    # YAML prompt beats a Cedar auto: a permit never loosens the YAML policy.
    shell = await classify(p, tmp_path, "shell", {"command": "make"})
    assert isinstance(shell, NeedsApproval) and shell.info.rule == "default.EXECUTE=prompt"
    # A YAML deny beats a Cedar permit.
    rm = await classify(p, tmp_path, "shell", {"command": "rm -rf x"})
    assert isinstance(rm, Deny) and rm.rule is not None and rm.rule.startswith("deny:rules[0]")
    # A Cedar prompt beats YAML auto.
    write = await classify(p, tmp_path, "write_file", {"path": "a", "content": "x"})
    assert isinstance(write, NeedsApproval) and write.info.rule == "cedar:write-prompt"
    # No permit matches list_dir: the YAML policy decides alone.
    listing = await classify(p, tmp_path, "list_dir", {"path": "."})
    assert isinstance(listing, Execute) and rule_of(listing) == "default.READ=auto"


@pytest.mark.parametrize("command", [
    "kubectl get pods",
    "/usr/local/bin/kubectl get pods",
    "'kubectl' get pods",
    'k"ube"ctl get pods',
    "env KUBECONFIG=/tmp/k kubectl get pods",
    "FOO=1 kubectl get pods",
    "nice -n 5 kubectl get pods",
    "timeout 10 kubectl get pods",
    "ls && kubectl get pods",
    "echo $(kubectl get pods)",
    "sh -c 'kubectl get pods'",
])
async def test_programs_see_through_the_spellings_shell_rules_do(
        tmp_path: Path, command: str) -> None:
    cedar = """
    @id("no-kubectl")
    forbid(principal, action, resource) when { context.programs.contains("kubectl") };
    """
    yaml_rule = {"rules": [{"tool": "shell", "command_pattern": "kubectl .*", "mode": "deny"}]}
    cedar_only = pipeline(tmp_path, cedar, {"default": {"EXECUTE": "auto"}})
    verdict = await classify(cedar_only, tmp_path, "shell", {"command": command})
    assert isinstance(verdict, Deny) and verdict.rule == "cedar:no-kubectl"
    yaml_only = Pipeline(build_registry(), ConfirmationPolicy.from_mapping(yaml_rule))
    verdict = await classify(yaml_only, tmp_path, "shell", {"command": command})
    assert isinstance(verdict, Deny)  # the YAML shell rule reads it the same way
    other = await classify(cedar_only, tmp_path, "shell", {"command": "echo kubectl"})
    assert isinstance(other, Execute)


async def test_principal_project_and_context(tmp_path: Path) -> None:
    cedar = """
    @id("prod-writes") @approvers("alice")
    permit(principal in Parkgate::Project::"prod", action, resource)
    when { resource.side_effects == "write" && resource.hosted && resource.agent == "api" };
    @id("no-ci-at-night")
    forbid(principal == Parkgate::Agent::"ci", action, resource)
    when { context.hour < 0 || context.project == "frozen" };
    """
    yaml = {"default": {"WRITE": "auto"}}
    p = pipeline(tmp_path, cedar, yaml)
    args = {"path": "a.txt", "content": "x"}
    prod = await classify(p, tmp_path, "write_file", args, key_name="deployer", project="prod")
    assert isinstance(prod, NeedsApproval) and prod.info.approvers == ["alice"]
    dev = await classify(p, tmp_path, "write_file", args, key_name="deployer", project="dev")
    assert isinstance(dev, Execute)
    frozen = await classify(p, tmp_path, "write_file", args, key_name="ci", project="frozen")
    assert isinstance(frozen, Deny) and frozen.rule == "cedar:no-ci-at-night"
    other = await classify(p, tmp_path, "write_file", args, key_name="dev", project="frozen")
    assert isinstance(other, Execute)


def test_request_paths_and_inside_workspace(tmp_path: Path) -> None:
    p = pipeline(tmp_path, KUBECTL)
    s = session(tmp_path)
    registry = p.registry
    hosted = registry.get("read_file")
    assert hosted is not None
    call = ToolUseBlock(id="c", name="read_file", input={"path": "sub/a.txt"})
    request = p.cedar_request(call, s, hosted, {"path": "sub/a.txt"}, "k", "p")
    root = Path(s.workspace_path).resolve()
    assert request.paths == {str(root / "sub" / "a.txt")} and request.inside_workspace
    assert request.agent == "api"
    from parkgate.dialects.claude_code import client_tool
    from parkgate.models import SideEffects

    claude = client_tool("Read", SideEffects.READ).definition()
    outside = ToolUseBlock(id="c", name="Read", input={"file_path": "/etc/hosts"})
    cc = Session(session_id="s1", turn_id="claude-code", workspace_path=s.workspace_path)
    request = p.cedar_request(outside, cc, claude, {}, "k", "p")
    assert request.paths == {str(Path("/etc/hosts").resolve())}
    assert not request.inside_workspace and request.agent == "claude-code"
    # Each hook dialect's calls name their agent; a client call of the API is "client".
    shell = client_tool("Bash", SideEffects.EXECUTE).definition()
    run = ToolUseBlock(id="c", name="Bash", input={"command": "ls"})
    for turn, agent in (("codex", "codex"), ("gemini", "gemini"), ("t1", "client")):
        agent_session = Session(session_id="s1", turn_id=turn, workspace_path=s.workspace_path)
        assert p.cedar_request(run, agent_session, shell, {}, "k", "p").agent == agent


async def test_a_forbid_that_cannot_be_evaluated_denies(tmp_path: Path) -> None:
    # `context.input.path` is missing on a shell call: the forbid errors, and fails closed.
    cedar = """
    @id("secrets")
    forbid(principal, action, resource) when { context.input.path like "secrets/*" };
    """
    p = pipeline(tmp_path, cedar, {"default": {"EXECUTE": "auto"}})
    verdict = await classify(p, tmp_path, "shell", {"command": "ls"})
    assert isinstance(verdict, Deny)
    assert verdict.rule == "cedar:secrets (could not be evaluated on this call)"


def test_split_policies_lines_skip_comments_and_strings() -> None:
    text = '// a; comment\n\n@id("a;b")\npermit(principal, action, resource);\n' \
           '  forbid(principal, action, resource)\n  when { "x;y" == "z" };\n'
    assert [line for line, _ in split_policies(text)] == [3, 5]


@pytest.mark.parametrize(("text", "message"), [
    ("permit(principal, action, resource);\n\npermit(principal, action, resource) when { x",
     "policy.cedar:3: "),
    ('@mode("deny") permit(principal, action, resource);', "policy.cedar:1: @mode('deny')"),
    ('@approvers("dave") permit(principal, action, resource);', "unknown approver 'dave'"),
    ('@approvers("group:ops") permit(principal, action, resource);', "unknown group 'ops'"),
    ('@approvers("alice") @quorum("2") permit(principal, action, resource);', "@quorum(2)"),
    ('@id("x") permit(principal, action, resource);\n@id("x") forbid(principal, action, '
     'resource);', "policy.cedar:2: @id('x') is already used at"),
])
def test_a_policy_that_does_not_load_names_file_and_line(
        tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.cedar"
    path.write_text(text)
    with pytest.raises(CedarError) as caught:
        CedarPolicies.load([path], approvers=APPROVERS, groups=GROUPS)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_schema_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.cedar"
    path.write_text(
        '@id("ok")\npermit(principal, action, resource == Parkgate::Tool::"shell")\n'
        'when { context.programs.contains("kubectl") };\n'
        '\n@id("typo")\nforbid(principal, action,\n  resource == Parkgate::Tool::"shel");\n'
        '@id("attr")\nforbid(principal, action, resource)\nwhen {\n'
        '  context.progams.contains("rm") };\n'
        '@id("has")\nforbid(principal, action, resource)\n  when { context.input has comand };\n'
        '@id("type")\nforbid(principal, action, resource) when { context.hour == "3" };\n'
    )
    policies = CedarPolicies.load([path])
    registry = build_registry()
    problems = check_policies(policies, registry, Settings())
    assert len(problems) == 4, problems
    assert f"{path}:7: [typo] unknown tool 'shel'" in problems
    assert any(p.startswith(f"{path}:11: [attr] attribute `progams`") for p in problems)
    assert any(p.startswith(f"{path}:14: [has] no tool has the input field `comand`")
               for p in problems)
    assert any(p.startswith(f"{path}:15: [type] ") and "Long" in p for p in problems)
    schema = policy_schema(registry)
    assert '"command"?: String' in schema and "entity Agent in [Project];" in schema


def test_the_docs_examples_check(tmp_path: Path) -> None:
    """Every ```cedar block of docs/POLICY.md loads and checks against the schema."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "POLICY.md").read_text()
    blocks = re.findall(r"```cedar\n(.*?)```", doc, re.S)
    assert len(blocks) >= 3
    paths = []
    for index, block in enumerate(blocks):
        path = tmp_path / f"example{index}.cedar"
        path.write_text(block)
        paths.append(path)
    groups = {"oncall": ["alice", "bob", "carol"], "finance": ["alice"]}
    policies = CedarPolicies.load(paths, approvers=APPROVERS, groups=groups)
    settings = Settings(budgets={"cloud-spend": {"limit": 100, "window": "1d"}})
    assert check_policies(policies, build_registry(), settings) == []
