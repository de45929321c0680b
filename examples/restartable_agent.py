"""An agent that restarts keeps its calls.

A Pydantic AI agent (a scripted model: no network, no API key) asks parkgate to
write a report. The write parks for a human. Kill the agent (even with
SIGKILL), approve the call, start the agent again with the same conversation
id: it replays the conversation, re-dispatches the same tool call id, attaches
to the call parkgate kept, and gets the result. The write ran once.

    python examples/restartable_agent.py --url http://127.0.0.1:8420 \\
        --key "$AGENT_KEY" --session demo --workspace "$PWD" --conversation conv-1
"""

from __future__ import annotations

import argparse
import asyncio
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

from parkgate.adapters.pydantic_ai import parkgate_toolset
from parkgate.agent_client import AsyncParkgateClient


def scripted_model(conversation_id: str) -> FunctionModel:
    """Call write_file once (an id derived from the conversation), then answer."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(f"done: {part.content}")])
        call = ToolCallPart("write_file", {"path": "report.txt", "content": "quarterly report\n"},
                            tool_call_id=f"{conversation_id}-write-1")
        return ModelResponse(parts=[call])

    return FunctionModel(reply)


async def run(args: Any) -> str:
    async with AsyncParkgateClient(args.url, args.key) as gate:
        await gate.register_session(args.session, args.workspace)
        toolset = await parkgate_toolset(gate, args.session, turn_id=args.conversation,
                                         names=["write_file"])
        agent = Agent(scripted_model(args.conversation), toolsets=[toolset])
        print("agent: dispatching write_file (it may wait for a human)", flush=True)
        result = await agent.run("Write the quarterly report.")
        return str(result.output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--url", "--key", "--session", "--workspace", "--conversation"):
        parser.add_argument(flag, required=True)
    print(asyncio.run(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
