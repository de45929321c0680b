"""The Claude Agent SDK with every tool call behind parkgate.

The SDK's PreToolUse / PostToolUse hooks post to parkgate's Claude Code hook
endpoint; its answer is the hook output the SDK expects. Run with
PARKGATE_URL and PARKGATE_API_KEY (an agent key) set, and parkgate serving.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, query

URL = os.environ.get("PARKGATE_URL", "http://127.0.0.1:8420") + "/v1/hooks/claude-code"
KEY = os.environ["PARKGATE_API_KEY"]


async def gate(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
    """Ask parkgate; blocked when it cannot answer (fail closed)."""
    try:
        async with httpx.AsyncClient(timeout=90) as http:
            r = await http.post(URL, json=dict(input_data),
                                headers={"Authorization": f"Bearer {KEY}"})
            r.raise_for_status()
            return r.json()
    except httpx.HTTPError as exc:
        if input_data.get("hook_event_name") != "PreToolUse":
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "deny",
                                       "permissionDecisionReason": f"parkgate unreachable: {exc}"}}


async def main() -> None:
    options = ClaudeAgentOptions(hooks={
        event: [HookMatcher(matcher="*", hooks=[gate], timeout=90)]
        for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure")
    })
    async for message in query(prompt="Tidy up the README", options=options):
        print(message)


if __name__ == "__main__":
    asyncio.run(main())
