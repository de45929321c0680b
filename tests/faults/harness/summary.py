"""Suite-wide counters for the closing summary line.

Fault scenarios and hostile-input tests add to one process-wide tally; the
conftest hooks print it once at the end of the run:

    faults: calls run=N faults injected=N lost=0 duplicate executions=0 bad inputs tried=N 5xx=0
        decisions raced=N mismatches=0

Tests assert lost, duplicate executions and 5xx are zero for their own part;
the summary is the suite's record of what was tried.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass


@dataclass
class Tally:
    calls_run: int = 0
    faults_injected: int = 0
    lost: int = 0
    duplicate_executions: int = 0
    bad_inputs_tried: int = 0
    server_errors: int = 0
    #: Decisions sent in decision storms, and answers/records that disagreed.
    decisions_raced: int = 0
    decision_mismatches: int = 0

    def line(self) -> str:
        return (
            f"faults: calls run={self.calls_run} faults injected={self.faults_injected} "
            f"lost={self.lost} duplicate executions={self.duplicate_executions} "
            f"bad inputs tried={self.bad_inputs_tried} 5xx={self.server_errors} "
            f"decisions raced={self.decisions_raced} mismatches={self.decision_mismatches}"
        )


TALLY = Tally()
_LOCK = threading.Lock()
_printed = False


def add(
    *,
    calls_run: int = 0,
    faults_injected: int = 0,
    lost: int = 0,
    duplicate_executions: int = 0,
    bad_inputs_tried: int = 0,
    server_errors: int = 0,
    decisions_raced: int = 0,
    decision_mismatches: int = 0,
) -> None:
    """Add to the suite tally (thread-safe; hypothesis may run examples in threads)."""
    with _LOCK:
        TALLY.calls_run += calls_run
        TALLY.faults_injected += faults_injected
        TALLY.lost += lost
        TALLY.duplicate_executions += duplicate_executions
        TALLY.bad_inputs_tried += bad_inputs_tried
        TALLY.server_errors += server_errors
        TALLY.decisions_raced += decisions_raced
        TALLY.decision_mismatches += decision_mismatches


def snapshot() -> dict[str, int]:
    with _LOCK:
        return asdict(TALLY)


def take_line_once() -> str | None:
    """The summary line the first time it is asked for (several conftests hook in)."""
    global _printed
    with _LOCK:
        if _printed:
            return None
        _printed = True
        return TALLY.line()
