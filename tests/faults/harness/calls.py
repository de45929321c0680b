"""Planned calls for the fault scenarios and the checks that prove nothing was
lost and nothing ran twice.

Every side-effecting call is a `shell` command that appends one line to its own
marker file (`markers/<tool_use_id>`) — the number of lines is the number of
times the tool really ran, whatever any process claims.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.harness.apiclient import TERMINAL

#: What happens to a call: runs at once, or parks and is then approved, denied
#: or cancelled.
KINDS = ("auto", "auto_read", "approve", "deny", "cancel")


@dataclass
class PlannedCall:
    kind: str
    session_id: str
    turn_id: str
    tool_use_id: str
    workspace: Path
    sleep: float = 0.0
    final: dict[str, Any] | None = None
    history: list[str] = field(default_factory=list)

    @property
    def marker(self) -> Path:
        return self.workspace / "markers" / self.tool_use_id

    @property
    def side_effecting(self) -> bool:
        return self.kind != "auto_read"

    @property
    def parks(self) -> bool:
        return self.kind in ("approve", "deny", "cancel")

    def block(self) -> dict[str, Any]:
        """The ToolUseBlock the agent sends."""
        if self.kind == "auto_read":
            return {"id": self.tool_use_id, "name": "read_file", "input": {"path": "README.txt"}}
        command = f"echo run >> markers/{self.tool_use_id}"
        if self.sleep:
            # Marker first, then linger: a crash now leaves "ran, outcome unknown",
            # exactly the case a retry would turn into a duplicate.
            command += f"; sleep {self.sleep:g}"
        return {"id": self.tool_use_id, "name": "shell", "input": {"command": command}}

    def runs(self) -> int:
        """How many times the tool really ran (lines in the marker file)."""
        try:
            return len(self.marker.read_text().splitlines())
        except FileNotFoundError:
            return 0


def plan(
    n: int,
    *,
    sessions: dict[str, Path],
    trusted: Path,
    mix: dict[str, float],
    rng: random.Random,
    sleep_range: tuple[float, float] = (0.0, 0.0),
    turn_id: str = "t1",
) -> list[PlannedCall]:
    """`n` calls drawn from `mix`; auto calls go to trusted sessions, parked ones elsewhere."""
    kinds = list(mix)
    weights = [mix[k] for k in kinds]
    trusted_sids = [s for s, ws in sessions.items() if ws == trusted]
    other_sids = [s for s, ws in sessions.items() if ws != trusted]
    calls = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        sid = rng.choice(trusted_sids if kind.startswith("auto") else other_sids)
        calls.append(
            PlannedCall(
                kind=kind,
                session_id=sid,
                turn_id=turn_id,
                tool_use_id=f"tu_{i:04d}_{kind}_{secrets.token_hex(3)}",
                workspace=sessions[sid],
                sleep=round(rng.uniform(*sleep_range), 2) if kind != "auto_read" else 0.0,
            )
        )
    return calls


@dataclass
class Verdict:
    """The outcome of checking a finished scenario."""

    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    outcome_unknown: int = 0

    def problems(self) -> str:
        parts = []
        for title, items in (("lost", self.lost), ("ran twice", self.duplicates),
                             ("wrong outcome", self.wrong)):
            if items:
                parts.append(f"{title} ({len(items)}): " + "; ".join(items[:10]))
        return "\n".join(parts)


OUTCOME_UNKNOWN = "outcome unknown"


def result_text(call: dict[str, Any]) -> str:
    result = call.get("result") or {}
    return "\n".join(
        str(b.get("text", "")) for b in result.get("content", []) if isinstance(b, dict)
    )


def check(calls: list[PlannedCall]) -> Verdict:
    """Every call terminal; at most one run each; the outcome matches the plan.

    A call whose worker died mid-run may end `failed` with "outcome unknown"
    (ran 0 or 1 times) — the honest answer; a retry (2 runs) never is.
    """
    verdict = Verdict()
    for c in calls:
        status = (c.final or {}).get("status")
        runs = c.runs()
        tag = f"{c.tool_use_id}[{c.kind}] status={status} runs={runs} seen={c.history[-4:]}"
        if status not in TERMINAL:
            verdict.lost.append(tag)
            continue
        if runs > 1:
            verdict.duplicates.append(tag)
            continue
        unknown = status == "failed" and OUTCOME_UNKNOWN in result_text(c.final or {})
        if unknown:
            verdict.outcome_unknown += 1
            if c.kind in ("deny", "cancel"):
                verdict.wrong.append(tag + " (should never have run)")
            continue
        expected = {
            "auto": ("succeeded", 1),
            "auto_read": ("succeeded", 0),
            "approve": ("succeeded", 1),
            "deny": ("denied", 0),
            "cancel": ("cancelled", 0),
        }[c.kind]
        if (status, runs) != expected:
            text = result_text(c.final or {})[:120]
            verdict.wrong.append(f"{tag} expected={expected} text={text!r}")
    return verdict
