"""Checking hash chains: pure functions over stored events (no database here).

A chain is one root call's events in `seq` order. Each event stores
`prev_hash` (the hash of the previous event of its chain, GENESIS for the
first), its `chain_index`, and `hash` = event_hash(prev_hash, fields). The
chain head row remembers the length and last hash, so deleting the newest
events is caught too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from parkgate.store.canonical import event_hash_matches
from parkgate.store.results import ChainProblem, VerifyReport

GENESIS = "0" * 64


def check_chain(
    session_id: str,
    chain_id: str,
    events: Sequence[Mapping[str, Any]],
    head: Mapping[str, Any] | None,
) -> ChainProblem | None:
    """The first problem of one chain (events in seq order), or None when intact."""

    def problem(kind: str, ev: Mapping[str, Any] | None, detail: str) -> ChainProblem:
        return ChainProblem.model_validate(
            {
                "kind": kind,
                "session_id": session_id,
                "chain_id": chain_id,
                "event_id": ev["event_id"] if ev else None,
                "seq": ev["seq"] if ev else None,
                "chain_index": ev["chain_index"] if ev else None,
                "detail": detail,
            }
        )

    present = {ev["chain_index"] for ev in events}
    expected_index = 0
    prev = GENESIS
    for ev in events:
        if not event_hash_matches(ev["hash"], ev["prev_hash"], ev):
            return problem("modified", ev, "stored fields do not match the event's hash")
        index = ev["chain_index"]
        if index != expected_index:
            if index > expected_index and expected_index not in present:
                return problem(
                    "deleted",
                    ev,
                    f"chain index {expected_index}"
                    + (f"..{index - 1}" if index - 1 > expected_index else "")
                    + f" missing before this event (index {index})",
                )
            return problem(
                "reordered",
                ev,
                f"stored at position {expected_index} of the chain but its index is {index}",
            )
        if ev["prev_hash"] != prev:
            return problem("modified", ev, "prev_hash does not match the preceding event's hash")
        prev = ev["hash"]
        expected_index += 1

    last = events[-1] if events else None
    if head is None:
        if events:
            return problem("modified", events[0], "the chain's head record is missing")
        return None
    length = int(head["length"])
    if length > expected_index:
        after = f" after seq {last['seq']}" if last else ""
        return problem(
            "deleted",
            None,
            f"chain has {expected_index} of {length} events; the newest"
            f" {length - expected_index} are missing{after}",
        )
    if length < expected_index or head["head_hash"] != prev:
        return problem("modified", last, "the chain head does not match the newest event")
    return None


def check_exported(events: Iterable[Mapping[str, Any]]) -> VerifyReport:
    """Check events as `parkgate audit export` wrote them (JSON Lines, each with
    its chain, index and hashes), without the database: every event's fields
    match its hash (in either canonical form: RFC 8785, or json.dumps for events
    written before issue 37) and every event follows the one before it in its
    chain. An export may hold part of a chain (its filters), so a gap or a
    missing head is not reported: `parkgate audit verify` checks those."""
    chains: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for ev in events:
        fields = dict(ev)
        if isinstance(fields.get("at"), str):
            fields["at"] = datetime.fromisoformat(fields["at"])
        chains.setdefault((str(fields["session_id"]), str(fields["chain_id"])), []).append(fields)
    report = VerifyReport(chains=len(chains))
    for (session_id, chain_id), chain in chains.items():
        chain.sort(key=lambda e: int(e["chain_index"]))
        prev: dict[str, Any] | None = None
        for ev in chain:
            report.events += 1
            detail = None
            if not event_hash_matches(str(ev["hash"]), str(ev["prev_hash"]), ev):
                detail = "exported fields do not match the event's hash"
            elif ev["chain_index"] == 0 and ev["prev_hash"] != GENESIS:
                detail = "the first event of the chain does not start from genesis"
            elif prev is not None and ev["chain_index"] == prev["chain_index"] + 1 \
                    and ev["prev_hash"] != prev["hash"]:
                detail = "prev_hash does not match the preceding event's hash"
            if detail is not None:
                report.problems.append(ChainProblem(
                    kind="modified", session_id=session_id, chain_id=chain_id,
                    event_id=ev.get("event_id"), seq=ev.get("seq"),
                    chain_index=ev.get("chain_index"), detail=detail))
            prev = ev
    return report


def exported_events(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The events of a JSON Lines export, call by call."""
    for line in lines:
        if line.strip():
            yield from json.loads(line).get("events") or []
