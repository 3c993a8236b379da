"""A grader that reads a whole rubric in one call: one request per reading instead of one per
criterion, the same scores where it gives the same verdicts, a reply of the wrong length
counted as garbage, repeated readings answered from the memo, and the run's own sample of how
far it agrees with criterion-by-criterion readings."""

from __future__ import annotations

import json
import math

import pytest

from rse_fast.eval.grader_check import reads_agreement
from rse_fast.eval.grading import Criterion, RubricGrader, parse_met_list, reading_seed
from rse_fast.eval.runner import reads_check
from rse_fast.llm import LLMClient
from rse_fast.methods import Problem
from rse_fast.prompts import RUBRIC_GRADER_SYSTEM
from rse_fast.testing import ScriptedServer

RUBRIC = [
    Criterion(text="mentions rest", points=5),
    Criterion(text="mentions water", points=3),
    Criterion(text="recommends dose", points=-6),
]
PROBLEM = Problem("hb", "I have a cold.", None, {"rubric": RUBRIC}, open_ended=True)


def met(criterion: str, response: str) -> bool:
    return criterion.split()[1] in response.lower()


def reads_either_way(body: dict, index: int) -> str:
    user = body["messages"][-1]["content"]
    response = user.split("grade:\n", 1)[1].split("\n\nCriteri", 1)[0]
    if "WRONG LENGTH" in response:
        return json.dumps({"met": [True]})
    if body["messages"][0]["content"] == RUBRIC_GRADER_SYSTEM:
        listed = user.split("Criteria:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        return json.dumps({"met": [met(line.split(". ", 1)[1], response) for line in listed]})
    criterion = user.split("Criterion:\n", 1)[1].split("\n", 1)[0]
    return json.dumps({"met": met(criterion, response)})


@pytest.mark.parametrize(
    ("response", "score"),
    [("Rest and water.", 1.0), ("Rest, and a dose of 5 mg.", 0.0), ("Drink water.", 3 / 8)],
)
async def test_whole_rubric_scores_equal_per_criterion_scores(response, score):
    async with ScriptedServer(default_reply=reads_either_way) as srv:
        async with LLMClient(srv.base_url, "grader") as c:
            whole = RubricGrader(c, retries=0, reads="rubric")
            assert await whole.grade(PROBLEM, response, seed=3) == pytest.approx(score)
            assert len(srv.requests) == 1  # one call for three criteria
            schema = srv.requests[0]["response_format"]["json_schema"]["schema"]
            assert schema["properties"]["met"]["minItems"] == 3
            apart = whole.reading_as("criterion")
            assert await apart.grade(PROBLEM, response, seed=3) == pytest.approx(score)
            assert len(srv.requests) == 4


async def test_a_reply_of_the_wrong_length_is_garbage_and_a_repeat_is_remembered():
    assert parse_met_list('{"met": [true, false]}', 3) is None
    assert parse_met_list('{"met": [true, 1, false]}', 3) is None
    assert parse_met_list("yes", 1) is None
    async with ScriptedServer(default_reply=reads_either_way) as srv:
        async with LLMClient(srv.base_url, "grader") as c:
            grader = RubricGrader(c, retries=1, reads="rubric")
            assert math.isnan(await grader.grade(PROBLEM, "WRONG LENGTH", seed=0))
            assert grader.garbage == 1 and len(srv.requests) == 2  # one retry, then garbage
            first = await grader.grade_both(PROBLEM, "Rest.", seed=5)
            again = await grader.grade_both(PROBLEM, "Rest.", seed=5)
            assert first == again and len(srv.requests) == 3
            await grader.grade_both(PROBLEM, "Rest.", seed=6)  # another reading is a new call
            assert len(srv.requests) == 4


def test_a_readings_seed_follows_the_text_not_its_place():
    assert reading_seed("a text", 0) == reading_seed("a text", 0)
    assert reading_seed("a text", 1) == reading_seed("a text", 0) + 1
    assert reading_seed("another", 0) != reading_seed("a text", 0)


async def test_the_reads_check_compares_both_readings_of_one_text():
    async with ScriptedServer(default_reply=reads_either_way) as srv:
        async with LLMClient(srv.base_url, "grader") as c:
            check = await reads_check(RubricGrader(c, reads="rubric"), PROBLEM, "Rest only.")
    assert check == {"rubric": [True, False, False], "criterion": [True, False, False]}
    disagree = {"rubric": [True, True, None], "criterion": [True, False, False]}
    seen = reads_agreement([{"reads_check": check}, {"reads_check": disagree}, {}])
    assert seen is not None
    assert (seen["responses"], seen["verdicts"], seen["without_verdict"]) == (2, 5, 1)
    assert seen["agreement"] == pytest.approx(4 / 5)
    assert seen["met_share_rubric"] == pytest.approx(3 / 5)
    assert seen["met_share_criterion"] == pytest.approx(2 / 5)
    assert reads_agreement([{"method": "single"}]) is None
