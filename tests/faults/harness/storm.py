"""A decision storm: many humans deciding one parked call at the same moment,
through the approval link, the HTTP API and the CLI, with mixed decisions.

Each decider records what it was told (won, or lost naming a winner); the
checks then hold every answer against what the store recorded and against the
file on disk. Decider names are unique, so "the 409 names the winner" is a
string comparison, whatever channel answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.faults.harness.apiclient import AgentClient
from tests.faults.harness.stack import Stack
from tests.faults.harness.stuck import explain

#: How long one decider keeps retrying while workers or the store are down.
#: A decider retries honest 503s (no worker alive: round 1 kills one every
#: 0.3-1.5 s for as long as any decider is still trying) up to this long.
#: PARKGATE_STORM_DEADLINE overrides it (a short one shows the stuck reports).
DECIDE_DEADLINE = float(os.environ.get("PARKGATE_STORM_DEADLINE") or 180.0)
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Decider:
    name: str
    via: str  # api | link | cli
    decision: str  # allow | deny | allow_with_edits
    #: "won" or "lost" once answered; "error" when no answer came in time.
    told: str = ""
    #: The winner's name a "lost" answer gave (None when it named nobody).
    named: str | None = None
    #: HTTP status (or CLI exit code) of the final answer.
    status: int | None = None
    #: API deciders: their own approver key (the key is who decides; its name is
    #: the decider's name).
    key: str | None = None
    attempts: int = 0
    detail: str = ""

    def edits(self, path: str) -> dict[str, Any] | None:
        if self.decision != "allow_with_edits":
            return None
        return {"path": path, "content": f"edited by {self.name}\n"}


@dataclass
class StormCall:
    session_id: str
    turn_id: str
    tool_use_id: str
    workspace: Path
    deciders: list[Decider] = field(default_factory=list)
    request_id: str = ""
    approval_path: str = ""
    final: dict[str, Any] | None = None
    #: What the stack showed when a decider of this call gave up unanswered
    #: (tests/faults/harness/stuck.py), one report per such decider.
    stuck: list[str] = field(default_factory=list)

    @property
    def rel_path(self) -> str:
        return f"storm/{self.tool_use_id}.txt"

    @property
    def file(self) -> Path:
        return self.workspace / self.rel_path

    def block(self) -> dict[str, Any]:
        return {
            "id": self.tool_use_id,
            "name": "write_file",
            "input": {"path": self.rel_path, "content": "original\n"},
        }


def api_key_name(i: int) -> str:
    """The name of the i-th API decider's approver key (shared across calls)."""
    return f"storm-api{i:02d}"


def plan_deciders(
    tool_use_id: str, *, api: int, link: int, cli: int, api_keys: list[str]
) -> list[Decider]:
    """Deciders over the three channels with allow / deny / allow_with_edits mixed
    (the CLI has no edit form: it alternates allow and deny). An API decider is
    its key (`api_keys[i]`, named api_key_name(i)); link and CLI deciders give
    a name unique to the call."""
    mix = ("allow", "deny", "allow_with_edits")
    out: list[Decider] = []
    for via, count in (("api", api), ("link", link), ("cli", cli)):
        for i in range(count):
            choice = ("allow", "deny")[i % 2] if via == "cli" else mix[i % 3]
            if via == "api":
                out.append(Decider(api_key_name(i), via, choice, key=api_keys[i]))
            else:
                out.append(Decider(f"{via}{i}-{tool_use_id}", via, choice))
    return out


def confirmation_path(call: StormCall) -> str:
    """Where an API decider posts its decision."""
    return (f"/v1/sessions/{call.session_id}/turns/{call.turn_id}"
            f"/confirmations/{call.request_id}")


def who(record: dict[str, Any]) -> str | None:
    """The decider a record names: the authenticated one, else the typed claim."""
    return record.get("decided_by") or record.get("claimed_name")


async def decide_api(client: AgentClient, call: StormCall, d: Decider) -> None:
    body: dict[str, Any] = {"decision": d.decision, "reason": f"storm {d.decision}"}
    if (edits := d.edits(call.rel_path)) is not None:
        body["edited_input"] = edits
    try:
        r = await client.request(
            "POST", confirmation_path(call), json=body,
            headers={"Authorization": f"Bearer {d.key}"},
            deadline=time.monotonic() + DECIDE_DEADLINE,
        )
    except TimeoutError as exc:  # retried its 503s until the deadline
        d.told, d.detail = "error", str(exc)
        return
    d.attempts += 1
    d.status = r.status_code
    if r.status_code == 200:
        d.told = "won"
        return
    if r.status_code == 409:
        d.told = "lost"
        winner = (r.json().get("error", {}).get("details") or {}).get("winner") or {}
        d.named = who(winner)
        return
    d.told, d.detail = "error", f"{r.status_code} {r.text[:200]}"


async def decide_link(base_url: str, call: StormCall, d: Decider) -> None:
    """A human with the link open: load the page (CSRF), then post the form."""
    deadline = time.monotonic() + DECIDE_DEADLINE
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        while True:
            d.attempts += 1
            try:
                page = await http.get(call.approval_path)
                match = _CSRF.search(page.text) if page.status_code == 200 else None
                if match is None and page.status_code == 200:
                    # The page shows the decision already: a lost race before posting.
                    d.told, d.status = "lost", 409
                    d.named = _named_on_page(page.text, call)
                    if d.named is None:
                        d.detail = "GET: " + _page_text(page.text)
                    return
                if match is not None:
                    form = {
                        "csrf": match.group(1),
                        "decision": d.decision,
                        "approver": d.name,
                        "reason": f"storm {d.decision}",
                    }
                    if (edits := d.edits(call.rel_path)) is not None:
                        form["edited_input"] = json.dumps(edits)
                    r = await http.post(call.approval_path, data=form)
                    d.status = r.status_code
                    if r.status_code == 200:
                        d.told = "won"
                        return
                    if r.status_code == 409:
                        d.told = "lost"
                        d.named = _named_on_page(r.text, call)
                        if d.named is None:
                            d.detail = _page_text(r.text)
                        return
                    d.detail = f"{r.status_code} {_page_text(r.text)[:300]}"
                else:
                    d.detail = f"page {page.status_code}"
            except httpx.TransportError as exc:
                d.detail = f"{type(exc).__name__}"
            if time.monotonic() > deadline:
                d.told = "error"
                return
            await asyncio.sleep(0.5)


def _page_text(html: str) -> str:
    """The visible words of a page, for a failure message."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))[:600]


def _named_on_page(text: str, call: StormCall) -> str | None:
    """The decider name a decided approval page shows (names are unique per call)."""
    names = [d.name for d in call.deciders if d.name in text]
    return names[0] if len(names) == 1 else None


async def decide_cli(stack: Stack, call: StormCall, d: Decider) -> None:
    """`parkgate approve|deny REQUEST --as NAME`, retried while it cannot answer."""
    deadline = time.monotonic() + DECIDE_DEADLINE
    args = ["approve" if d.decision == "allow" else "deny", call.request_id, "--as", d.name,
            "--reason", f"storm {d.decision}"]
    while True:
        d.attempts += 1
        res = await stack.acli(*args, timeout=max(DECIDE_DEADLINE, 60.0))
        d.status = res.returncode
        if res.returncode == 0:
            d.told = "won"
            return
        err = res.stderr + res.stdout
        if "already decided" in err:
            d.told = "lost"
            found = re.search(r"already decided: \w+ by (\S+)", err)
            d.named = found.group(1) if found else None
            return
        d.detail = err.strip().splitlines()[-1][:200] if err.strip() else f"exit {res.returncode}"
        if time.monotonic() > deadline:
            d.told = "error"
            return
        await asyncio.sleep(0.5)


async def storm(stack: Stack, client: AgentClient, calls: list[StormCall]) -> None:
    """Every decider of every call at once."""

    async def one(call: StormCall, d: Decider) -> None:
        if d.via == "api":
            await decide_api(client, call, d)
        elif d.via == "link":
            await decide_link(stack.base_url, call, d)
        else:
            await decide_cli(stack, call, d)
        if d.told == "error":
            # Taken now, while the call is still stuck (the chaos goes on while
            # any decider tries): the next failure says why.
            try:
                why = await explain(stack, call.session_id, call.tool_use_id,
                                    [call.approval_path, call.request_id])
            except Exception as exc:  # the report must not hide the failure
                why = f"(no report: {type(exc).__name__}: {exc})"
            call.stuck.append(f"==== {d.name} ({d.via}, {d.decision}) gave up: {d.detail}\n"
                              + why)

    await asyncio.gather(*(one(c, d) for c in calls for d in c.deciders))


@dataclass
class StormVerdict:
    raced: int = 0
    mismatches: list[str] = field(default_factory=list)
    #: Winners told on a retry (their first attempt won, the answer was lost).
    won_on_retry: int = 0
    #: Allowed calls whose worker died mid-write (outcome unknown: file not checked).
    outcome_unknown: int = 0


def check_storm(calls: list[StormCall], events: dict[str, list[dict[str, Any]]]) -> StormVerdict:
    """Hold every decider's answer against the recorded winner and the file on disk."""
    v = StormVerdict()
    for call in calls:
        v.raced += len(call.deciders)
        tag = call.tool_use_id
        final = call.final or {}
        recorded = who(final)
        decision = final.get("decision")
        winners = [d for d in call.deciders if d.told == "won"]
        self_named = [d for d in call.deciders if d.told == "lost" and d.named == d.name]
        v.won_on_retry += len(self_named)
        told_won = winners + self_named
        if len(winners) > 1:
            v.mismatches.append(f"{tag}: {len(winners)} deciders were told they won")
        if len(told_won) != 1:
            v.mismatches.append(
                f"{tag}: {len(told_won)} deciders think they won "
                f"({[d.name for d in told_won]})"
            )
        for d in call.deciders:
            if d.told == "error":
                v.mismatches.append(f"{tag}: {d.name} ({d.via}) got no answer: {d.detail}")
            elif d.told == "lost" and d.named != recorded:
                v.mismatches.append(
                    f"{tag}: {d.name} ({d.via}) was told {d.named} won; recorded {recorded}"
                    + (f" [{d.detail}]" if d.detail else "")
                )
        if told_won and told_won[0].name != recorded:
            v.mismatches.append(f"{tag}: {told_won[0].name} was told it won; recorded {recorded}")
        resolved = [e for e in events.get(tag, []) if e.get("type") == "tool.confirmation_resolved"]
        if len(resolved) != 1:
            v.mismatches.append(f"{tag}: {len(resolved)} confirmation_resolved events")
        else:
            data = resolved[0].get("data") or {}
            if (data.get("decision"), who(data)) != (decision, recorded):
                v.mismatches.append(
                    f"{tag}: event says {data.get('decision')} by {who(data)}, "
                    f"call says {decision} by {recorded}"
                )
        types = [e.get("type") for e in events.get(tag, [])]
        status = final.get("status")
        if decision == "deny":
            if call.file.exists():
                v.mismatches.append(f"{tag}: denied by {recorded} but the file was written")
            if "tool.called" in types:
                v.mismatches.append(f"{tag}: denied but tool.called recorded")
        elif decision in ("allow", "allow_with_edits"):
            if status == "succeeded":
                winner = next((d for d in call.deciders if d.name == recorded), None)
                want = (
                    winner.edits(call.rel_path)["content"]  # type: ignore[index]
                    if winner is not None and decision == "allow_with_edits"
                    else "original\n"
                )
                got = call.file.read_text() if call.file.exists() else None
                if got != want:
                    v.mismatches.append(f"{tag}: {decision} by {recorded}: file is {got!r}")
            elif status == "failed":
                v.outcome_unknown += 1
            else:
                v.mismatches.append(f"{tag}: allowed but ended {status}")
        else:
            v.mismatches.append(f"{tag}: no decision recorded (status {status})")
    return v
