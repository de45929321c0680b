"""An agent's own tool behind parkgate, surviving a restart while it is parked.

A Pydantic AI agent (a scripted model: no network, no API key) has its own
function, `append_note`, put behind parkgate with `gated_toolset`. The model
calls it; parkgate parks the write for a human and the agent waits, saying
where to approve. Kill the agent (even with SIGKILL) and start it again with
the same conversation id: the model's tool call id is the same, so the call
attaches to the one parkgate kept. Approve it (the inbox, or `parkgate approve
REQUEST_ID`): the function runs here, once, and its outcome is recorded.

With `parkgate serve` running and its PARKGATE_API_URL and PARKGATE_API_KEY
exported, from the directory the notes should go to:

    python examples/own_tool_agent.py
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from parkgate.adapters.pydantic_ai import gated_toolset
from parkgate.agent_client import AsyncParkgateClient

NOTE = "ship the release on Friday"


def scripted_model(conversation_id: str) -> FunctionModel:
    """Call append_note once (an id derived from the conversation, so a restart
    calls it again with the same id), then answer with what the tool said."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(f"done: {part.content}")])
        call = ToolCallPart("append_note", {"text": NOTE},
                            tool_call_id=f"{conversation_id}-note-1")
        return ModelResponse(parts=[call])

    return FunctionModel(reply)


def notes_tool(workspace: Path) -> Any:
    """The agent's own tool: it appends to notes.txt in the workspace."""

    def append_note(text: str) -> str:
        """Append a line to notes.txt."""
        with (workspace / "notes.txt").open("a") as notes:
            notes.write(text + "\n")
        return f"appended {len(text)} characters to notes.txt"

    return append_note


async def run(args: argparse.Namespace) -> str:
    workspace = Path(args.workspace)
    async with AsyncParkgateClient(args.url, args.key) as client:
        toolset = gated_toolset(client, args.session, [notes_tool(workspace)],
                                side_effects="write", workspace=str(workspace))
        agent = Agent(scripted_model(args.conversation), toolsets=[toolset])
        print("agent: calling append_note (it waits while parked)", flush=True)
        result = await agent.run("Note the release day.")
        return str(result.output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("PARKGATE_API_URL",
                                                        "http://127.0.0.1:8420"))
    parser.add_argument("--key", default=os.environ.get("PARKGATE_API_KEY"))
    parser.add_argument("--session", default="own-tool-demo")
    parser.add_argument("--workspace", default=os.getcwd(), type=lambda p: str(Path(p).resolve()))
    parser.add_argument("--conversation", default="conv-1")
    args = parser.parse_args()
    if not args.key:
        parser.exit(2, "own_tool_agent: set PARKGATE_API_KEY (serve prints it) or pass --key\n")
    # The gate says once, on this logger, that the call parked and where to decide.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    print(asyncio.run(run(args)), flush=True)


if __name__ == "__main__":
    main()
