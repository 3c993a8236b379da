"""How far a rubric grader can be trusted, on criteria a person checks by reading: the
agreement share, its split by met / not met (a grader that says "met" to everything is
caught), and readings without a verdict counted as garbage, never as matches."""

from __future__ import annotations

import json

import pytest

from rse_fast.eval.grader_check import grader_agreement, hand_checked_items
from rse_fast.eval.grading import RubricGrader
from rse_fast.llm import LLMClient
from rse_fast.testing import ScriptedServer


def test_the_bundled_items_are_balanced_and_each_says_why():
    items = hand_checked_items()
    assert len(items) >= 10 and len({i.id for i in items}) == len(items)
    assert sum(i.met for i in items) == len(items) / 2
    assert all(i.prompt and i.response and i.criterion and i.why for i in items)


def knows_the_answers(body: dict, index: int) -> str:
    said = json.dumps(body["messages"])
    for item in hand_checked_items():
        if json.dumps(item.criterion)[1:-1] in said and json.dumps(item.response)[1:-1] in said:
            return json.dumps({"met": item.met})
    raise AssertionError("a grader call without a known item")


@pytest.mark.parametrize(
    ("reply", "agreement", "on_met", "on_not_met", "garbage"),
    [
        (knows_the_answers, 1.0, 1.0, 1.0, 0),
        (json.dumps({"met": True}), 0.5, 1.0, 0.0, 0),
        ("I cannot tell.", None, None, None, 24),
    ],
)
async def test_agreement_with_the_hand_verdicts(reply, agreement, on_met, on_not_met, garbage):
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        seen = await grader_agreement(RubricGrader(c, retries=0), readings=2)
    assert seen["items"] == 12 and seen["readings"] == 24 and seen["garbage"] == garbage
    assert (seen["agreement"], seen["on_met"], seen["on_not_met"]) == (
        agreement,
        on_met,
        on_not_met,
    )
    if agreement == 1.0:
        assert seen["ci95"] == [1.0, 1.0]
    if agreement is None:
        assert seen["ci95"] is None
    seeds = {b.get("seed") for b in srv.requests}
    assert len(seeds) >= 2  # two independent readings per item


async def test_a_check_without_items_or_readings_is_refused():
    async with ScriptedServer(default_reply="true") as srv, LLMClient(srv.base_url, "m") as c:
        with pytest.raises(ValueError, match="at least one item and one reading"):
            await grader_agreement(RubricGrader(c), readings=0)
