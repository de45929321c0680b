"""What an approver sees: projected workspace impact and unified diffs.

Computed read-only from the workspace during classify. Built-in file tools
implement ``preview(input, files)``; other tools fall back to their path fields.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel, Field

from parkgate.errors import ToolError
from parkgate.models import ToolDefinition
from parkgate.workspaces.files import WorkspaceFileAPI

#: Diffs longer than this are cut (the approval page is not a file viewer).
MAX_DIFF_CHARS = 64_000


class ImpactPreview(BaseModel):
    """Projected effect of a call on the workspace."""

    projected_impact: list[str] = Field(default_factory=list)
    diff: str | None = None
    files: list[str] = Field(default_factory=list)


def unified_diff(old: str, new: str, path: str) -> str:
    """A unified diff of ``old`` -> ``new`` for ``path`` (a/ b/ prefixes)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}" if old or new else "/dev/null",
        tofile=f"b/{path}",
    )
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    if len(text) > MAX_DIFF_CHARS:
        text = (
            text[:MAX_DIFF_CHARS] + f"\n[truncated: {len(text) - MAX_DIFF_CHARS} more characters]"
        )
    return text


def write_preview(files: WorkspaceFileAPI, path: str, new: str) -> ImpactPreview:
    """Impact of writing ``new`` to ``path``: create or modify, with a diff."""
    rel = files.relative(path)
    if files.exists(path) and not files.is_dir(path):
        try:
            old = files.read(path)
        except ToolError:
            return ImpactPreview(
                projected_impact=[f"will overwrite {rel} (binary or unreadable)"], files=[rel]
            )
        if old == new:
            return ImpactPreview(
                projected_impact=[f"will rewrite {rel} (no change)"], diff="", files=[rel]
            )
        return ImpactPreview(
            projected_impact=[f"will modify {rel}"], diff=unified_diff(old, new, rel), files=[rel]
        )
    diff = "".join(difflib.unified_diff([], new.splitlines(keepends=True), "/dev/null", f"b/{rel}"))
    return ImpactPreview(projected_impact=[f"will create {rel}"], diff=diff, files=[rel])


def generic_preview(
    definition: ToolDefinition, tool_input: dict[str, Any], files: WorkspaceFileAPI | None
) -> ImpactPreview:
    """Fallback: name the path fields (or the class) when a tool has no preview."""
    verb = {
        "read": "will read",
        "write": "may modify",
        "execute": "may run code affecting",
        "network": "may send",
    }.get(definition.side_effects.value, "will use")
    impact: list[str] = []
    touched: list[str] = []
    for field in definition.path_fields:
        value = tool_input.get(field)
        if isinstance(value, str) and files is not None:
            try:
                rel = files.relative(value)
            except ToolError:
                rel = value
            impact.append(f"{verb} {rel}")
            touched.append(rel)
    if not impact and definition.side_effects.value in ("execute", "network"):
        impact.append(
            f"{definition.side_effects.value.upper()}: {definition.name} "
            f"with {summarize_input(tool_input)}"
        )
    return ImpactPreview(projected_impact=impact, files=touched)


def summarize_input(tool_input: dict[str, Any], limit: int = 500) -> str:
    """A short, human-readable one-line summary of a call's arguments."""
    parts: list[str] = []
    for key, value in tool_input.items():
        if isinstance(value, str) and len(value) > 120:
            rendered = f"<{len(value)} chars>"
        else:
            rendered = json.dumps(value, ensure_ascii=False, default=str)
            if len(rendered) > 120:
                rendered = rendered[:117] + "..."
        parts.append(f"{key}={rendered}")
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
