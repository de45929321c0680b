"""Presentation helpers shared by the HTML pages: times, durations, diffs, JSON."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from fastapi.templating import Jinja2Templates
    from starlette.responses import Response

# resolve(): under a strict editable install the package is a tree of symlinks,
# and Starlette's StaticFiles refuses files whose real path leaves its directory.
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"


def page_headers(csp: str, referrer: str = "no-referrer") -> dict[str, str]:
    """The headers of an HTML page: never cached, framed or MIME-sniffed, with
    the page's own Content-Security-Policy (pages that carry a token in their URL
    keep the default `no-referrer`, so it never leaves in a Referer)."""
    return {
        "Cache-Control": "no-store",
        "Referrer-Policy": referrer,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": csp,
    }


def fmt_dt(value: datetime | None) -> str:
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_ms(value: float | None) -> str:
    """A duration for humans: 850 ms, 2.4 s, 3 min 5 s, 2 h 10 min."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{value:.0f} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    return fmt_span(seconds)


def fmt_span(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def expires_text(expires_at: datetime | None, now: datetime) -> str:
    if expires_at is None:
        return "never"
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    left = (expires_at - now).total_seconds()
    if left <= 0:
        return f"expired {fmt_dt(expires_at)}"
    return f"in {fmt_span(left)} ({fmt_dt(expires_at)})"


def diff_lines(diff: str | None) -> list[tuple[str, str]]:
    """Classify unified-diff lines for colouring: add, del, hunk, meta, ctx."""
    if not diff:
        return []
    out: list[tuple[str, str]] = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "meta"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("\\"):
            kind = "meta"
        else:
            kind = "ctx"
        out.append((kind, line))
    return out


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


#: Characters that must not reach a page raw: C0 controls (except tab and
#: newline), DEL, C1 controls, bidi overrides/isolates and Unicode line breaks
#: (they can reorder or hide what an approver reads).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def visible(text: str) -> str:
    """Show control and direction-changing characters as escapes (`\\x1b`, `\\u202e`)."""

    def esc(match: re.Match[str]) -> str:
        code = ord(match.group(0))
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _INVISIBLE.sub(esc, text)


def _finalize(value: Any) -> Any:
    """Jinja finalize: every `{{ }}` output goes through `visible` (then autoescape)."""
    if value is None or isinstance(value, Markup | int | float | bool):
        return value
    return visible(str(value))


def _jinja_templates() -> Jinja2Templates:
    from fastapi.templating import Jinja2Templates

    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    templates.env.finalize = _finalize
    templates.env.globals.update(fmt_ms=fmt_ms, fmt_dt=fmt_dt)
    return templates


class Templates:
    """The pages' templates, loaded when the first page is rendered: an API that
    serves agents only never imports Jinja2 (docs/PERFORMANCE.md, "At rest")."""

    def __init__(self) -> None:
        self._templates: Jinja2Templates | None = None

    @property
    def jinja(self) -> Jinja2Templates:
        """Starlette's Jinja2Templates over the pages' directory (built once)."""
        if self._templates is None:
            self._templates = _jinja_templates()
        return self._templates

    def TemplateResponse(self, *args: Any, **kwargs: Any) -> Response:  # Starlette's name
        """`Jinja2Templates.TemplateResponse`, same arguments."""
        return self.jinja.TemplateResponse(*args, **kwargs)


def make_templates() -> Templates:
    return Templates()
