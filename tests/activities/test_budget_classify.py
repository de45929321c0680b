"""Budgets inside the classify activity (a local activity Temporal may run again):
a retried classification reserves nothing twice and answers the same; Cedar
policies read `context.budgets`; an input a budget cannot count is refused
naming the budget."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from parkgate.activities.classify import ClassifyActivities
from parkgate.durable.payloads import ClassifyInput
from parkgate.models import Session, ToolErrorClass, ToolUseBlock
from parkgate.rules.budgets import UNIT
from parkgate.store.repository import Repository
from parkgate.verdicts import Deny, Execute, NeedsApproval
from tests.activities.test_activities import deps_for

WRITE_AUTO = {"default": {"WRITE": "auto"}}


def _input(deps_ws: str, cid: str, content: object = "x") -> ClassifyInput:
    session = Session(session_id="s", turn_id="t", workspace_path=deps_ws)
    call = ToolUseBlock(id=cid, name="write_file", input={"path": f"{cid}.txt",
                                                          "content": content})
    return ClassifyInput(call=call, session=session)


async def test_a_retried_classification_charges_once_and_answers_the_same(
        repo: Repository, tmp_path: Path) -> None:
    deps = deps_for(repo, tmp_path, tool_confirmation=WRITE_AUTO,
                    budgets={"w": {"limit": 1}})
    activities = ClassifyActivities(deps)
    ws = str(deps.settings.workspace_roots[0])
    env = ActivityEnvironment()
    first = await env.run(activities.classify, _input(ws, "c1"))
    # Attempts Temporal discarded and ran again, some at once.
    again = await asyncio.gather(*(env.run(activities.classify, _input(ws, "c1"))
                                   for _ in range(4)))
    assert isinstance(first.verdict, Execute)
    assert all(isinstance(out.verdict, Execute) for out in again)
    (charge,) = await repo.call_charges("s", "c1")
    assert charge.amount == UNIT and charge.used_now == UNIT
    # The next call is past the limit: it parks, and so does its retry.
    parked = [await env.run(activities.classify, _input(ws, "c2")) for _ in range(2)]
    assert all(isinstance(out.verdict, NeedsApproval) for out in parked)
    assert "budget:w over its limit" in parked[0].verdict.info.rule
    (over,) = await repo.call_charges("s", "c2")
    assert over.state == "over" and over.used_now == UNIT


async def test_cedar_policies_read_the_budgets(repo: Repository, tmp_path: Path) -> None:
    policy = tmp_path / "spend.cedar"
    policy.write_text('@id("spend-low")\n@mode("prompt")\npermit(principal, action, resource)\n'
                      'when { context.budgets.w.remaining < 3 };\n')
    deps = deps_for(repo, tmp_path, tool_confirmation=WRITE_AUTO, policy_files=[policy],
                    budgets={"w": {"limit": 5}})
    activities = ClassifyActivities(deps)
    ws = str(deps.settings.workspace_roots[0])
    env = ActivityEnvironment()
    outs = [await env.run(activities.classify, _input(ws, f"c{i}")) for i in range(4)]
    assert [type(o.verdict).__name__ for o in outs] == [
        "Execute", "Execute", "Execute", "NeedsApproval"]
    assert outs[3].verdict.info.rule == "cedar:spend-low"  # remaining 2: the policy asks


async def test_an_input_the_budget_cannot_count_is_refused(repo: Repository,
                                                           tmp_path: Path) -> None:
    deps = deps_for(repo, tmp_path, tool_confirmation=WRITE_AUTO,
                    budgets={"bytes": {"limit": 100, "counts": "input.content"}})
    ws = str(deps.settings.workspace_roots[0])
    out = await ActivityEnvironment().run(ClassifyActivities(deps).classify,
                                          _input(ws, "c1", "many"))
    assert isinstance(out.verdict, Deny)
    assert out.verdict.error_class == ToolErrorClass.VALIDATION_ERROR
    assert "budget 'bytes' counts input.content: 'many' is not a number" in \
        out.verdict.result.text
    assert out.verdict.rule == "budget:bytes"
    assert await repo.call_charges("s", "c1") == []
