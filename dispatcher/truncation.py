"""Output limits: what the model sees is capped, the full output is kept.

The model gets text with a visible ``[truncated: N more characters]`` marker;
the untruncated output stays in ``ToolOutput.metadata`` / ``ToolRun.output`` so
the history store can keep it whole.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Limits(BaseModel):
    """Every size and time limit of the pipeline, in one configurable model."""

    #: Cap on any text block the model sees (plain/JSON/command output).
    text_chars: int = Field(default=48_000, ge=1)
    #: Cap on file content returned by read_file.
    file_chars: int = Field(default=12_000, ge=1)
    #: Cap on directory listing entries.
    listing_entries: int = Field(default=500, ge=1)
    #: Shell guard: longest command accepted.
    shell_max_command_chars: int = Field(default=2_048, ge=1)
    #: Serialized tool input cap (bytes of compact JSON).
    max_input_bytes: int = Field(default=1024 * 1024, ge=1)
    #: Deepest JSON nesting of a tool input (see parkgate.schema.MAX_INPUT_DEPTH).
    max_input_depth: int = Field(default=64, ge=1)
    #: Execution timeout for NONE/READ/WRITE tools.
    default_timeout_seconds: float = Field(default=60.0, gt=0)
    #: Execution timeout for EXECUTE/NETWORK tools.
    execute_timeout_seconds: float = Field(default=600.0, gt=0)
    #: How long to wait for a cancelled tool before abandoning it.
    cancel_grace_seconds: float = Field(default=30.0, ge=0)
    #: Shell: seconds between SIGTERM and SIGKILL of the process group.
    shell_kill_after_seconds: float = Field(default=3.0, ge=0)
    #: Shell: bytes of stdout/stderr kept in memory per stream.
    shell_capture_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    #: Environment names passed to tools besides PATH, LANG and HOME (never PARKGATE_*).
    tool_env_passthrough: tuple[str, ...] = ()
    #: Sandbox for tool processes: auto / required / off (see parkgate.sandbox.launch).
    tool_sandbox: Literal["auto", "required", "off"] = "auto"
    #: Paths shown empty inside the sandbox (see Settings.hidden_tool_paths).
    tool_hidden_paths: tuple[str, ...] = ()
    #: The `unshare` binary (name on PATH or absolute path).
    tool_sandbox_unshare: str = "unshare"
    #: Tools (by name) and side-effect classes whose processes share the host network;
    #: every other sandboxed process gets an isolated network namespace.
    tool_network_tools: tuple[str, ...] = ()
    tool_network_classes: tuple[str, ...] = ()
    #: Roots of sessions' workspaces: hidden from a tool, except its own workspace.
    tool_workspace_roots: tuple[str, ...] = ()
    #: Paths a sandboxed tool sees read-only (besides parkgate's installation).
    tool_readonly_paths: tuple[str, ...] = ()
    #: The OS user tool processes run as (see parkgate.sandbox.tool_user); None = the worker's.
    tool_user: str | None = None
    #: Host services' sockets and socket directories hidden from tools besides /run,
    #: /var/run and the sockets found in shared directories (parkgate.sandbox.services).
    tool_service_paths: tuple[str, ...] = ()
    #: Tool name -> host service paths its processes see anyway (read-only, connectable).
    tool_exposed_paths: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> Limits:
        """Limits taken from a `parkgate.settings.Settings` (duck-typed; no import)."""
        values: dict[str, Any] = {}
        for name in (
            "default_timeout_seconds",
            "execute_timeout_seconds",
            "cancel_grace_seconds",
            "max_input_bytes",
            "max_input_depth",
            "tool_env_passthrough",
            "tool_sandbox",
            "tool_sandbox_unshare",
            "tool_network_tools",
            "tool_network_classes",
            "tool_user",
        ):
            value = getattr(settings, name, None)
            if value is not None:
                values[name] = value
        if hasattr(settings, "hidden_tool_paths"):
            values["tool_hidden_paths"] = tuple(str(p) for p in settings.hidden_tool_paths())
        if hasattr(settings, "tool_workspace_roots"):
            values["tool_workspace_roots"] = tuple(
                str(p) for p in settings.tool_workspace_roots()
            )
        if hasattr(settings, "service_tool_paths"):
            values["tool_service_paths"] = tuple(str(p) for p in settings.service_tool_paths())
        if getattr(settings, "tool_exposed_paths", None) is not None:
            values["tool_exposed_paths"] = {
                tool: tuple(str(p) for p in paths)
                for tool, paths in settings.tool_exposed_paths.items()
            }
        if getattr(settings, "tool_readonly_paths", None) is not None:
            values["tool_readonly_paths"] = tuple(str(p) for p in settings.tool_readonly_paths)
        return cls(**(values | overrides))


def truncation_marker(remaining: int, unit: str = "characters") -> str:
    """The marker appended where content was cut."""
    return f"[truncated: {remaining} more {unit}]"


def truncate_text(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters plus a visible marker (no-op if it fits)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n{truncation_marker(len(text) - limit)}"


def truncate_entries(entries: list[str], limit: int) -> tuple[list[str], int]:
    """The first ``limit`` entries and how many were left out."""
    if len(entries) <= limit:
        return list(entries), 0
    return list(entries[:limit]), len(entries) - limit
