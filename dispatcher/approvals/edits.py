"""What an approver's "Approve with edits" changed, told to the model.

A call that ran with approver-edited input returns a result the model would
otherwise read as the outcome of its own input; the note this module writes
goes before the tool's output (parkgate.activities' execute) and names each
changed field, with a short line diff for multi-line text. Pure: the workflow
builds it deterministically from the call's input and the approved one.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

#: Values of these keys never appear in a note (as the store redacts them).
_SECRET_KEY = re.compile(r"password|passwd|secret|token|api[_-]?key|authorization", re.I)
#: A value longer than this is cut in the note.
_VALUE_CHARS = 120
#: How every note begins (a client tells a noted result by it).
NOTE_HEAD = "Note: the approver changed this call's input before it ran"
#: At most this many diff lines per multi-line field.
_DIFF_LINES = 20
#: Longer text is not diffed (the workflow builds the note: it stays cheap).
_DIFF_CHARS = 64 * 1024


def _shown(key: str, value: Any) -> str:
    if _SECRET_KEY.search(key):
        return "[REDACTED]"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def _changed(key: str, before: Any, after: Any) -> str:
    if isinstance(before, str) and isinstance(after, str) and (
            max(len(before), len(after)) > _DIFF_CHARS):
        return f"- {key}: changed ({len(before)} -> {len(after)} characters)"
    if (isinstance(before, str) and isinstance(after, str)
            and ("\n" in before or "\n" in after) and not _SECRET_KEY.search(key)):
        lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(),
                                          lineterm="", n=0))[2:]
        shown = lines[:_DIFF_LINES]
        if len(lines) > len(shown):
            shown.append(f"... ({len(lines) - len(shown)} more diff lines)")
        return f"- {key}: changed\n" + "\n".join(f"    {line}" for line in shown)
    return f"- {key}: {_shown(key, before)} -> {_shown(key, after)}"


def edit_note(original: dict[str, Any], edited: dict[str, Any]) -> str | None:
    """The note for a call whose input an approver changed, or None if nothing
    changed (an edit that restates the input)."""
    lines: list[str] = []
    for key in sorted(set(original) | set(edited)):
        if key not in edited:
            lines.append(f"- {key}: removed (was {_shown(key, original[key])})")
        elif key not in original:
            lines.append(f"- {key}: added {_shown(key, edited[key])}")
        elif original[key] != edited[key]:
            lines.append(_changed(key, original[key], edited[key]))
    if not lines:
        return None
    return (f"{NOTE_HEAD} (approve with "
            "edits); the output below is for the changed input, not for the one you "
            "sent. Changed:\n" + "\n".join(lines))
