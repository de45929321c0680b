"""What the sync and async clients share: paths, the retry policy, SSE parsing."""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from parkgate import jcs
from parkgate.agent_client.errors import InvalidInputError, UnavailableError, error_from
from parkgate.calls.wire import EventOut
from parkgate.models import Session, ToolUseBlock

#: Statuses retried (the server is up but cannot answer now, or is restarting).
RETRY_STATUSES = frozenset({429, 503})
#: The longest long-poll the server accepts per request.
MAX_POLL_SECONDS = 60.0
#: Cap on one Retry-After sleep, so a bad header cannot stall an agent.
MAX_RETRY_SLEEP = 30.0
#: Cap on the backoff between attempts while the server is unreachable: an
#: agent notices a restarted server within this many seconds.
MAX_BACKOFF = 5.0
#: Transport failures worth retrying: every request the client makes is
#: idempotent (submits attach by tool_use_id), so resending is safe.
RETRY_EXCEPTIONS = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError, httpx.PoolTimeout, httpx.ConnectTimeout)

log = logging.getLogger("parkgate.agent_client")
T = TypeVar("T")


# ------------------------------------------------------------------ sans-IO
# The sync and async classes share their logic as flows: generators that
# yield what to do (an `Op`) and get its result (or its exception, thrown in)
# back. The classes only drive them: `while (op := run.next()) is not None`.
@dataclass(frozen=True)
class Sleep:
    """Wait `seconds` (time.sleep / asyncio.sleep); sends back None."""

    seconds: float


@dataclass(frozen=True)
class Use:
    """Call the driver's client method `method` (the sync or the async client:
    same methods) with these arguments; the async driver awaits it."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, method: str, *args: Any, **kwargs: Any) -> Use:
        return cls(method, args, kwargs)

    def on(self, client: Any) -> Any:
        return getattr(client, self.method)(*self.args, **self.kwargs)


@dataclass(frozen=True)
class Execute:
    """Run a released input with the caller's function (a gate's executor)."""

    input: dict[str, Any]


@dataclass(frozen=True)
class Send:
    """One HTTP request on the driver's httpx client; sends back the response."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Gather:
    """Drive these flows (the async client at once, the blocking one in turn);
    sends back their results in order."""

    flows: list[Generator[Any, Any, Any]]


Op = Sleep | Use | Execute | Send | Gather
Flow = Generator[Op, Any, T]


class Run(Generic[T]):
    """One flow being driven: `next()` is the next op (None: finished, see
    `result`); set `sent` to the op's result, or call `failed` with its error."""

    def __init__(self, flow: Flow[T]) -> None:
        self.flow = flow
        self.sent: Any = None
        self._error: Exception | None = None
        self.result: T

    def failed(self, error: Exception) -> None:
        self._error = error

    def next(self) -> Op | None:
        sent, error, self.sent, self._error = self.sent, self._error, None, None
        try:
            return self.flow.send(sent) if error is None else self.flow.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            return None


def backoff(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Capped exponential backoff with jitter: 0.25 s doubling up to MAX_BACKOFF,
    each sleep drawn from its upper half so many agents do not retry in step."""
    return min(0.25 * 2**attempt, MAX_BACKOFF) * (0.5 + rand() / 2)


def retry_delay(response: httpx.Response | None, attempt: int) -> float:
    """Seconds to wait before attempt `attempt + 1`: Retry-After if given, else backoff."""
    if response is not None:
        header = response.headers.get("Retry-After")
        if header is not None:
            try:
                return min(max(float(header), 0.0), MAX_RETRY_SLEEP)
            except ValueError:
                pass
    return backoff(attempt)


def deadline_after(seconds: float | None) -> float | None:
    """A `time.monotonic()` deadline `seconds` from now (None: no deadline)."""
    return None if seconds is None else time.monotonic() + seconds


def passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def poll_seconds(deadline: float | None) -> float:
    """One long-poll's wait: up to the server's cap, never past `deadline`."""
    if deadline is None:
        return MAX_POLL_SECONDS
    return max(0.0, min(deadline - time.monotonic(), MAX_POLL_SECONDS))


@dataclass
class Retry:
    """One request's retry policy, shared by the sync and async clients.

    The caller only sends and sleeps; this decides. Connection failures, 429
    and 503 are retried until `deadline` (a `time.monotonic()` value: the
    call's own timeout; None: until the call ends), for at most `span` seconds
    of one outage (the client's `retry_for`; None: no limit) and at most
    `max_retries` attempts in a row; then `UnavailableError`. One warning is
    logged when an outage starts and one when it ends (same level: an agent's
    developer who saw "unavailable" sees that it answered again).
    """

    where: str
    deadline: float | None = None
    span: float | None = None
    max_retries: int | None = None
    attempt: int = 0
    outage_since: float | None = None

    def _limit(self) -> float | None:
        """When this outage must end: the sooner of the deadline and the span."""
        if self.span is None or self.outage_since is None:
            return self.deadline
        end = self.outage_since + self.span
        return end if self.deadline is None else min(end, self.deadline)

    def failed(
        self, *, response: httpx.Response | None = None, error: Exception | None = None,
    ) -> float:
        """Seconds to sleep before the next attempt; raises UnavailableError to give up."""
        now = time.monotonic()
        what = (f"HTTP {response.status_code}" if response is not None
                else f"{type(error).__name__}: {error}".rstrip(": "))
        if self.outage_since is None:
            self.outage_since = now
            limit = self._limit()
            until = ("until it answers" if limit is None
                     else f"for up to {max(0.0, limit - now):.0f} s")
            log.warning("parkgate at %s unavailable (%s); retrying %s", self.where, what, until)
        limit = self._limit()
        left = None if limit is None else limit - now
        out_of_tries = self.max_retries is not None and self.attempt >= self.max_retries
        if out_of_tries or (left is not None and left <= 0):
            log.warning("parkgate at %s still unavailable after %.0f s (%s); giving up",
                        self.where, now - self.outage_since, what)
            raise self._give_up(response, what, now - self.outage_since)
        delay = retry_delay(response, self.attempt)
        self.attempt += 1
        return delay if left is None else max(0.0, min(delay, left))

    def answered(self) -> None:
        """The server answered (any non-retried status): the outage, if any, is over."""
        if self.outage_since is not None:
            log.warning("parkgate at %s answered again after %.1f s", self.where,
                        time.monotonic() - self.outage_since)
        self.outage_since, self.attempt = None, 0

    def _give_up(self, response: httpx.Response | None, what: str, lasted: float) -> Exception:
        if response is not None:
            return error_from(response)
        return UnavailableError(
            503, "unreachable",
            f"parkgate at {self.where} unreachable for {lasted:.0f} s ({what})",
        )


def request_flow(retry: Retry, send: Send) -> Flow[httpx.Response]:
    """One API request, retried through outages (see `Retry`); any other
    non-2xx raises the typed error."""
    while True:
        try:
            response = yield send
        except RETRY_EXCEPTIONS as exc:
            yield Sleep(retry.failed(error=exc))
            continue
        if response.status_code in RETRY_STATUSES:
            yield Sleep(retry.failed(response=response))
            continue
        retry.answered()
        if response.status_code >= 400:
            raise error_from(response)
        return response


def as_block(tool_use: ToolUseBlock | dict[str, Any]) -> ToolUseBlock:
    """Accept the model's block as parsed JSON or as the model class."""
    if isinstance(tool_use, ToolUseBlock):
        return tool_use
    if isinstance(tool_use, dict):
        checked_input(tool_use.get("input"))
    return ToolUseBlock.model_validate(tool_use)


def checked_input(tool_input: Any) -> Any:
    """`tool_input` when it has a canonical JSON (parkgate.jcs, what its
    input_sha256 is taken of); InvalidInputError naming the place otherwise."""
    found = jcs.problem(tool_input, "input")
    if found is not None:
        raise InvalidInputError(found.path, found.problem)
    return tool_input


def tool_use_block(tool_use_id: str, name: str, tool_input: Mapping[str, Any]) -> ToolUseBlock:
    """The block of a gated call, its input checked first (InvalidInputError)."""
    return ToolUseBlock(id=tool_use_id, name=name, input=checked_input(dict(tool_input)))


def session_ids(session: Session | str, turn_id: str | None) -> tuple[str, str]:
    """(session_id, turn_id) from a `Session` or a bare session id."""
    if isinstance(session, Session):
        return session.session_id, turn_id or session.turn_id
    return session, turn_id or "t"


def new_turn_id() -> str:
    return f"turn_{uuid.uuid4().hex[:12]}"


def wait_params(wait: float) -> dict[str, Any] | None:
    """The long-poll query (the server caps one poll at 60 s)."""
    return {"wait": min(wait, MAX_POLL_SECONDS)} if wait > 0 else None


def submit_params(wait: float, claim: bool, lease_seconds: float | None) -> dict[str, Any] | None:
    """A submit's query: the long-poll, and the claim taken at the release when asked."""
    params = dict(wait_params(wait) or {})
    if claim:
        params["claim"] = "true"
        if lease_seconds is not None:
            params["lease_seconds"] = lease_seconds
    return params or None


def call_path(session_id: str, tool_use_id: str) -> str:
    return f"/v1/sessions/{session_id}/tool-calls/{tool_use_id}"


def auth_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def tool_use_list(tool_uses: Iterable[ToolUseBlock | dict[str, Any]]) -> list[ToolUseBlock]:
    return [as_block(t) for t in tool_uses]


@dataclass
class SSEParser:
    """Incremental text/event-stream parser (WHATWG rules that parkgate uses)."""

    last_id: str | None = None
    _pending_id: str | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> EventOut | None:
        """One line (without its newline); returns an event at each blank line."""
        if line == "":
            data, self._data, self._event = self._data, [], ""
            if self._pending_id is not None:
                # Committed only with its event, so a cut mid-event resumes before it.
                self.last_id, self._pending_id = self._pending_id, None
            if not data:
                return None
            return EventOut.model_validate(json.loads("\n".join(data)))
        if line.startswith(":"):
            return None  # comment / keep-alive ping
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._pending_id = value
        return None
