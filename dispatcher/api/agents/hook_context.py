"""What one agent hook request works with: the event as parkgate reads it
(HookInput) and the request's context (HookContext), shared by the hook's
path (parkgate.api.agents.claude_code_hook) and its confinement checks
(parkgate.api.agents.hook_confine)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from parkgate.api.agents import client_calls
from parkgate.api.agents.hook_gates import CLAUDE_CODE, Gate
from parkgate.api.shared.schemas import ID_RE
from parkgate.api.shared.service import CallService
from parkgate.approvals.access import Principal
from parkgate.models import JsonInput
from parkgate.settings import Settings
from parkgate.store.repository import Repository


class HookInput(BaseModel):
    """The fields parkgate reads from a Claude Code hook event (others are kept)."""

    model_config = ConfigDict(extra="allow")

    hook_event_name: str
    session_id: str = Field(pattern=ID_RE)
    cwd: str = ""
    tool_name: str | None = None
    tool_input: JsonInput | None = None
    tool_use_id: str | None = Field(default=None, pattern=ID_RE)
    tool_response: Any = None
    error: str | None = None
    permission_mode: str | None = None
    prompt_id: str | None = None
    prompt: str | None = None


class HookContext:
    """What one hook request works with.

    `confirm`: the command hook's process starts an allowed call's claim itself
    just before it answers Claude Code (the answer names the claim); else (an
    HTTP hook) the claim is started here before the answer, unless the request
    is `gone`."""

    def __init__(self, settings: Settings, repo: Repository, service: CallService,
                 key: Principal, registry: Any, inbox_url: str, *, confirm: bool = False,
                 gone: client_calls.Gone | None = None, gate: Gate = CLAUDE_CODE) -> None:
        self.settings, self.repo, self.service, self.key = settings, repo, service, key
        self.registry, self.inbox_url = registry, inbox_url
        self.confirm, self.gone, self.gate = confirm, gone, gate
