"""DurableDispatcher.decide takes the decision as DecideInput's own fields."""

from __future__ import annotations

from typing import Any

import pytest

from parkgate.approvals.decisions import DecideInput
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.payloads import DecideResult
from parkgate.rules.remember_spec import RememberSpec


class _Sent(DurableDispatcher):
    """A dispatcher that records what it would send (no Temporal)."""

    def __init__(self) -> None:
        self.sent: list[tuple[DecideInput, dict[str, Any]]] = []

    async def send_decision(self, inp: DecideInput, **where: Any) -> DecideResult:
        self.sent.append((inp, where))
        return DecideResult(accepted=True)


async def test_keywords_become_the_decide_input() -> None:
    d = _Sent()
    remember = RememberSpec(scope="session", ttl_seconds=60)
    await d.decide("req-1", "allow", decided_by="ann", principal_id="key:k", approver="ann",
                   self_approved=True, remember=remember, session_id="s", tool_use_id="t")
    await d.decide("req-2", "maybe", wait=False)
    await d.decide("req-3", "deny", via=None)
    (first, where), (second, where2), (third, _) = d.sent
    assert first == DecideInput(request_id="req-1", decision="allow", decided_by="ann",
                                via="api", principal_id="key:k", approver="ann",
                                self_approved=True, remember=remember)
    assert where == {"session_id": "s", "tool_use_id": "t", "wait": True}
    # An invalid decision still reaches the workflow's validator (a clear refusal).
    assert second == DecideInput(request_id="req-2", decision="maybe", via="api")
    assert where2["wait"] is False
    assert third.via is None


async def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="decidedby"):
        await _Sent().decide("req-1", "allow", decidedby="ann")


def test_the_typed_keywords_are_decide_inputs_fields() -> None:
    """DecideKeywords (what mypy checks at `decide(...)` call sites) names exactly
    DecideInput's fields beside the request, the decision and the proof (the
    dispatcher sets the proof when it sends)."""
    from parkgate.approvals.decisions import DecideInput, DecideKeywords

    assert set(DecideKeywords.__annotations__) == (
        set(DecideInput.model_fields) - {"request_id", "decision", "proof"}
    )
