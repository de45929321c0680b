"""Built-in file tools: read_file, write_file, patch_file, list_dir."""

from __future__ import annotations

from typing import Any

from parkgate.context import ToolContext
from parkgate.models import SideEffects, TextBlock, ToolDefinition, ToolOutput
from parkgate.tools.base import BaseTool
from parkgate.truncation import truncate_entries, truncate_text, truncation_marker
from parkgate.workspaces.diffing import ImpactPreview, unified_diff, write_preview
from parkgate.workspaces.files import WorkspaceFileAPI, apply_patch


class ReadFileTool(BaseTool):
    definition = ToolDefinition(
        name="read_file",
        description="Read a UTF-8 text file from the workspace.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Workspace-relative file path."}
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.READ,
        path_fields=["path"],
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.check_cancelled(context)
        path = input["path"]
        text = context.workspace_files.read(path)
        shown = truncate_text(text, context.limits.file_chars)
        return ToolOutput(
            content=[TextBlock(text=shown)],
            metadata={
                "path": path,
                "chars": len(text),
                "content": text,
                "truncated": len(shown) != len(text),
            },
        )


class WriteFileTool(BaseTool):
    definition = ToolDefinition(
        name="write_file",
        description="Create or overwrite a UTF-8 text file in the workspace.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Workspace-relative file path."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
        path_fields=["path"],
    )

    def preview(self, input: dict[str, Any], files: WorkspaceFileAPI) -> ImpactPreview | None:
        return write_preview(files, input["path"], input["content"])

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.check_cancelled(context)
        files = context.workspace_files
        path = input["path"]
        existed = files.exists(path)
        files.write(path, input["content"])
        size = len(input["content"].encode("utf-8"))
        rel = files.relative(path)
        verb = "Overwrote" if existed else "Created"
        return ToolOutput(
            content=[TextBlock(text=f"{verb} {rel} ({size} bytes)")],
            metadata={"path": rel, "bytes_written": size, "created": not existed},
            files_modified=[rel],
        )


class PatchFileTool(BaseTool):
    definition = ToolDefinition(
        name="patch_file",
        description=(
            "Replace one exact, unique occurrence of `old` with `new` in a workspace file "
            "(str_replace style). Fails if `old` occurs zero or several times."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Workspace-relative file path."},
                "old": {"type": "string", "description": "Exact text to replace (unique)."},
                "new": {"type": "string", "description": "Replacement text."},
            },
            "required": ["path", "old", "new"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
        path_fields=["path"],
    )

    def preview(self, input: dict[str, Any], files: WorkspaceFileAPI) -> ImpactPreview | None:
        rel = files.relative(input["path"])
        try:
            old_text = files.read(input["path"])
            new_text = apply_patch(old_text, input["old"], input["new"], rel)
        except Exception as exc:  # the call will fail the same way when run
            return ImpactPreview(projected_impact=[f"will fail: {exc}"], files=[rel])
        return ImpactPreview(
            projected_impact=[f"will modify {rel}"],
            diff=unified_diff(old_text, new_text, rel),
            files=[rel],
        )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.check_cancelled(context)
        files = context.workspace_files
        rel = files.relative(input["path"])
        before = files.read(input["path"])
        after = apply_patch(before, input["old"], input["new"], rel)
        files.write(input["path"], after)
        diff = unified_diff(before, after, rel)
        return ToolOutput(
            content=[TextBlock(text=f"Patched {rel}\n{diff}")],
            metadata={"path": rel, "diff": diff},
            files_modified=[rel],
        )


class ListDirTool(BaseTool):
    definition = ToolDefinition(
        name="list_dir",
        description="List a workspace directory (directories end with '/').",
        input_schema={
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Workspace-relative directory.",
                    "default": ".",
                }
            },
            "additionalProperties": False,
        },
        side_effects=SideEffects.READ,
        path_fields=["path"],
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.check_cancelled(context)
        path = input.get("path", ".")
        entries = context.workspace_files.list(path)
        shown, more = truncate_entries(entries, context.limits.listing_entries)
        text = "\n".join(shown) if shown else "(empty directory)"
        if more:
            text += "\n" + truncation_marker(more, "entries")
        return ToolOutput(
            content=[TextBlock(text=text)],
            metadata={
                "path": path,
                "entries": entries,
                "count": len(entries),
                "truncated": bool(more),
            },
        )
