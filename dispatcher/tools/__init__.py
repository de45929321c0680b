"""Built-in tools. ``builtin_tools()`` returns the five v1 factories."""

from __future__ import annotations

from parkgate.registry import ToolFactory
from parkgate.tools.atomic_edit import AtomicEditTool, CheckedAtomicEditTool
from parkgate.tools.base import BaseTool
from parkgate.tools.files import ListDirTool, PatchFileTool, ReadFileTool, WriteFileTool
from parkgate.tools.shell import ShellTool, shell_guard


def builtin_tools() -> list[ToolFactory]:
    """Factories for read_file, write_file, patch_file, list_dir and shell."""
    return [ReadFileTool, WriteFileTool, PatchFileTool, ListDirTool, ShellTool]


def composed_tools() -> list[ToolFactory]:
    """Factories for atomic_edit (WRITE) and atomic_edit_checked (EXECUTE).

    Register them after builtin_tools(): a composed tool's sub-tools must exist.
    """
    return [AtomicEditTool, CheckedAtomicEditTool]


__all__ = [
    "AtomicEditTool",
    "BaseTool",
    "CheckedAtomicEditTool",
    "ListDirTool",
    "PatchFileTool",
    "ReadFileTool",
    "ShellTool",
    "WriteFileTool",
    "builtin_tools",
    "composed_tools",
    "shell_guard",
]
