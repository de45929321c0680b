"""Checking hash chains: pure functions over stored events (no database here).

A chain is one root call's events in `seq` order. Each event stores
`prev_hash` (the hash of the previous event of its chain, GENESIS for the
first), its `chain_index`, and `hash` = event_hash(prev_hash, fields). The
chain head row remembers the length and last hash, so deleting the newest
events is caught too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from parkgate.store.canonical import event_hash
from parkgate.store.results import ChainProblem

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
        if event_hash(ev["prev_hash"], dict(ev)) != ev["hash"]:
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
