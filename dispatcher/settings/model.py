"""One Settings class: YAML file (`~/.parkgate/server.yaml` or --config) + PARKGATE_* env.

Environment variables win over the YAML file, which wins over defaults.
Nested values use `__` in env names (PARKGATE_TEMPORAL__ADDRESS is not used;
fields are flat on purpose so each has one obvious env name).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from parkgate.approvals.access import PROJECT_PATTERN
from parkgate.mcp_source.config import McpServer
from parkgate.rules.budgets import BudgetSpec, check_budgets
from parkgate.settings.agents import AgentSettings
from parkgate.settings.entries import Approver, GroupGrant, Webhook
from parkgate.settings.paths import HostPaths, config_file, default_data_dir
from parkgate.workspaces.worker_groups import check_group_name


def _absolute(path: Path, name: str) -> Path:
    """A host path a setting names, `~` expanded; a relative one would depend on
    the worker's working directory."""
    path = Path(path).expanduser()
    if not path.is_absolute():
        raise ValueError(f"{name}: {str(path)!r} must be an absolute path")
    return path


class Settings(HostPaths, AgentSettings, BaseSettings):
    """All parkgate configuration in one place."""

    model_config = SettingsConfigDict(env_prefix="PARKGATE_", extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
    #: SQLAlchemy async URL; empty means SQLite under data_dir.
    database_url: str = ""
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_task_queue: str = "parkgate"
    temporal_api_key: str | None = None
    temporal_tls: bool = False
    temporal_tls_cert_path: Path | None = None
    temporal_tls_key_path: Path | None = None
    temporal_tls_ca_path: Path | None = None
    #: Base URL put in approval links (what a phone can reach).
    public_base_url: str = "http://127.0.0.1:8420"
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8420, ge=1, le=65535)
    #: Secret for signing approval links; generated under data_dir when unset.
    link_secret: str | None = None
    workspace_roots: list[Path] = Field(default_factory=lambda: [Path.home()])
    #: Per-project workspace roots: project -> roots, replacing `workspace_roots`
    #: for that project's sessions (`PARKGATE_PROJECT_WORKSPACE_ROOTS` is JSON,
    #: e.g. {"payments": ["/srv/payments"]}). Projects not listed use `workspace_roots`.
    project_workspace_roots: dict[str, list[Path]] = Field(default_factory=dict)
    #: Confirmation policy in the spec's YAML shape (the `tool_confirmation` mapping).
    tool_confirmation: dict[str, Any] = Field(default_factory=dict)
    #: Cedar policy files decided beside `tool_confirmation`, strictest wins
    #: (docs/POLICY.md; `PARKGATE_POLICY_FILES` is JSON, e.g. ["prod.cedar"]).
    policy_files: list[Path] = Field(default_factory=list)
    #: Named budgets that park (or deny) a call past their limit (docs/POLICY.md).
    budgets: dict[str, BudgetSpec] = Field(default_factory=dict)
    session_concurrency: int = Field(default=4, ge=1, le=64)
    #: Client tools (issue 24): the lease a claim gets by default, and the most
    #: a claim may ask for (`lease_seconds`).
    client_lease_seconds: float = Field(default=300.0, gt=0)
    client_lease_max_seconds: float = Field(default=3600.0, gt=0)
    #: A released client call no client claims within this ends `unclaimed`
    #: (it never runs; issue 37): every wait has an end.
    client_unclaimed_seconds: float = Field(default=6 * 3600.0, gt=0)
    #: Calls not ended after this are counted by the `parkgate_calls_open_too_long`
    #: metric (`parkgate calls list --open-longer-than SECONDS` lists them).
    open_call_report_seconds: float = Field(default=24 * 3600.0, gt=0)
    #: How often each worker logs one WARNING naming the calls open longer than
    #: `open_call_report_seconds` (parkgate.durable.open_calls); 0 = never.
    open_call_report_interval_seconds: float = Field(default=3600.0, ge=0)
    #: A claim is a reservation until its holder starts it: unstarted this long,
    #: the call is released again (its holder died before it could run it).
    client_reserve_seconds: float = Field(default=30.0, gt=0)
    #: A call with a fresh tool_use_id but the same tool and canonical input in
    #: the same session attaches to the still-parked call (clients, e.g. a model
    #: retrying through MCP, that cannot resend the id) within this window.
    attach_same_input: bool = True
    attach_same_input_window_seconds: float = Field(default=3600.0, gt=0)
    #: Claude Code's hook (issue 25): tool name (or glob) -> side-effect class,
    #: over the built-in mapping; how long PreToolUse holds a parked call; what it
    #: answers when nobody decided by then; and whether `claude-code install`
    #: makes a hook failure (parkgate unreachable) block the call. The audit
    #: keeps the first `claude_code_prompt_max_chars` characters of a turn's prompt.
    claude_code_tools: dict[str, Literal["none", "read", "write", "execute", "network"]] = Field(
        default_factory=dict)
    claude_code_wait_seconds: float = Field(default=50.0, ge=0, le=3000)
    claude_code_fallback: Literal["ask", "deny", "defer"] = "deny"
    claude_code_fail_closed: bool = True
    claude_code_prompt_max_chars: int = Field(default=8192, ge=0, le=1_000_000)
    #: A Claude Code file tool's path outside the session's workspace: a person
    #: decides the call ("prompt": it parks whatever policy says) or it is
    #: denied ("deny"). parkgate's own files are denied either way.
    claude_code_outside_workspace: Literal["prompt", "deny"] = "prompt"
    default_timeout_seconds: float = Field(default=60.0, gt=0)
    execute_timeout_seconds: float = Field(default=600.0, gt=0)
    cancel_grace_seconds: float = Field(default=30.0, ge=0)
    #: Approval expiry; 0 means never.
    approval_expiry_seconds: float = Field(default=24 * 3600.0, ge=0)
    approval_expiry_by_class: dict[str, float] = Field(default_factory=dict)
    webhooks: list[Webhook] = Field(default_factory=list)
    #: The worker's sticky cache. Each cached workflow holds its own sandboxed
    #: copy of the workflow modules (~0.2 MB of Python objects, ~0.35 MB RSS:
    #: docs/PERFORMANCE.md, "Scale on one machine"); a decision on an evicted
    #: parked call replays its short history first (a few ms of worker CPU).
    max_cached_workflows: int = Field(default=100, ge=0)
    #: Run workflows in Temporal's sandbox (re-executes the workflow modules for
    #: every run and checks what their code reaches). Off saves about a fifth of a
    #: call's CPU in the worker (docs/PERFORMANCE.md, "Third round"); the workflow
    #: modules are then held to determinism by tests/workflows/test_determinism.py
    #: (every path, statically), and the suite and the replays of recorded
    #: histories still run in the sandbox.
    workflow_sandbox: bool = True
    #: Heartbeat timeout of the at-most-once execute activity: how long a dead
    #: worker goes unnoticed before the call ends "outcome unknown".
    execute_heartbeat_timeout_seconds: float = Field(default=20.0, gt=0)
    max_input_bytes: int = Field(default=1024 * 1024, ge=1)
    max_request_bytes: int = Field(default=2 * 1024 * 1024, ge=1)
    #: Deepest JSON nesting a tool input may have; deeper is refused (422)
    #: before anything starts, so every accepted input can travel the durable path.
    max_input_depth: int = Field(default=64, ge=1, le=256)
    audit_pages_enabled: bool = True
    #: Environment names a tool's process gets besides PATH, LANG and HOME
    #: (PARKGATE_* and known secret names are always dropped).
    tool_env_passthrough: list[str] = Field(default_factory=list)
    #: Run tool processes (shell) in a Linux mount+pid namespace sandbox that hides
    #: the data directory and secret files: auto (when it works; warn once when not),
    #: required (refuse to run tools without it), off.
    tool_sandbox: Literal["auto", "required", "off"] = "auto"
    #: Paths hidden from tools besides the data directory and the configured secret
    #: files and their directories (which are always hidden).
    tool_hidden_paths: list[Path] = Field(default_factory=list)
    #: The util-linux `unshare` binary the sandbox uses (name on PATH or absolute path).
    tool_sandbox_unshare: str = "unshare"
    #: Sandboxed tool processes get their own network namespace (no network, not even
    #: the host's loopback: Temporal, PostgreSQL, the API) unless their tool is named
    #: here or its side-effect class is in tool_network_classes; those share the host's.
    tool_network_tools: list[str] = Field(default_factory=list)
    #: Side-effect classes ("network", "execute", ...) whose tools' processes share the
    #: host network (see tool_network_tools).
    tool_network_classes: list[str] = Field(default_factory=list)
    #: Paths a sandboxed tool sees read-only, besides parkgate's own code and Python
    #: environment (always read-only); a call's workspace inside one stays writable.
    tool_readonly_paths: list[Path] = Field(default_factory=list)
    #: The dedicated OS user tool processes run as ("name", "uid" or "uid:gid"); the
    #: worker must run as root to switch. Unset: tools run as the worker's user.
    tool_user: str | None = None
    #: Host services' sockets (or the directories holding them) hidden from sandboxed
    #: tools besides /run, /var/run, the history database's socket directory and the
    #: sockets found in /tmp, /var/tmp, /var/lib, /var/spool and /dev; unless opted in.
    tool_service_paths: list[Path] = Field(default_factory=list)
    #: Tool name -> host service paths (sockets or their directories) its processes
    #: see anyway, read-only: e.g. {shell: [/run/postgresql]}.
    tool_exposed_paths: dict[str, list[Path]] = Field(default_factory=dict)
    #: Temporal payload encryption keys: id -> urlsafe base64 of 32 bytes. Empty means
    #: one key generated into `<data_dir>/payload-key` (embedded default).
    payload_keys: dict[str, str] = Field(default_factory=dict)
    #: The key id new payloads are encrypted with (default: the first of payload_keys).
    payload_key_id: str | None = None
    #: Temporal payloads larger than this many serialized bytes are stored once in
    #: the history database (content-addressed, encrypted) and travel by reference.
    blob_threshold_bytes: int = Field(default=64 * 1024, ge=1024, le=1024 * 1024)
    #: Origin of the Temporal UI allowed to call /codec/* (CORS); empty = no CORS.
    codec_cors_origin: str = ""
    #: Bearer token required on /metrics when set.
    metrics_token: str | None = None
    #: Every `stuck_task_check_seconds` (0 = never) each worker ends its queue's
    #: calls whose workflow task failed `stuck_task_failures` times for a reason
    #: no retry can fix, and records the end of calls whose workflow was ended
    #: from outside, terminated or timed out (docs/DURABLE.md).
    stuck_task_check_seconds: float = Field(default=60.0, ge=0, le=3600)
    stuck_task_failures: int = Field(default=5, ge=2, le=1000)
    #: Check only the calls Temporal flags with TemporalReportedProblems (servers
    #: that have it flag a workflow after a few consecutive task failures): cheap
    #: with many parked calls. False checks every running call of the queue.
    stuck_task_flagged_only: bool = True
    #: Workspace-affine routing (docs/OPERATIONS.md, "Worker groups"): group name ->
    #: the workspace roots that live on that group's hosts. A session whose
    #: workspace is under one of them (or that names its group on registration)
    #: has its calls classified and run only by workers serving that group.
    worker_groups: dict[str, list[Path]] = Field(default_factory=dict)
    #: The groups this worker serves: it polls `<temporal_task_queue>.<group>` for
    #: each (it must have those groups' workspaces).
    serve_groups: list[str] = Field(default_factory=list)
    #: Whether this worker also polls the main queue (workflows, store writes,
    #: calls of sessions without a group). False for a host that only runs its
    #: group's calls.
    serve_main_queue: bool = True

    @field_validator("payload_keys", mode="after")
    @classmethod
    def _check_payload_keys(cls, value: dict[str, str]) -> dict[str, str]:
        from parkgate.payload_keys import decode_key

        for kid, text in value.items():
            try:
                decode_key(text)
            except ValueError as exc:
                raise ValueError(f"payload key {kid!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _check_payload_key_id(self) -> Settings:
        if self.payload_key_id is not None and self.payload_key_id not in self.payload_keys:
            raise ValueError(
                f"payload_key_id {self.payload_key_id!r} is not a key of payload_keys"
            )
        return self
    #: Named approvers (`approvers: {alice: {email: ...}}`) and groups of them
    #: (`approver_groups: {oncall: [alice, bob]}`), referenced by confirmation
    #: rules as `approvers: [alice, group:oncall]`.
    approvers: dict[str, Approver] = Field(default_factory=dict)
    approver_groups: dict[str, list[str]] = Field(default_factory=dict)
    #: How long a named approver's personal inbox link (`/inbox/p/<token>`,
    #: `parkgate approvers inbox-link NAME`) stays valid.
    inbox_link_days: int = Field(default=30, ge=1, le=366)
    #: Requests per second each API key may make (token bucket); 0 = no limit.
    rate_limit_per_second: float = Field(default=0.0, ge=0)
    #: How many requests a key may make at once before the rate applies.
    rate_limit_burst: int = Field(default=20, ge=1)
    #: MCP endpoint: how long a tools/call holds a parked call (sending progress)
    #: before answering with an error result that names its tool_use_id.
    mcp_call_wait_seconds: float = Field(default=50.0, ge=0, le=3600)
    #: MCP endpoint: seconds between progress notifications while a call waits.
    mcp_progress_seconds: float = Field(default=2.0, gt=0, le=300)
    #: MCP tasks: how long a tools/call that asked for a task waits for a direct answer
    #: (an auto-allowed call) before answering with the task; the poll interval it suggests.
    mcp_task_wait_seconds: float = Field(default=2.0, ge=0, le=60)
    mcp_task_poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    #: MCP servers whose tools join the registry as `<name>__<tool>`, behind the gate.
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    #: E-mail to named approvers (docs/APPROVERS.md): off while smtp_host is empty.
    smtp_host: str = ""
    smtp_port: int = Field(default=587, ge=1, le=65535)
    #: "starttls" (upgrade a plain connection, required), "ssl" (implicit TLS,
    #: usually port 465) or "none" (plain; only for a relay on localhost).
    smtp_security: Literal["starttls", "ssl", "none"] = "starttls"
    smtp_username: str | None = None
    #: Never passed to tools (PARKGATE_* names are dropped from their environment).
    smtp_password: str | None = Field(default=None, repr=False)
    smtp_from: str = "parkgate@localhost"
    #: CA bundle (PEM) the SMTP server's certificate must chain to; unset = system store.
    smtp_ca_path: Path | None = None
    smtp_timeout_seconds: float = Field(default=10.0, gt=0)
    #: Slack app (docs/APPROVERS.md): interactive messages with Approve/Deny buttons.
    #: Posting is on when slack_bot_token and slack_channel are both set.
    slack_bot_token: str | None = Field(default=None, repr=False)
    #: Verifies the interactivity endpoint's requests (POST /slack/interactivity).
    slack_signing_secret: str | None = Field(default=None, repr=False)
    slack_channel: str = ""
    #: Slack's Web API base (tests point it at a local server).
    slack_api_url: str = "https://slack.com/api/"

    #: OpenID Connect sign-in (docs/APPROVERS.md, "Sign in with your identity
    #: provider"): on when oidc_issuer and oidc_client_id are set. The redirect
    #: URI to register is `<public_base_url>/auth/oidc/callback`.
    oidc_issuer: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str | None = Field(default=None, repr=False)
    oidc_scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"])
    #: The claim that names the person in the audit and maps to named approvers
    #: (`email` matches `approvers.<name>.email`; `sub` matches `oidc_subject`).
    oidc_identity_claim: Literal["email", "sub"] = "email"
    #: The claim listing the person's groups (`oidc_group_roles` maps them).
    oidc_groups_claim: str = "groups"
    #: Group -> {roles, projects}; a person holds the union of their groups' grants.
    oidc_group_roles: dict[str, GroupGrant] = Field(default_factory=dict)
    #: The `aud` a bearer access token must carry (default: oidc_client_id).
    oidc_audience: str | None = None
    #: Accept provider access tokens (JWT) as bearer credentials on the API.
    oidc_bearer_tokens: bool = True
    #: Tolerated clock difference with the provider when checking exp/iat/nbf.
    oidc_clock_skew_seconds: int = Field(default=60, ge=0, le=300)
    #: A signed-in session ends after this long (sign in again).
    oidc_session_seconds: int = Field(default=8 * 3600, ge=300, le=7 * 86400)
    #: A decision needs claims the provider asserted at most this long ago;
    #: older sessions are renewed through the provider first (groups re-checked).
    oidc_decision_max_age_seconds: int = Field(default=900, ge=30, le=86400)
    #: The API-key sign-in form on the inbox and audit pages (off: OIDC only).
    api_key_signin: bool = True
    #: Whether an approval or personal inbox link decides on its own ("link"),
    #: or its holder must also be signed in (OIDC) as the named approver, or as
    #: an approver of the project for a generic link ("signin").
    link_decisions: Literal["link", "signin"] = "link"

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_client_id)

    @model_validator(mode="after")
    def _check_sign_in(self) -> Settings:
        if bool(self.oidc_issuer) != bool(self.oidc_client_id):
            raise ValueError("oidc_issuer and oidc_client_id go together (set both or neither)")
        if self.oidc_issuer and not self.oidc_issuer.startswith(("https://", "http://")):
            raise ValueError(f"oidc_issuer {self.oidc_issuer!r} is not an http(s) URL")
        if self.oidc_issuer and "openid" not in self.oidc_scopes:
            raise ValueError("oidc_scopes must include openid (the ID token comes with it)")
        if not self.oidc_enabled and self.link_decisions == "signin":
            raise ValueError("link_decisions: signin needs OIDC sign-in (oidc_issuer, "
                             "oidc_client_id)")
        if not self.oidc_enabled and not self.api_key_signin:
            raise ValueError("api_key_signin: false needs OIDC sign-in, or nobody could sign "
                             "in to the inbox and audit pages")
        return self

    @property
    def oidc_redirect_uri(self) -> str:
        return f"{self.public_base_url.rstrip('/')}/auth/oidc/callback"

    def approver_for_oidc(self, subject: str, email: str | None) -> str | None:
        """The named approver an OIDC person acts as (by subject, else verified email)."""
        for name, entry in self.approvers.items():
            if entry.oidc_subject and entry.oidc_subject == subject:
                return name
        if email:
            for name, entry in self.approvers.items():
                if entry.email and entry.email.lower() == email.lower():
                    return name
        return None

    @field_validator("approver_groups", mode="after")
    @classmethod
    def _known_members(
        cls, value: dict[str, list[str]], info: ValidationInfo
    ) -> dict[str, list[str]]:
        known = set(info.data.get("approvers") or {})
        for group, members in value.items():
            unknown = [m for m in members if m not in known]
            if unknown:
                raise ValueError(f"approver_groups.{group}: unknown approvers {unknown}")
        return value

    _check_budgets = field_validator("budgets", mode="after")(check_budgets)

    @field_validator("approval_expiry_by_class", mode="after")
    @classmethod
    def _known_classes(cls, value: dict[str, float]) -> dict[str, float]:
        """An expiry for a class that does not exist would silently never apply."""
        from parkgate.models import SideEffects

        known = {c.value for c in SideEffects}
        for key, seconds in value.items():
            if key.lower() not in known:
                raise ValueError(
                    f"unknown side-effect class {key!r} (one of: {', '.join(sorted(known))})"
                )
            if seconds < 0:
                raise ValueError(f"{key}: expiry must be >= 0 seconds (0 means never)")
        return value

    @field_validator("tool_network_classes", mode="after")
    @classmethod
    def _known_network_classes(cls, value: list[str]) -> list[str]:
        from parkgate.models import SideEffects

        known = {c.value for c in SideEffects}
        unknown = [c for c in value if c.lower() not in known]
        if unknown:
            raise ValueError(
                f"unknown side-effect class {unknown[0]!r} (one of: {', '.join(sorted(known))})"
            )
        return [c.lower() for c in value]

    @field_validator("tool_service_paths", mode="after")
    @classmethod
    def _absolute_service_paths(cls, value: list[Path]) -> list[Path]:
        return [_absolute(p, "tool_service_paths") for p in value]

    @field_validator("tool_exposed_paths", mode="after")
    @classmethod
    def _absolute_exposed_paths(cls, value: dict[str, list[Path]]) -> dict[str, list[Path]]:
        return {tool: [_absolute(p, f"tool_exposed_paths.{tool}") for p in paths]
                for tool, paths in value.items()}

    @field_validator("worker_groups", mode="after")
    @classmethod
    def _check_worker_groups(cls, value: dict[str, list[Path]]) -> dict[str, list[Path]]:
        for name in value:
            check_group_name(name)
        groups = {name: [Path(p).expanduser() for p in roots] for name, roots in value.items()}
        for name, roots in groups.items():
            for root in roots:
                if not root.is_absolute():  # matched lexically against session paths
                    raise ValueError(f"worker group {name!r}: root {str(root)!r} is not absolute")
        return groups

    @model_validator(mode="after")
    def _check_serve_groups(self) -> Settings:
        for name in self.serve_groups:
            check_group_name(name)
            if self.worker_groups and name not in self.worker_groups:
                raise ValueError(
                    f"serve_groups: unknown worker group {name!r} "
                    f"(worker_groups defines {', '.join(sorted(self.worker_groups))})"
                )
        if not self.serve_main_queue and not self.serve_groups:
            raise ValueError("serve_main_queue is false and serve_groups is empty: "
                             "the worker would poll nothing")
        return self

    @field_validator("workspace_roots", mode="after")
    @classmethod
    def _expand_roots(cls, value: list[Path]) -> list[Path]:
        return [Path(p).expanduser().resolve() for p in value]

    @field_validator("project_workspace_roots", mode="after")
    @classmethod
    def _expand_project_roots(cls, value: dict[str, list[Path]]) -> dict[str, list[Path]]:
        for project, roots in value.items():
            if not re.fullmatch(PROJECT_PATTERN, project):
                raise ValueError(f"project_workspace_roots: {project!r} is not a project name")
            if not roots:
                raise ValueError(f"project_workspace_roots.{project}: at least one root")
        return {project: [Path(p).expanduser().resolve() for p in roots]
                for project, roots in value.items()}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_file()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    # ------------------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        """These settings as PARKGATE_* variables, for a child process (worker, API).

        Complex values are JSON, which is how pydantic-settings reads them back;
        unset optional values are left out.
        """
        env: dict[str, str] = {}
        for name, value in self.model_dump(mode="json").items():
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            env[f"PARKGATE_{name.upper()}"] = text
        return env

    @property
    def email_enabled(self) -> bool:
        return bool(self.smtp_host)

    @property
    def slack_enabled(self) -> bool:
        return bool(self.slack_bot_token and self.slack_channel)

    def approver_for_slack_user(self, user_id: str) -> str | None:
        """The named approver a Slack member id decides as (None: not mapped)."""
        for name, entry in self.approvers.items():
            if entry.slack_user_id and entry.slack_user_id == user_id:
                return name
        return None

    def approver_decides_in(self, name: str, project: str) -> bool:
        """Whether the named approver decides requests of `project` (Slack, links)."""
        entry = self.approvers.get(name)
        return entry is not None and entry.decides_in(project)

    def approver_keys(self) -> dict[str, str]:
        """API key name -> the named approver it decides as."""
        return {a.key: name for name, a in self.approvers.items() if a.key}

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or SQLite under the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir / 'parkgate.db'}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (cached; tests build their own Settings objects)."""
    return Settings()
