"""Data scored as its authors score it: HealthBench's signed points over met criteria,
conversations with roles, WritingBench's 1-10 criteria with level descriptors, and the offline
loaders."""

from __future__ import annotations

import json
import math

import pytest

from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.grading import Criterion, RubricGrader, parse_met, points_score, scale_score
from rse_fast.llm.client import LLMClient
from rse_fast.methods.types import Problem
from rse_fast.prompts import GRADER_SYSTEM
from rse_fast.testing import ScriptedServer

GOOD = Criterion(text="Advises calling emergency services for chest pain", points=8)
CLEAR = Criterion(text="Explains the reasoning in plain words", points=2)
HARM = Criterion(text="Recommends a prescription drug dose without examination", points=-6)


def test_healthbench_formula_by_hand():
    rubric = [GOOD, CLEAR, HARM]
    # positive points: 8 + 2 = 10
    assert points_score(rubric, [True, True, False]) == pytest.approx(1.0)
    assert points_score(rubric, [True, False, False]) == pytest.approx(0.8)
    # meeting a negative criterion costs its points: (8 - 6) / 10
    assert points_score(rubric, [True, False, True]) == pytest.approx(0.2)
    # clipped at 0: only the penalty is met
    assert points_score(rubric, [False, False, True]) == 0.0
    with pytest.raises(ValueError, match="positive points"):
        points_score([HARM], [False])
    with pytest.raises(ValueError, match="verdicts"):
        points_score(rubric, [True])


def test_writingbench_scale_by_hand():
    assert scale_score([10, 10]) == pytest.approx(1.0)
    assert scale_score([1, 1, 1]) == 0.0
    assert scale_score([4, 7]) == pytest.approx((5.5 - 1) / 9)
    assert parse_met('{"met": false}') is False and parse_met("Yes.") is True
    assert parse_met("maybe") is None


def test_healthbench_loads_signed_points_and_roles():
    ds = load_dataset("healthbench")
    assert ds.kind == "rubric" and len(ds.problems) == 500
    assert all(p.open_ended for p in ds.problems)
    negative = [p for p in ds.problems if any(c.points < 0 for c in p.meta["rubric"])]
    assert len(negative) == 475  # the packaged set: 475 of 500 prompts penalise something
    multi = [p for p in ds.problems if p.history]
    assert len(multi) == 213
    p = multi[0]
    roles = [m["role"] for m in p.messages()]
    assert roles[0] == "system" and roles[-1] == "user" and "assistant" in roles
    assert "[assistant]" in p.transcript and p.transcript.endswith(p.prompt.strip())
    assert "\\boxed" not in p.messages()[0]["content"] + p.messages()[-1]["content"]


def test_writingbench_keeps_level_descriptors():
    ds = load_dataset("writingbench", limit=3, seed=1)
    c = ds.problems[0].meta["rubric"][0]
    assert set(c.levels) == {"1-2", "3-4", "5-6", "7-8", "9-10"} and all(c.levels.values())


def test_own_jsonl_rubrics(tmp_path):
    data = tmp_path / "r.jsonl"
    data.write_text(
        json.dumps(
            {
                "id": "x",
                "prompt": "Say hi",
                "rubric": ["greets", {"criterion": "rude", "points": -1}],
            }
        )
    )
    ds = load_dataset(f"jsonl:{data}")
    assert ds.kind == "rubric" and [c.points for c in ds.problems[0].meta["rubric"]] == [1, -1]
    data.write_text(json.dumps({"id": "y", "prompt": "Say hi"}))
    with pytest.raises(ValueError, match="neither"):
        load_dataset(f"jsonl:{data}")


def _grader_reply(body: dict, index: int) -> str:
    """A grader that meets a criterion when the response mentions its first word, and scores
    scale criteria 8; asked anything else it writes prose (garbage)."""
    assert body["messages"][0]["content"] == GRADER_SYSTEM
    user = body["messages"][-1]["content"]
    response = user.split("grade:\n", 1)[1].split("\n\nCriterion:", 1)[0]
    criterion = user.split("Criterion:\n", 1)[1].split("\n", 1)[0]
    if "Score levels" in user:
        return json.dumps({"score": 8})
    if "GARBAGE" in response:
        return "I am not sure what you mean."
    return json.dumps({"met": criterion.split()[0].lower() in response.lower()})


async def test_rubric_grader_scores_penalties_as_penalties():
    problem = Problem(
        "hb", "My chest hurts.", None, {"rubric": [GOOD, CLEAR, HARM]}, open_ended=True
    )
    async with ScriptedServer(default_reply=_grader_reply) as srv:
        async with LLMClient(srv.base_url, "grader") as client:
            grader = RubricGrader(client, retries=0)
            # mentions "advises" and "recommends": meets GOOD and the penalty HARM
            s = await grader.grade(problem, "Advises rest; recommends 5 mg now", seed=0)
            assert s == pytest.approx((8 - 6) / 10)
            s = await grader.grade(problem, "Advises: call 911. Explains why.", seed=1)
            assert s == pytest.approx(1.0)
            assert math.isnan(await grader.grade(problem, "GARBAGE", seed=2))
            assert grader.garbage == 1
            sent = srv.requests[0]
            assert sent["temperature"] == 0.7 and sent["response_format"]["type"] == "json_schema"
            wb = Problem(
                "wb",
                "Write a poem.",
                None,
                {"rubric": [Criterion(text="Imagery", levels={"1-2": "none", "9-10": "vivid"})]},
                open_ended=True,
            )
            assert await grader.grade(wb, "Roses...", seed=0) == pytest.approx(7 / 9)
            scale_prompt = srv.requests[-1]["messages"][-1]["content"]
            assert "- 1-2: none" in scale_prompt and "- 9-10: vivid" in scale_prompt


ADD_STUB = 'def add(a, b):\n    """The sum of a and b.\n    >>> add(1, 2)\n    3\n    """\n'
ADD_TEST = "def check(candidate):\n    assert candidate(40, 2) == 42\n"


def test_own_jsonl_code_rows_carry_their_visible_tests_or_read_the_docstrings(tmp_path):
    """A code row states the examples it may be checked on while solving (strings or
    call/expected objects), or its docstring's are read as HumanEval's are; the hidden test
    stays out of the prompt."""
    data = tmp_path / "code.jsonl"
    rows = [
        {"id": "own", "prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST,
         "visible_tests": ["add(2, 2) == 4", {"call": "add(-1, 1)", "expected": "0"}]},
        {"id": "doc", "prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST},
        {"id": "none", "prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST,
         "visible_tests": []},
    ]  # fmt: skip
    data.write_text("\n".join(json.dumps(r) for r in rows))
    ds = load_dataset(f"jsonl:{data}")
    assert ds.kind == "code"
    own, doc, none = sorted(ds.problems, key=lambda p: ["own", "doc", "none"].index(p.id))
    assert own.meta["visible_examples"] == 2 and "add(-1, 1)" in own.meta["visible_tests"]
    assert "add(1, 2)" not in own.meta["visible_tests"]  # its own list replaces the docstring's
    assert doc.meta["visible_examples"] == 1 and "add(1, 2)" in doc.meta["visible_tests"]
    assert "visible_tests" not in none.meta and none.visible_check is not None
    assert all("40, 2" not in p.prompt and ADD_STUB in p.prompt for p in ds.problems)


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ({"entry_point": "add", "test": ADD_TEST}, "needs 'prompt'"),
        ({"prompt": ADD_STUB, "entry_point": "add"}, "needs 'test'"),
        ({"prompt": ADD_STUB, "entry_point": "add x", "test": ADD_TEST}, "function name"),
        ({"prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST, "visible_tests": "add(1,1)"},
         "must be a list"),
        ({"prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST,
          "visible_tests": ["add(x, 1) == 2"]}, "literal"),
        ({"prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST,
          "visible_tests": [{"call": "sub(1, 1)", "expected": "0"}]}, "one call of add()"),
    ],
)  # fmt: skip
def test_a_bad_code_row_is_refused_naming_its_line_and_field(tmp_path, row, named):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(row))
    with pytest.raises(ValueError, match=named) as info:
        load_dataset(f"jsonl:{data}")
    assert "bad.jsonl:1" in str(info.value)


def test_code_rows_do_not_share_a_file_with_answer_rows(tmp_path):
    data = tmp_path / "mixed.jsonl"
    rows = [{"prompt": ADD_STUB, "entry_point": "add", "test": ADD_TEST},
            {"prompt": "2 + 2?", "answer": "4"}]  # fmt: skip
    data.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match="cannot share a file"):
        load_dataset(f"jsonl:{data}")


RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG_BOXED = "```python\ndef add(a, b):\n    return a - b\n```\nSo add(1, 2) is \\boxed{3}."


async def test_a_code_reply_has_no_answer_to_vote_on(tmp_path):
    """A value a code reply happens to box is no vote for its code: on a code problem every
    candidate's answer is None, so sc's pick is its earliest sample, not the boxed majority
    (three of four samples box 3 under code that subtracts)."""
    from rse_fast.methods import make_method

    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps({"id": "doc", "prompt": ADD_STUB, "entry_point": "add",
                                "test": ADD_TEST}))  # fmt: skip
    (problem,) = load_dataset(f"jsonl:{data}").problems
    assert problem.answer(WRONG_BOXED) is None
    assert Problem("p", "What is 1 + 2?").answer(WRONG_BOXED) == "3"  # others read the box

    def replies(body: dict, index: int) -> str:
        return RIGHT if body.get("seed") == 0 else WRONG_BOXED

    async with ScriptedServer(default_reply=replies) as srv, LLMClient(srv.base_url, "m") as c:
        res = await make_method("sc", parallel=4, max_tokens=64).run(problem, 4 * 120, c)
    assert len(res.pool) >= 4 and all(x.answer is None for x in res.pool)
    assert res.final is not None and res.final.text == RIGHT


@pytest.fixture(scope="module")
def encoder():
    from rse_fast.encoder import Encoder

    return Encoder(providers=["CPUExecutionProvider"])


async def test_rse_reads_a_code_rollouts_answer_as_its_problem_does(tmp_path, encoder):
    """RSE's rounds (their votes, the settle margin) read no answer from a code reply either:
    four rollouts that all box 3 do not settle round 1."""
    from rse_fast.methods import make_method

    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps({"id": "doc", "prompt": ADD_STUB, "entry_point": "add",
                                "test": ADD_TEST}))  # fmt: skip
    (problem,) = load_dataset(f"jsonl:{data}").problems
    async with ScriptedServer(default_reply=WRONG_BOXED) as srv, LLMClient(srv.base_url, "m") as c:
        method = make_method("rse", encoder=encoder, max_tokens=64, max_rounds=1)
        res = await method.run(problem, 2000, c)
    assert res.meta["answer_per_round"] == [None] and res.meta["settled"] is False
    assert all(a is None for a in res.meta["rounds_detail"][0]["answers"])
