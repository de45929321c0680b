"""How one MCP server is reached (a settings entry)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parkgate.models import SideEffects


class McpServer(BaseModel):
    """A stdio command or a streamable-HTTP URL, with env and headers.

    `side_effects` overrides the class derived from a tool's annotations
    (`{"delete_thing": "write"}`), keyed by the server's own tool name.
    """

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    side_effects: dict[str, SideEffects] = Field(default_factory=dict)
    #: Per-call timeout for this server's tools; None = the class default.
    timeout_seconds: float | None = Field(default=None, gt=0)
    #: How long discovery waits for the server to answer tools/list.
    connect_timeout_seconds: float = Field(default=20.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of `command` or `url`")
        return self
