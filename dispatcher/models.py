"""Canonical data types shared by every part of parkgate.

Everything here is a pydantic model (or a StrEnum) because the same objects
travel as Temporal payloads, JSON over HTTP and JSON columns in the database.
Nothing in this module does I/O, so workflows may import it freely.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from parkgate import _shadowing, jcs

_shadowing.check()


def utcnow() -> datetime:
    """Timezone-aware UTC now; all parkgate timestamps are UTC."""
    return datetime.now(UTC)


class SideEffects(StrEnum):
    """The highest side-effect class a tool is capable of (by capability, not usage)."""

    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"

    @property
    def rank(self) -> int:
        """Order used to compare classes (a composed tool must be >= its parts)."""
        return _SIDE_EFFECT_RANK[self]

    @property
    def mutates(self) -> bool:
        """True for classes whose execution must happen at most once."""
        return self in (SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK)


_SIDE_EFFECT_RANK = {
    SideEffects.NONE: 0,
    SideEffects.READ: 1,
    SideEffects.WRITE: 2,
    SideEffects.EXECUTE: 3,
    SideEffects.NETWORK: 4,
}


class ToolErrorClass(StrEnum):
    """Closed set of failure classes; matches tool.failed's error_class."""

    NOT_FOUND = "not_found"
    VALIDATION_ERROR = "validation_error"
    PERMISSION_DENIED = "permission_denied"
    USER_DENIED = "user_denied"
    TIMEOUT = "timeout"
    EXECUTION_ERROR = "execution_error"
    CANCELLED = "cancelled"
    CONFIRMATION_TIMEOUT = "confirmation_timeout"


# --------------------------------------------------------------------------
# Content blocks
# --------------------------------------------------------------------------


class TextBlock(BaseModel):
    """Plain text content."""

    type: Literal["text"] = "text"
    text: str


class ImageSource(BaseModel):
    """Inline base64 image data."""

    type: Literal["base64"] = "base64"
    media_type: str = "image/png"
    data: str


class ImageBlock(BaseModel):
    """An image returned by a tool (base64, inline)."""

    type: Literal["image"] = "image"
    source: ImageSource


ContentBlock = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


# --------------------------------------------------------------------------
# Tool definition and calls
# --------------------------------------------------------------------------


#: What a tool may be called (hosted, discovered over MCP, or a session's client tool).
TOOL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"


class ToolDefinition(BaseModel):
    """What a tool is: its name, schema, side effects and dispatch hints."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str
    input_schema: dict[str, Any]
    side_effects: SideEffects
    #: Input fields (top-level keys) holding workspace-relative paths; the
    #: pipeline scope-checks them before any side effect.
    path_fields: list[str] = Field(default_factory=list)
    requires_workspace: bool = True
    #: Hidden from sessions of kind "worker" (routing-engine §6.2.1).
    hidden_from_workers: bool = False
    #: Per-tool execution timeout; None means the class default (60 s / 600 s).
    #: A declared timeout is > 0 (see `tool_timeout`, the one reader).
    timeout_seconds: float | None = Field(default=None, gt=0)
    #: Per-tool approval expiry in seconds; None = configured default; 0 = never.
    approval_expiry_seconds: float | None = None
    #: Composition (see tool-composition proposal): sub-tools this tool may call.
    composed_of: list[str] | None = None
    #: When True one confirmation covers the whole composed operation.
    atomic: bool = False
    #: Declared by a session (`client_tools`): the agent's own process runs it;
    #: parkgate classifies, parks and releases it, then records what the client
    #: reports (parkgate.client_tools.declared).
    client_executed: bool = False
    #: Set for one call by an agent's hook when the call reaches outside its
    #: session's workspace (parkgate.client_tools.confinement): a person decides it,
    #: whatever policy, self-approval or a remembered decision would allow.
    #: The text says why (the approval's rule names it).
    human_decides: str | None = None
    #: Set for one call by an agent's hook when the call reaches a path no
    #: agent tool may reach (parkgate.client_tools.confinement: parkgate's own files,
    #: another project's workspace, or outside the workspace where the setting
    #: says deny): classified as denied before anything else, so the refusal is
    #: a call in the audit like any other denial. The text says why.
    confined: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """OpenAI function-tool shape."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages API tool shape."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def _canonical_input(value: dict[str, Any]) -> dict[str, Any]:
    # Lone surrogates are left to the API's own check (422 invalid_text).
    return jcs.check(value, "input", text=False)  # type: ignore[no-any-return]


#: A tool input: a JSON object with a canonical form (parkgate.jcs), so its
#: hashes can be taken. NaN, Infinity or a value that is not JSON is refused
#: where the input enters (a 422 naming the place at the API), never hashed as
#: Python spells it nor turned into null on its way to the workflow.
JsonInput = Annotated[dict[str, Any], AfterValidator(_canonical_input)]


class ToolUseBlock(BaseModel):
    """A tool call emitted by the model."""

    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    input: JsonInput = Field(default_factory=dict)


class ToolResultBlock(BaseModel):
    """What the model gets back for one ToolUseBlock; never an exception."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: list[ContentBlock] = Field(default_factory=list)
    is_error: bool = False
    #: Set when is_error; not part of the provider wire shape.
    error_class: ToolErrorClass | None = None

    @property
    def text(self) -> str:
        """All text content joined, for logs, tests and UIs."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic tool_result shape (drops parkgate-only fields)."""
        return self.model_dump(mode="json", exclude={"error_class"})


class Session(BaseModel):
    """The session a call belongs to; its workspace bounds every file access."""

    session_id: str = Field(min_length=1, max_length=200)
    turn_id: str = Field(min_length=1, max_length=200)
    workspace_path: str
    kind: Literal["main", "worker"] = "main"
    #: The worker group whose hosts have this workspace (parkgate.workspaces.worker_groups):
    #: classify and execute run only there. None: any worker (the main queue).
    worker_group: str | None = None


class ToolOutput(BaseModel):
    """What a tool returns; the dispatcher wraps it into a ToolResultBlock."""

    content: list[ContentBlock] = Field(default_factory=list)
    success: bool = True
    metadata: dict[str, Any] = Field(default_factory=dict)
    files_modified: list[str] | None = None
    command_executed: str | None = None


def canonical_json(value: Any) -> str:
    """The one canonical JSON hashes are taken of: RFC 8785 (parkgate.jcs)."""
    return jcs.canonical_text(value)


def input_hash(tool_name: str, tool_input: dict[str, Any]) -> str:
    """Stable SHA-256 of a call's tool and arguments (canonical JSON).

    Approval binds to this hash; the execute step refuses a call whose hash
    differs from the approved one.
    """
    return jcs.sha256_hex({"tool": tool_name, "input": tool_input})


def input_hash_forms(tool_name: str, tool_input: dict[str, Any]) -> tuple[str, ...]:
    """`input_hash` and the form versions before RFC 8785 computed: an approval,
    a remembered rule or a call row written by them still matches its input."""
    doc = {"tool": tool_name, "input": tool_input}
    legacy = jcs.legacy_sha256_hex(doc)
    return (jcs.sha256_hex(doc),) + ((legacy,) if legacy is not None else ())


def input_sha256(tool_input: dict[str, Any]) -> str:
    """SHA-256 hex of an input's canonical JSON (RFC 8785): what a client-executed
    call is released with and what its client reports it ran (the input alone,
    so a client in any language computes it from the arguments it holds;
    docs/CLIENT_TOOLS.md has a test vector)."""
    return jcs.sha256_hex(tool_input)


def legacy_input_sha256(tool_input: dict[str, Any]) -> str:
    """The `input_sha256` of versions before RFC 8785 (Python's json.dumps): what
    a call released by them carries, so its history replays as written."""
    legacy = jcs.legacy_sha256_hex(tool_input)
    return legacy if legacy is not None else jcs.sha256_hex(tool_input)


def _hash_of(expected: str, doc: Any) -> bool:
    """Whether `expected` is `doc`'s hash in either form: RFC 8785 first (what
    this version writes), the json.dumps form only when that one differs."""
    return expected == jcs.sha256_hex(doc) or expected == jcs.legacy_sha256_hex(doc)


def is_input_hash(expected: str, tool_name: str, tool_input: dict[str, Any]) -> bool:
    """`expected` is one of `input_hash_forms(tool_name, tool_input)` (without
    taking the old form when the current one matches)."""
    return _hash_of(expected, {"tool": tool_name, "input": tool_input})


def is_input_sha256(expected: str, tool_input: dict[str, Any]) -> bool:
    """`expected` is the input's `input_sha256` or its form before RFC 8785: the
    hashes a report or claim about this input may carry across an upgrade."""
    return _hash_of(expected, tool_input)


def tool_timeout(
    definition: ToolDefinition | None, *, default_seconds: float, execute_seconds: float
) -> float:
    """Execution timeout of a tool: its own `timeout_seconds`, else its class default.

    EXECUTE and NETWORK tools get `execute_seconds`. One function, so the workflow's
    plan (activity timeouts) and the pipeline's run (the tool's own deadline) agree.
    """
    if definition is not None and definition.timeout_seconds is not None:
        return definition.timeout_seconds
    if definition is not None and definition.side_effects in (
        SideEffects.EXECUTE,
        SideEffects.NETWORK,
    ):
        return execute_seconds
    return default_seconds
