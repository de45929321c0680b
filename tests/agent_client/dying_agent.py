"""An agent process the kill tests SIGKILL: one gated call of `write_note`
under a given tool_use_id, through `@gate` (sync or async) or Pydantic AI's
`gated_toolset`. Each run of the function appends a line to a file (the
count the tests check); the process says on stdout how far it got.

    python -m tests.agent_client.dying_agent KIND BASE KEY SESSION TOOL_USE_ID RUNS WORKSPACE PAUSE

KIND: sync | async | pydantic. PAUSE: `reserved` hangs once the claim is
received, before it is started (where a kill leaves an unstarted reservation).
It prints READY once imported and waits for a line on stdin before it calls
(a test starts the restarted agent early; its start-up is not the restart).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from parkgate.agent_client import AsyncParkgateClient, ParkgateClient, gate

INPUT = {"text": "deploy once"}


def one_call(name: str, args: dict[str, Any], call_id: str) -> Any:
    """A scripted model: one tool call, then the tool's answer as its reply."""
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(f"tool said: {part.content}")])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    return FunctionModel(reply)


def say(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    kind, base, key, session, tid, runs, workspace, pause = sys.argv[1:9]
    runs_file = Path(runs)

    def note(text: str) -> str:
        runs_file.open("a").write(text + "\n")
        say("RAN")
        return f"wrote {text}"

    if pause == "reserved":  # received the claim; killed before starting it
        def hang(*_: Any, **__: Any) -> Any:
            say("RESERVED")
            time.sleep(3600)

        async def hang_async(*_: Any, **__: Any) -> Any:
            say("RESERVED")
            await asyncio.sleep(3600)

        ParkgateClient.start = hang  # type: ignore[method-assign]
        AsyncParkgateClient.start = hang_async  # type: ignore[method-assign]

    say("READY")
    sys.stdin.readline()
    if kind == "sync":
        with ParkgateClient(base, key) as pg:
            def write_note(text: str) -> str:
                """Write a note."""
                return note(text)

            gated = gate(write_note, client=pg, session=session, side_effects="write",
                         workspace=workspace)
            say("SUBMITTING")
            result = gated.call(INPUT, tool_use_id=tid)
            say(f"RESULT {result.is_error} {result.text}")
        return
    asyncio.run(_async(kind, base, key, session, tid, workspace, note))


async def _async(kind: str, base: str, key: str, session: str, tid: str, workspace: str,
                 note: Any) -> None:
    async with AsyncParkgateClient(base, key) as pg:
        async def write_note(text: str) -> str:
            """Write a note."""
            return str(note(text))

        if kind == "async":
            gated = gate(write_note, client=pg, session=session, side_effects="write",
                         workspace=workspace)
            say("SUBMITTING")
            result = await gated.call(INPUT, tool_use_id=tid)
            say(f"RESULT {result.is_error} {result.text}")
            return
        from pydantic_ai import Agent

        from parkgate.adapters.pydantic_ai import gated_toolset

        toolset = gated_toolset(pg, session, [write_note], side_effects="write",
                                workspace=workspace)
        agent = Agent(one_call("write_note", INPUT, tid), toolsets=[toolset])
        say("SUBMITTING")
        out = await agent.run("note it")
        say(f"RESULT False {out.output}")


if __name__ == "__main__":
    main()
