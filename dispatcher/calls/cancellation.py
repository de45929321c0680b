"""Who cancelled a call, through which channel, and why.

A call is cancelled through Temporal's cancel request, which carries one
string (`WorkflowHandle.cancel(reason=...)`); the workflow reads it back with
`workflow.cancellation_reason()`. parkgate puts a small JSON object there
(`Cancellation.encode`) so the call's final row and its tool.failed event can
say who asked. The string lives in the cancel request's history event, so
reading it in the workflow is deterministic; histories from before carry ""
and decode to None, and their records stay word for word as they were.
A reason given outside parkgate (`temporal workflow cancel --reason`) is kept
as the reason, with no canceller.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

#: The longest free-text reason a caller may give (API body, `--reason`).
MAX_REASON_CHARS = 500
#: What a recorded part is clipped to (a reason from outside parkgate is unchecked).
_CLIP = 1000
#: Control characters, the ones that reorder or hide text on a screen, and
#: lone surrogates (bytes that were not UTF-8: a terminal's argv, a JSON escape).
_REFUSED = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
    "\ud800-\udfff]"
)
#: Marks parkgate's encoding (a plain string is someone else's reason).
_TAG = "parkgate_cancel"

#: The channels (`via`) parkgate's cancel paths name.
VIA_API = "api"
VIA_SESSION = "session cancel"
VIA_MCP = "mcp tasks/cancel"
VIA_CLI = "parkgate cancel"
VIA_HOOK = "hook"


def check_reason(text: str | None) -> str | None:
    """A caller's free-text reason, or ValueError saying why it is refused
    (too long, control or bidi characters); blank is no reason."""
    if text is None or not text.strip():
        return None
    if len(text) > MAX_REASON_CHARS:
        raise ValueError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    if _REFUSED.search(text):
        raise ValueError("the reason contains control characters or bytes that are not UTF-8")
    return text.strip()


class Cancellation(BaseModel):
    """Who (`by`), through which channel (`via`), why (`reason`); each optional."""

    by: str | None = None
    via: str | None = None
    reason: str | None = None

    def encode(self) -> str:
        """The string sent as the Temporal cancel request's reason."""
        return json.dumps({_TAG: 1, "by": self.by, "via": self.via, "reason": self.reason},
                          ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | None) -> Cancellation | None:
        """The cancellation a request's reason carries; None when it carries
        none (no reason, or a history from before reasons were sent)."""
        if not raw:
            return None
        try:
            data: Any = json.loads(raw)
        except (ValueError, RecursionError):  # any text a Temporal client sent
            data = None
        if isinstance(data, dict) and data.get(_TAG) == 1:
            found = cls(by=_part(data.get("by")), via=_part(data.get("via")),
                        reason=_part(data.get("reason")))
        else:
            found = cls(reason=_part(raw))
        return found if (found.by or found.via or found.reason) else None

    def suffix(self) -> str:
        """' (by key 'ci-agent' via api: too slow)', for the result text."""
        who = " ".join(p for p in (f"by {self.by}" if self.by else "",
                                   f"via {self.via}" if self.via else "") if p)
        if who and self.reason:
            return f" ({who}: {self.reason})"
        return f" ({who or self.reason})"

    def details(self) -> dict[str, Any]:
        """The tool.failed event's data: `cancelled_by`, `via`, `reason`."""
        return {"cancelled_by": self.by, "via": self.via, "reason": self.reason}


def _part(value: Any) -> str | None:
    """One recorded part: text, clipped, control characters replaced."""
    if not isinstance(value, str) or not value.strip():
        return None
    return _REFUSED.sub("?", value.strip())[:_CLIP]
