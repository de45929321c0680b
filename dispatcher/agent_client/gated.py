"""`gate`: put a function the agent runs itself behind parkgate.

    @gate(client=pg, session="s1", side_effects="write")
    def append_note(text: str) -> str:
        \"\"\"Append a line to notes.txt.\"\"\"

    append_note(text="hi")   # submit, wait for the decision, claim, run here, report

The schema comes from the type hints (pydantic), the description from the
docstring; the session is registered with its client tools before the first
call. With a `ParkgateClient` the gated function is blocking, with an
`AsyncParkgateClient` it is a coroutine function (a sync function then runs
in a thread). Calling it returns the call's `ToolResultBlock`; the contract
(release, claim, lease, outcome) is in docs/CLIENT_TOOLS.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, overload

from parkgate.agent_client.aio import AsyncParkgateClient
from parkgate.agent_client.gate_aio import AsyncGatedFunction, AsyncToolGate
from parkgate.agent_client.gate_sync import GatedFunction, ToolGate
from parkgate.agent_client.sync import ParkgateClient
from parkgate.models import SideEffects

P = ParamSpec("P")

_GATES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


@overload
def tool_gate(client: ParkgateClient, session: str, workspace: str | None = None, *,
              turn_id: str | None = None, kind: Literal["main", "worker"] = "main",
              lease_seconds: float | None = None) -> ToolGate: ...
@overload
def tool_gate(client: AsyncParkgateClient, session: str, workspace: str | None = None, *,
              turn_id: str | None = None, kind: Literal["main", "worker"] = "main",
              lease_seconds: float | None = None) -> AsyncToolGate: ...
def tool_gate(client: ParkgateClient | AsyncParkgateClient, session: str,
              workspace: str | None = None, *, turn_id: str | None = None,
              kind: Literal["main", "worker"] = "main",
              lease_seconds: float | None = None) -> ToolGate | AsyncToolGate:
    """The one gate of `session` on `client` (made on first use): every tool gated
    there is registered with the session together."""
    gates = _GATES.setdefault(client, {})
    found = gates.get(session)
    if found is None:
        cls = AsyncToolGate if isinstance(client, AsyncParkgateClient) else ToolGate
        found = cls(client, session, workspace, turn_id=turn_id,  # type: ignore[arg-type]
                    kind=kind, lease_seconds=lease_seconds)
        gates[session] = found
    elif workspace is not None and found.workspace_path not in (None, workspace):
        raise ValueError(f"session {session!r} is gated with workspace "
                         f"{found.workspace_path!r}, not {workspace!r}")
    elif workspace is not None:
        found.workspace_path = workspace
    return found  # type: ignore[no-any-return]


@overload
def gate(fn: Callable[P, Any], /, *, client: ParkgateClient, session: str,
         side_effects: SideEffects | str, name: str | None = None,
         description: str | None = None, workspace: str | None = None,
         wait: float | None = None,
         lease_seconds: float | None = None) -> GatedFunction[P]: ...
@overload
def gate(fn: Callable[P, Any], /, *, client: AsyncParkgateClient, session: str,
         side_effects: SideEffects | str, name: str | None = None,
         description: str | None = None, workspace: str | None = None,
         wait: float | None = None,
         lease_seconds: float | None = None) -> AsyncGatedFunction[P]: ...
@overload
def gate(fn: None = None, /, *, client: ParkgateClient | AsyncParkgateClient, session: str,
         side_effects: SideEffects | str, name: str | None = None,
         description: str | None = None, workspace: str | None = None,
         wait: float | None = None,
         lease_seconds: float | None = None) -> Callable[[Callable[..., Any]], Any]: ...
def gate(fn: Callable[..., Any] | None = None, /, *,
         client: ParkgateClient | AsyncParkgateClient, session: str,
         side_effects: SideEffects | str, name: str | None = None,
         description: str | None = None, workspace: str | None = None,
         wait: float | None = None, lease_seconds: float | None = None) -> Any:
    """Gate `fn` (decorator: `@gate(client=..., ...)`; call form: `gate(fn, client=...)`).

    `side_effects` (none, read, write, execute, network) is what parkgate's
    policy classifies the tool by: say what the function can do. `workspace`
    is the session's workspace (default: the current directory). `wait` bounds
    the wait for a human's decision (None: until decided or expired); then the
    call raises ParkedError carrying the request id and, for a key that may
    decide, the approval link; calling again with the same tool_use_id attaches.
    """
    session_gate = tool_gate(client, session, workspace)  # type: ignore[call-overload]
    decorate = session_gate.gate(side_effects=side_effects, name=name,
                                 description=description, wait=wait,
                                 lease_seconds=lease_seconds)
    return decorate if fn is None else decorate(fn)
