"""atomic_edit: read -> exact replacement -> (check) -> write, approved once.

Two registrations keep the side-effect label honest (classification is by
capability): ``atomic_edit`` (WRITE; composed of read_file + write_file) and
``atomic_edit_checked`` (EXECUTE; adds shell for the ``check`` command).

With a check, the candidate content is put in place, the check runs in the
workspace (so project-level checks see the change), and if the check fails —
or is denied, times out or is cancelled — the original bytes are written
back. The edit is therefore kept only if the check passes.
"""

from __future__ import annotations

from typing import Any

from parkgate.context import ToolContext
from parkgate.errors import ToolExecutionError
from parkgate.models import SideEffects, TextBlock, ToolDefinition, ToolOutput
from parkgate.tools.base import BaseTool
from parkgate.tools.shell import command_notes, shell_guard
from parkgate.truncation import Limits, truncate_text
from parkgate.verdicts import ToolRun
from parkgate.workspaces.diffing import ImpactPreview, unified_diff
from parkgate.workspaces.files import WorkspaceFileAPI, apply_patch

_PROPS: dict[str, Any] = {
    "path": {"type": "string", "description": "Workspace-relative file path."},
    "old": {"type": "string", "description": "Exact text to replace (must be unique)."},
    "new": {"type": "string", "description": "Replacement text."},
}


def _sub_output(run: ToolRun) -> ToolOutput:
    if run.output is None:
        raise ToolExecutionError(run.result.text)
    return run.output


class AtomicEditTool(BaseTool):
    """Edit one file as a single approved operation."""

    definition = ToolDefinition(
        name="atomic_edit",
        description=(
            "Replace one exact, unique occurrence of `old` with `new` in a file, as one "
            "approved operation (reads, then writes through read_file/write_file)."
        ),
        input_schema={
            "type": "object",
            "properties": dict(_PROPS),
            "required": ["path", "old", "new"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
        path_fields=["path"],
        composed_of=["read_file", "write_file"],
        atomic=True,
    )

    def preview(self, input: dict[str, Any], files: WorkspaceFileAPI) -> ImpactPreview | None:
        rel = files.relative(input["path"])
        try:
            before = files.read(input["path"])
            after = apply_patch(before, input["old"], input["new"], rel)
        except Exception as exc:
            return ImpactPreview(projected_impact=[f"will fail: {exc}"], files=[rel])
        impact = [f"will modify {rel}"]
        if input.get("check"):
            impact.append(
                f"will run check `{input['check']}` in the workspace; the edit is rolled "
                "back if it fails"
            )
            impact.extend(command_notes(input["check"]))
        return ImpactPreview(
            projected_impact=impact, diff=unified_diff(before, after, rel), files=[rel]
        )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.check_cancelled(context)
        sub = context.registry
        if sub is None:  # only reachable if run outside the pipeline
            raise ToolExecutionError("atomic_edit needs the pipeline's sub-tool registry")
        path = input["path"]
        read = await sub.execute("read_file", {"path": path})
        if read.result.is_error:
            raise ToolExecutionError(f"Could not read {path}: {read.result.text}")
        original = _sub_output(read).metadata["content"]
        updated = apply_patch(original, input["old"], input["new"], path)
        rel = context.workspace_files.relative(path)
        diff = unified_diff(original, updated, rel)
        written = await sub.execute("write_file", {"path": path, "content": updated})
        if written.result.is_error:
            raise ToolExecutionError(f"Could not write {path}: {written.result.text}")
        check = input.get("check")
        metadata: dict[str, Any] = {"path": rel, "diff": diff, "check": None}
        if check:
            ran = await sub.execute("shell", {"command": check})
            check_text = truncate_text(ran.result.text, context.limits.text_chars // 2)
            metadata["check"] = {
                "command": check,
                "passed": not ran.result.is_error,
                "error_class": ran.error_class,
                "output": ran.output.metadata if ran.output else None,
            }
            if ran.result.is_error:
                restored = await sub.execute("write_file", {"path": path, "content": original})
                if restored.result.is_error:
                    raise ToolExecutionError(
                        f"Check `{check}` failed and restoring {rel} failed too: "
                        f"{restored.result.text}"
                    )
                return ToolOutput(
                    content=[
                        TextBlock(
                            text=f"Check `{check}` failed; {rel} was restored to its original "
                            f"content (nothing changed).\n{check_text}"
                        )
                    ],
                    success=False,
                    metadata=metadata | {"rolled_back": True},
                    files_modified=[],
                    command_executed=check,
                )
        summary = f"Edited {rel}"
        if check:
            summary += f"; check `{check}` passed"
        return ToolOutput(
            content=[TextBlock(text=f"{summary}.\n{diff}")],
            metadata=metadata | {"rolled_back": False},
            files_modified=[rel],
            command_executed=check or None,
        )


class CheckedAtomicEditTool(AtomicEditTool):
    """atomic_edit plus a check command: EXECUTE, because it runs a shell command."""

    definition = ToolDefinition(
        name="atomic_edit_checked",
        description=(
            "Like atomic_edit, then run `check` (a shell command) in the workspace; the edit is "
            "kept only if the check exits 0, otherwise the file is restored."
        ),
        input_schema={
            "type": "object",
            "properties": {
                **_PROPS,
                "check": {"type": "string", "description": "Shell command that must pass."},
            },
            "required": ["path", "old", "new", "check"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.EXECUTE,
        path_fields=["path"],
        composed_of=["read_file", "write_file", "shell"],
        atomic=True,
    )

    def check_input(self, input: dict[str, Any], limits: Limits) -> list[str]:
        return [
            p.replace("$.command", "$.check")
            for p in shell_guard(input.get("check"), limits.shell_max_command_chars)
        ]
