"""The deployment's Cedar schema and its policy files, loaded and checked once.

The schema is generated from what this deployment runs (the registry's tools,
Claude Code's tools, the side-effect classes), so a policy that names a tool,
an attribute or a type the deployment does not have is an error before any
call meets it: `parkgate policy check`, and `parkgate serve` and every worker
refuse to start on one.
"""

from __future__ import annotations

from parkgate.dialects.claude_code import BUILTIN_TOOLS
from parkgate.models import ToolDefinition
from parkgate.registry import ToolRegistry
from parkgate.rules.cedar import CedarError, CedarPolicies, deployment_schema, input_fields
from parkgate.settings import Settings

#: The input fields of Claude Code's tools (its hook declares them as any
#: object), so policies on `Bash`'s command or `Edit`'s file_path check.
CLAUDE_CODE_FIELDS: dict[str, str] = {
    "command": "string", "description": "string", "timeout": "integer",
    "run_in_background": "boolean", "file_path": "string", "notebook_path": "string",
    "content": "string", "old_string": "string", "new_string": "string",
    "replace_all": "boolean", "path": "string", "pattern": "string", "glob": "string",
    "url": "string", "prompt": "string", "query": "string", "subagent_type": "string",
}

#: MCP-discovered tools are named `<server>__<tool>` and known only once a
#: worker has asked the servers: the check leaves such names to the servers.
MCP_SEPARATOR = "__"


def policy_tools(registry: ToolRegistry) -> list[ToolDefinition]:
    """The tools a policy may name: the registry's and Claude Code's."""
    schema = {"type": "object",
              "properties": {name: {"type": kind} for name, kind in CLAUDE_CODE_FIELDS.items()}}
    claude = [
        ToolDefinition(name=name, description=f"Claude Code's {name} tool", input_schema=schema,
                       side_effects=cls, requires_workspace=False, client_executed=True)
        for name, cls in BUILTIN_TOOLS.items()
    ]
    return [*registry.definitions(), *claude]


def policy_schema(registry: ToolRegistry, settings: Settings | None = None) -> str:
    """The Cedar schema of this deployment (`parkgate policy schema`): its tools
    and the settings' budget names."""
    return deployment_schema(policy_tools(registry), settings.budgets if settings else ())


def check_policies(policies: CedarPolicies, registry: ToolRegistry,
                   settings: Settings) -> list[str]:
    """Every problem of the loaded policies against the deployment's schema."""
    tools = policy_tools(registry)
    names = [t.name for t in tools]
    problems = policies.check(deployment_schema(tools, settings.budgets), names,
                              input_fields(tools))
    if settings.mcp_servers:
        problems = [p for p in problems
                    if not (" unknown tool " in p and MCP_SEPARATOR in p.rsplit(" ", 1)[-1])]
    return problems


def budget_problems(settings: Settings, registry: ToolRegistry) -> list[str]:
    """Budgets whose `tools` name a tool the deployment does not have (such a
    budget would silently never count it); MCP tools are left to their servers."""
    known = {t.name for t in policy_tools(registry)}
    return [f"budgets.{name}.tools: unknown tool {tool!r}"
            for name, spec in settings.budgets.items() for tool in spec.tools or ()
            if tool not in known and not (settings.mcp_servers and MCP_SEPARATOR in tool)]


def load_cedar(settings: Settings, registry: ToolRegistry) -> CedarPolicies | None:
    """The `policy_files` loaded and checked, None when there are none.

    CedarError (one line: the first problem, and how many more) when a file
    does not load or a policy does not check against the schema.
    """
    if not settings.policy_files:
        return None
    policies = CedarPolicies.load(
        [p.expanduser() for p in settings.policy_files],
        approvers=settings.approvers, groups=settings.approver_groups,
    )
    problems = check_policies(policies, registry, settings)
    if problems:
        more = f" (and {len(problems) - 1} more: parkgate policy check)" \
            if len(problems) > 1 else ""
        raise CedarError(problems[0] + more)
    return policies

