"""What the sync and async gates share: what to do next with a call, the claim
shape, the results parkgate's verdicts become, and the outcome retry timing."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, model_validator

from parkgate.agent_client import _common as c
from parkgate.agent_client._common import Execute, Flow, Sleep, Use
from parkgate.agent_client.client_tools import (
    ClientToolDefinition,
    FunctionSignature,
    content_of,
    definition,
    description_of,
    error_text,
    local_result,
)
from parkgate.agent_client.edited import note_for, with_note
from parkgate.agent_client.errors import (
    CallNotFinishedError,
    ConflictError,
    OutcomeNotRecordedError,
    ParkedError,
    UnavailableError,
)
from parkgate.calls.wire import CallResource
from parkgate.models import (
    SideEffects,
    TextBlock,
    ToolErrorClass,
    ToolResultBlock,
    ToolUseBlock,
    is_input_sha256,
)

#: Statuses (by value) in which the client's next move is to claim the call.
RELEASED = "released"
#: 409 code of a claim on a call its workflow has not released (yet): retry.
NOT_RELEASED = "not_released"
#: Statuses in which a human (or a quorum) has yet to decide.
UNDECIDED = frozenset({"queued", "parked"})


log = logging.getLogger("parkgate.agent_client")
#: A client's `on_notice`: called once when a gated call parks, once when it goes on.
NoticeHandler = Callable[["Notice"], None]


@dataclass(frozen=True)
class Notice:
    """A gated call waiting for a human, or going on again: told once each, so
    a waiting agent does not look deadlocked. `inbox_url` is where to decide
    (never the signed approval link: logs are read by more people than approvers)."""

    kind: Literal["parked", "resumed"]
    tool: str
    tool_use_id: str
    request_id: str | None
    inbox_url: str
    status: str


@dataclass
class Announcer:
    """Tells a call's parking and resumption once each: a WARNING on
    `parkgate.agent_client`, and the client's `on_notice` if given."""

    tool: str
    inbox_url: str
    on_notice: NoticeHandler | None = None
    parked: Notice | None = None
    resumed: bool = False

    def saw(self, resource: CallResource) -> None:
        status = resource.status.value
        if self.parked is None and status == "parked":
            self.parked = self._notice("parked", resource)
            log.warning("parkgate: %s call %s is parked for approval (request %s); "
                        "decide at %s", self.tool, resource.tool_use_id,
                        resource.request_id, self.inbox_url)
            self._tell(self.parked)
        elif self.parked is not None and not self.resumed and status not in UNDECIDED:
            self.resumed = True
            log.warning("parkgate: %s call %s resumed: %s (request %s)", self.tool,
                        resource.tool_use_id, status, self.parked.request_id)
            self._tell(self._notice("resumed", resource))

    def _notice(self, kind: Literal["parked", "resumed"], resource: CallResource) -> Notice:
        request_id = resource.request_id or (self.parked.request_id if self.parked else None)
        return Notice(kind, self.tool, resource.tool_use_id, request_id, self.inbox_url,
                      resource.status.value)

    def _tell(self, notice: Notice) -> None:
        if self.on_notice is None:
            return
        try:
            self.on_notice(notice)
        except Exception:  # a broken callback must not lose the call
            log.exception("parkgate: on_notice raised for %s", notice.tool_use_id)


def inbox_url(base_url: str) -> str:
    """The approval inbox of the server at `base_url` (its `/inbox` page)."""
    return base_url.rstrip("/") + "/inbox"


#: How long a non-blocking caller watches a fresh call for policy's verdict.
PROBE_SECONDS = 10.0


def declaration(tools: Mapping[str, ClientToolDefinition]
                ) -> tuple[list[ClientToolDefinition], str]:
    """A gate's tools in name order, and the fingerprint the gate compares to
    register the session again only when its tools changed."""
    ordered = sorted(tools.values(), key=lambda t: t.name)
    return ordered, json.dumps([t.wire() for t in ordered], sort_keys=True)


def require_tool(tools: Mapping[str, ClientToolDefinition], name: str) -> None:
    """KeyError unless `name` is one of the gate's client tools (before anything is sent)."""
    if name not in tools:
        raise KeyError(f"{name!r} is not a client tool of this gate")


class GateBase:
    """A session's client tools and how their calls are submitted: what the
    sync and async gates hold alike (they add the client and the driving)."""

    def __init__(
        self, session_id: str, workspace_path: str | None, turn_id: str | None,
        kind: Literal["main", "worker"], lease_seconds: float | None,
    ) -> None:
        self.session_id = session_id
        self.workspace_path = workspace_path
        self.turn_id = turn_id
        self.kind: Literal["main", "worker"] = kind
        self.lease_seconds = lease_seconds
        self.tools: dict[str, ClientToolDefinition] = {}
        self._registered: str | None = None  # the declaration last registered

    def add(self, tool: ClientToolDefinition) -> ClientToolDefinition:
        """Declare a client tool (registered with the session before its first call)."""
        self.tools[tool.name] = tool  # the latest declaration stands, as on the server
        return tool


class GatedBase:
    """A plain function behind a gate: its declaration, added to the gate."""

    def __init__(
        self, fn: Callable[..., Any], tool_gate: GateBase, side_effects: SideEffects | str,
        name: str | None, description: str | None, wait: float | None,
        lease_seconds: float | None,
    ) -> None:
        self.fn = fn
        self._call: Callable[..., Any] = fn  # called with the released kwargs
        self.signature = FunctionSignature(fn)
        self.definition = tool_gate.add(definition(
            name or fn.__name__, description or description_of(fn), self.signature.schema(),
            side_effects))
        self.wait = wait
        #: The lease asked for when claiming (None: the gate's, else the server's default).
        self.lease_seconds = lease_seconds
        self.__name__ = self.definition.name
        self.__doc__ = fn.__doc__


class Step(Enum):
    """The client's next move on a call, from its status."""

    CLAIM = "claim"      # released: claim it and run the function
    DONE = "done"        # finished: the recorded result is the answer
    DECIDING = "deciding"  # queued or parked: wait for a decision (or stop: parked)
    RUNNING = "running"  # claimed (by this or another client): wait for its outcome


def step_of(resource: CallResource) -> Step:
    status = resource.status.value
    if resource.finished:
        return Step.DONE
    if status == RELEASED:
        return Step.CLAIM
    if status in UNDECIDED:
        return Step.DECIDING
    return Step.RUNNING


class Claim(BaseModel):
    """200 of `POST .../claim`: the input to run, its hash, the lease."""

    model_config = ConfigDict(extra="ignore")

    input: dict[str, Any]
    input_sha256: str
    lease_expires_at: datetime | None = None
    #: The reservation to start before running (None: a server before reservations).
    claim_id: str | None = None
    started: bool = True

    @model_validator(mode="after")
    def _hash_matches(self) -> Claim:
        """Run only the input the server released: it must hash to the released
        input_sha256 (RFC 8785, parkgate.jcs; or the json.dumps form of a call
        released before it), else the claim is refused here (a ValueError)."""
        if not is_input_sha256(self.input_sha256, self.input):
            raise ValueError("the claimed input does not hash to its input_sha256 "
                             f"{self.input_sha256}: not running it")
        return self


def claim_won(resource: CallResource) -> Claim | None:
    """The claim a submit with `claim=true` won (taken with the release): start
    it, then run it."""
    if resource.claim_won and resource.input is not None and resource.input_sha256:
        return Claim(input=resource.input, input_sha256=resource.input_sha256,
                     lease_expires_at=resource.lease_expires_at, claim_id=resource.claim_id,
                     started=resource.claim_id is None)
    return None


class Outcome(BaseModel):
    """200 of `POST .../outcome`: the call's status, whether the report came
    after the lease (`late`), and the result the model gets (truncated as a
    hosted tool's would be)."""

    model_config = ConfigDict(extra="ignore")

    status: str
    late: bool = False
    result: ToolResultBlock | None = None
    message: str = ""


@dataclass(frozen=True)
class Ran:
    """What a run produced, when an executor knows better than `content_of`
    (a framework that already turned an exception into an error message)."""

    content: str | list[dict[str, Any]]
    is_error: bool = False


def new_tool_use_id() -> str:
    """An id for a call the caller did not name (it cannot attach after a restart)."""
    return f"gate_{uuid.uuid4().hex}"


def final_result(resource: CallResource) -> ToolResultBlock:
    """The recorded result of a finished call; every final status has one
    (a denial carries the approver's reason, outcome_unknown says so)."""
    if resource.result is not None:
        return resource.result
    text = f"tool call {resource.tool_use_id!r} ended {resource.status.value}"
    if resource.reason:
        text += f": {resource.reason}"
    error_class = None
    if resource.error_class is not None:
        try:
            error_class = ToolErrorClass(resource.error_class)
        except ValueError:
            error_class = None
    return ToolResultBlock(tool_use_id=resource.tool_use_id, content=[TextBlock(text=text)],
                           is_error=resource.status.value != "succeeded",
                           error_class=error_class)


def outcome_body(content: str | list[dict[str, Any]], is_error: bool,
                 input_sha256: str) -> dict[str, Any]:
    return {"content": content, "is_error": is_error, "input_sha256": input_sha256}


#: After the lease, an outcome is still recorded (late): keep trying this long.
LATE_REPORT_SECONDS = 60.0
#: Sleep between outcome attempts while the server is unreachable.
REPORT_RETRY_SECONDS = 2.0
#: An outcome report that failed this way is sent again (until `report_deadline`).
REPORT_FAILURES = (UnavailableError, *c.RETRY_EXCEPTIONS, httpx.TimeoutException)


def report_deadline(claim: Claim) -> datetime:
    """When to stop resending an outcome: the late-report window after the lease."""
    lease_end = claim.lease_expires_at or datetime.now(UTC) + timedelta(seconds=300)
    if lease_end.tzinfo is None:
        lease_end = lease_end.replace(tzinfo=UTC)
    return lease_end + timedelta(seconds=LATE_REPORT_SECONDS)


def monotonic_deadline(when: datetime) -> float:
    """`when` as a `time.monotonic()` value: the client's own retries of one
    report stop there too, so the gate gives up when it says it does."""
    return time.monotonic() + max(0.0, (when - datetime.now(UTC)).total_seconds())


def answer(outcome: Outcome, local: ToolResultBlock) -> ToolResultBlock:
    """The result the caller gets once its report is recorded: parkgate's (as
    the model would get it), but what the function did here when the report
    came late (recorded beside outcome_unknown)."""
    return outcome.result if outcome.result is not None and not outcome.late else local


# ------------------------------------------------------------------ flows
# What a gate does with one call, once: the sync and async gates drive these
# (see `_common.Run`), doing only the I/O.
def call_flow(
    session_id: str, block: ToolUseBlock, turn_id: str | None, deadline: float | None,
    lease: float | None, announce: Announcer | None = None,
) -> Flow[ToolResultBlock]:
    """Submit -> decision -> claim -> run here -> outcome (see AsyncToolGate.call);
    `announce` hears each status seen (parked: told once; going on: once)."""
    # claim: released at once by policy, the call is claimed for this
    # submit in the release's own write (no claim request). No wait: the
    # submit answers at policy's verdict, so a parked call says so at once
    # (`announce`) instead of after a silent long-poll; the loop waits then.
    resource = yield Use.of(
        "submit", block, session_id, turn_id=turn_id, wait=0, claim=True, lease_seconds=lease)
    # A fresh id with the same tool and input as a still-parked call of the
    # session may attach to that call (setting attach_same_input): its id.
    tid = resource.tool_use_id
    won = claim_won(resource)
    if won is not None:
        started = yield from start_flow(session_id, tid, won)
        if started is not None:
            # A restarted agent's submit claims a call released while it was away.
            note = note_for(resource, block.input, started.input)
            return (yield from run_flow(session_id, tid, started, note))
        resource = yield Use.of("get_call", session_id, tid)
    lost_claim = False
    while True:
        if announce is not None:
            announce.saw(resource)
        step = step_of(resource)
        if step is Step.DONE:
            return final_result(resource)
        if step is not Step.CLAIM:
            lost_claim = False  # the row caught up; released again later: claim again
        if step is Step.CLAIM and not lost_claim:
            try:
                claim = yield Use.of("claim", session_id, tid, lease_seconds=lease)
            except ConflictError as exc:
                # Claimed by someone else (or ended): never here. Not (yet)
                # released as the workflow sees it: read again, claim again.
                lost_claim = exc.code != NOT_RELEASED
                if not lost_claim:
                    yield Sleep(0.5)
            else:
                started = yield from start_flow(session_id, tid, claim)
                if started is not None:
                    # An approver's edit: the model is told (the note leads the report).
                    note = note_for(resource, block.input, started.input)
                    return (yield from run_flow(session_id, tid, started, note))
                lost_claim = True
            resource = yield Use.of("get_call", session_id, tid)
            continue
        if c.passed(deadline):
            if step is not Step.DECIDING:
                raise CallNotFinishedError(resource)
            resource = yield from classified_flow(session_id, resource)  # queued: the verdict
            if step_of(resource) is Step.DECIDING:
                raise ParkedError(resource)
            continue  # released (or final) meanwhile: go on
        if step is Step.CLAIM:  # lost: do not spin while the row catches up
            yield Sleep(min(0.5, c.poll_seconds(deadline)))
        resource = yield Use.of("get_call", session_id, tid, wait=c.poll_seconds(deadline))


def classified_flow(session_id: str, resource: CallResource) -> Flow[CallResource]:
    """A queued call gets policy's verdict in moments: wait for it."""
    until = time.monotonic() + PROBE_SECONDS
    while resource.status.value == "queued" and time.monotonic() < until:
        yield Sleep(0.05)
        resource = yield Use.of("get_call", session_id, resource.tool_use_id)
    return resource


def start_flow(session_id: str, tid: str, claim: Claim) -> Flow[Claim | None]:
    """Start a reservation just before running it (its lease begins): the
    started claim, or None when it lapsed or was taken over (by this client
    restarted elsewhere): then the function must not run here."""
    if claim.started or claim.claim_id is None:
        return claim
    try:
        started = yield Use.of("start", session_id, tid, claim.claim_id)
    except ConflictError:
        return None
    return started.model_copy(update={"claim_id": claim.claim_id})


def run_flow(session_id: str, tid: str, claim: Claim,
             note: str | None = None) -> Flow[ToolResultBlock]:
    """Run the claimed input here and report what it did, after `note` (what
    an approver changed, parkgate.agent_client.edited); an exception in the
    function is reported as is_error and raised again."""
    try:
        value = yield Execute(claim.input)
    except Exception as exc:
        yield from report_flow(session_id, tid, claim, with_note(error_text(exc), note), True)
        raise
    ran = value if isinstance(value, Ran) else Ran(content_of(value))
    return (yield from report_flow(session_id, tid, claim, with_note(ran.content, note),
                                   ran.is_error))


def report_flow(session_id: str, tid: str, claim: Claim, content: str | list[dict[str, Any]],
                is_error: bool) -> Flow[ToolResultBlock]:
    """Report the outcome; resent while parkgate is unreachable, until the
    late-report window after the lease has passed."""
    local = local_result(tid, content, is_error)
    give_up = report_deadline(claim)
    while True:
        try:
            outcome = yield Use.of(
                "report_outcome", session_id, tid, content, is_error=is_error,
                input_sha256=claim.input_sha256, deadline=monotonic_deadline(give_up))
        except REPORT_FAILURES as exc:
            if datetime.now(UTC) >= give_up:
                raise OutcomeNotRecordedError(local, exc) from exc
            yield Sleep(REPORT_RETRY_SECONDS)
            continue
        return answer(outcome, local)
