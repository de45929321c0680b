"""`parkgate config check`: validate settings + policy, print what is in effect.

A broken setting or policy prints one line and exits 2, so this is safe to run
in a deploy pipeline before starting the service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from parkgate.cli.common import (
    ConfigError,
    config_source,
    console,
    load_settings,
    one_line,
)
from parkgate.models import Session
from parkgate.rules.policy import ConfirmationPolicy, PolicyError
from parkgate.sandbox.tool_user import line as tool_user_line
from parkgate.settings import Settings

app = typer.Typer(help="Inspect and validate the configuration.", no_args_is_help=True)

#: Settings never printed in clear.
_SECRET_FIELDS = frozenset({"link_secret", "temporal_api_key", "smtp_password",
                            "slack_bot_token", "slack_signing_secret"})


def load_policy(settings: Settings) -> ConfirmationPolicy:
    """The ConfirmationPolicy built from settings; a bad policy is a ConfigError."""
    try:
        return ConfirmationPolicy.from_mapping(settings.tool_confirmation).with_approvers(
            settings.approvers, settings.approver_groups
        )
    except (PolicyError, ValueError) as exc:
        raise ConfigError(f"invalid tool_confirmation policy: {one_line(str(exc))}") from exc


def _approver_channel_problems(settings: Settings) -> list[str]:
    """E-mail and Slack settings that would silently never notify anyone."""
    problems: list[str] = []
    if settings.email_enabled and not any(a.email for a in settings.approvers.values()):
        problems.append("smtp_host: set, but no approver has an `email`")
    if settings.smtp_password and not settings.smtp_username:
        problems.append("smtp_password: set without smtp_username (never sent)")
    if bool(settings.slack_bot_token) != bool(settings.slack_channel):
        problems.append("slack_bot_token and slack_channel must be set together")
    if settings.slack_enabled and not settings.slack_signing_secret:
        problems.append("slack_signing_secret: required for the Approve/Deny buttons")
    if settings.slack_enabled and not any(a.slack_user_id for a in settings.approvers.values()):
        problems.append("slack_bot_token: set, but no approver has a `slack_user_id`")
    return problems


def check_settings(settings: Settings) -> list[str]:
    """Problems the type checks cannot see (paths, URLs); empty when all is well."""
    from sqlalchemy.exc import ArgumentError

    from parkgate.store.urls import async_url

    problems: list[str] = []
    try:
        async_url(settings.effective_database_url)
    except (ArgumentError, ValueError) as exc:
        problems.append(f"database_url: {one_line(str(exc))}")
    for name in ("temporal_tls_cert_path", "temporal_tls_key_path", "temporal_tls_ca_path"):
        path = getattr(settings, name)
        if path is not None and not Path(path).expanduser().is_file():
            problems.append(f"{name}: file not found: {path}")
    if bool(settings.temporal_tls_cert_path) != bool(settings.temporal_tls_key_path):
        problems.append("temporal_tls_cert_path and temporal_tls_key_path must be set together")
    if not settings.public_base_url.startswith(("http://", "https://")):
        problems.append(
            "public_base_url: must start with http:// or https://, "
            f"got {settings.public_base_url!r}"
        )
    for i, hook in enumerate(settings.webhooks):
        if not hook.url.startswith(("http://", "https://")):
            problems.append(f"webhooks.{i}.url: must start with http:// or https://")
        if hook.kind not in ("generic", "slack"):
            problems.append(f"webhooks.{i}.kind: must be 'generic' or 'slack', got {hook.kind!r}")
    if not settings.workspace_roots:
        problems.append("workspace_roots: at least one root is required")
    problems += _approver_channel_problems(settings)
    if settings.tool_sandbox == "required":
        from parkgate.sandbox.launch import probe

        reason = probe(settings.tool_sandbox_unshare)
        if reason is not None:
            problems.append(
                f"tool_sandbox: 'required' but the sandbox cannot be set up here: {reason}"
            )
        else:
            net_reason = probe(settings.tool_sandbox_unshare, net=True)
            if net_reason is not None:
                problems.append(
                    "tool_sandbox: 'required' but tools cannot get a network namespace here "
                    f"({net_reason}); opt tools into the host network with "
                    "tool_network_tools / tool_network_classes, or fix the host"
                )
    problems += _tool_user_problems(settings)
    return problems


def _tool_user_problems(settings: Settings) -> list[str]:
    from parkgate.sandbox.tool_user import ToolUserError, resolve

    try:
        resolve(settings.tool_user)
    except ToolUserError as exc:
        return [str(exc)]
    return []


def _probes(settings: Settings) -> tuple[str | None, str | None]:
    """(why no sandbox, why no network namespace) on this machine; None = works."""
    from parkgate.sandbox.launch import probe

    if settings.tool_sandbox == "off":
        return None, None
    reason = probe(settings.tool_sandbox_unshare)
    if reason is not None:
        return reason, None
    return None, probe(settings.tool_sandbox_unshare, net=True)


def sandbox_line(settings: Settings) -> str:
    """What the tool sandbox does with these settings on this machine."""
    from parkgate.sandbox.launch import state_line

    reason, net_reason = _probes(settings)
    return state_line(settings.tool_sandbox, reason, len(settings.hidden_tool_paths()),
                      net_reason)


def network_table(settings: Settings, registry: Any) -> Table:
    """Which tools' processes can reach the network (and through it the host's
    loopback services: Temporal, the database, the API)."""
    from parkgate.sandbox.launch import network_access
    from parkgate.truncation import Limits

    reason, net_reason = _probes(settings)
    limits = Limits.from_settings(settings)
    table = Table(
        title="Network of tool processes", title_justify="left", caption_justify="left",
        caption="isolated: a network namespace of its own, no host service reachable. "
        "Opt in with tool_network_tools / tool_network_classes. Host sockets: the unix "
        "sockets under /run, /var/run, the database's and tool_service_paths a tool sees "
        "(tool_exposed_paths). MCP servers (mcp_servers) are not sandboxed and use the "
        "worker's network.",
    )
    table.add_column("tool", style="bold")
    table.add_column("side effects")
    table.add_column("network")
    table.add_column("host sockets")
    definitions = {d.name: d for d in registry.definitions()}

    def sockets_of(name: str) -> str:
        if settings.tool_sandbox == "off":
            return "all (tool_sandbox: off)"
        if reason is not None:
            return "none (refused)" if settings.tool_sandbox == "required" else "all (no sandbox)"
        own = limits.tool_exposed_paths.get(name, ())
        if own:
            return ", ".join(own)
        for sub in definitions[name].composed_of or []:
            if sub != name and limits.tool_exposed_paths.get(sub):
                return f"{', '.join(limits.tool_exposed_paths[sub])} through {sub}"
        return "hidden"

    def access_of(name: str) -> str:
        definition = definitions[name]
        own = network_access(limits, name, definition.side_effects.value, reason, net_reason)
        for sub in definition.composed_of or []:  # its processes are its sub-tools'
            if sub in definitions and sub != name and own == "isolated":
                through = access_of(sub)
                if through != "isolated":
                    return f"{through} through {sub}"
        return own

    for definition in definitions.values():
        cls = definition.side_effects.value
        access = access_of(definition.name)
        colour = "green" if access == "isolated" or access.startswith("none") else "yellow"
        sockets = sockets_of(definition.name)
        shade = "green" if sockets in ("hidden", "none (refused)") else "yellow"
        table.add_row(definition.name, cls.upper(), f"[{colour}]{access}[/{colour}]",
                      f"[{shade}]{sockets}[/{shade}]")
    return table


def settings_table(settings: Settings) -> Table:
    """Every setting with its effective value (secrets masked)."""
    table = Table(title="Settings", title_justify="left")
    table.add_column("setting", style="bold")
    table.add_column("value", overflow="fold")
    for name in type(settings).model_fields:
        if name == "tool_confirmation":
            continue
        value = getattr(settings, name)
        if name in _SECRET_FIELDS:
            shown = "(set)" if value else "(unset)"
            if name == "link_secret" and not value:
                shown = "(generated under data_dir)"
        elif isinstance(value, list):
            shown = ", ".join(str(v.url if hasattr(v, "url") else v) for v in value) or "-"
        elif isinstance(value, dict):
            shown = ", ".join(
                f"{k}={' '.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in value.items()
            ) or "-"
        else:
            shown = "-" if value is None or value == "" else str(value)
        table.add_row(name, shown)
    table.add_row("(database in use)", _mask_url(settings.effective_database_url))
    hidden = ", ".join(str(p) for p in settings.hidden_tool_paths())
    table.add_row("(paths hidden from tools)", hidden)
    from parkgate.sandbox.services import SERVICE_DIRS

    services = ", ".join([*SERVICE_DIRS, *(str(p) for p in settings.service_tool_paths())])
    table.add_row("(host services hidden unless opted in)",
                  f"{services}; sockets in /tmp, /var/tmp, /var/lib, /var/spool, /dev")
    return table


def _mask_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def load_registry() -> Any:
    """The workers' registry: built-in and composed tools (what `parkgate serve` offers)."""
    from parkgate.runtime.worker import build_registry

    return build_registry()


def policy_table(policy: ConfirmationPolicy) -> Table:
    """The configured layers, least to most specific (deny from any layer wins)."""
    table = Table(title="Confirmation policy", title_justify="left")
    table.add_column("layer", style="bold")
    table.add_column("applies to", overflow="fold")
    table.add_column("mode")
    for cls, mode in policy.default.items():
        table.add_row("default", cls.value.upper(), _style_mode(mode))
    for root in policy.trusted_workspaces:
        table.add_row("trusted workspace", root, _style_mode("auto"))
    for cls, mode in policy.trusted_workspace_overrides.items():
        table.add_row("trusted override", cls.value.upper(), _style_mode(mode))
    for name, mode in policy.per_tool.items():
        table.add_row("per tool", name, _style_mode(mode))
    for index, rule in enumerate(policy.rules):
        table.add_row(f"rules[{index}]", rule.describe(index), _style_mode(rule.mode))
    return table


def effective_table(policy: ConfirmationPolicy, registry: Any, settings: Settings) -> Table:
    """What each registered tool gets by default, outside and inside trusted workspaces."""
    untrusted = str(settings.workspace_roots[0]) if settings.workspace_roots else "."
    trusted = policy.trusted_workspaces[0] if policy.trusted_workspaces else None
    table = Table(title="Effective mode per tool (before argument rules)", title_justify="left")
    table.add_column("tool", style="bold")
    table.add_column("side effects")
    table.add_column("workspace")
    table.add_column("mode")
    table.add_column("rule", overflow="fold")
    for definition in registry.definitions():
        places = [("untrusted", untrusted)]
        if trusted is not None:
            places.append(("trusted", trusted))
        for label, workspace in places:
            if label == "untrusted" and policy.trusted_workspace_for(workspace) is not None:
                label = "trusted"
            session = Session(session_id="config-check", turn_id="t", workspace_path=workspace)
            decision = policy.decide(definition, {}, session)
            table.add_row(
                definition.name,
                definition.side_effects.value.upper(),
                label,
                _style_mode(decision.mode),
                decision.rule,
            )
    return table


def _style_mode(mode: str) -> str:
    colour = {"auto": "green", "prompt": "yellow", "prompt_once": "yellow", "deny": "red"}.get(mode)
    return f"[{colour}]{mode}[/{colour}]" if colour else mode


@app.command("check")
def check(
    show_settings: bool = typer.Option(
        True, "--settings/--no-settings", help="Also print every effective setting."
    ),
) -> None:
    """Validate the YAML settings file, environment and policy; print the effective policy."""
    settings = load_settings()
    problems = check_settings(settings)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"invalid configuration ({config_source()}): {problems[0]}{more}")
    policy = load_policy(settings)
    from parkgate.cli.policy import require_valid_policies

    require_valid_policies(settings)
    registry = load_registry()
    console.print(f"configuration OK (source: {config_source()})")
    console.print(sandbox_line(settings))
    console.print(tool_user_line(settings.tool_user))
    if show_settings:
        console.print(settings_table(settings))
    console.print(policy_table(policy))
    console.print(effective_table(policy, registry, settings))
    console.print(network_table(settings, registry))
