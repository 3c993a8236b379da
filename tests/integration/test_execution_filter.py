"""Checks that are free while solving code: the examples a problem states are parsed as data,
run in the sandbox, and used by best-of-N and self-consistency to choose among candidates
that pass them; the hidden tests reach no prompt and no choice."""

from __future__ import annotations

import json
import os

import pytest

from rse_fast.eval import sandbox
from rse_fast.eval.datasets import load_dataset
from rse_fast.eval.examples import Example, visible_examples
from rse_fast.eval.sandbox import interpreter
from rse_fast.llm import LLMClient
from rse_fast.methods import make_method
from rse_fast.testing import ScriptedServer

STUB = '''def f(xs, k):
    """Doubles things.
    >>> f([1, 2], 3)
    [2, 4]
    >>> f([], 0)
    []
    f([5], 1) ==> [10]
    f([6], 1) ➞ [12]
    * f([7], 2) => [14]
    f(y, 2) -> 1
    f([1], 1) == undefined_name
    is_happy(aa) => false
    """
'''


RIGHT = (
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
    " for b in numbers[i + 1:])\n```"
)
WRONG = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"


def test_stated_examples_are_read_as_literals_only():
    found = visible_examples(STUB, "f")
    assert found == [
        Example("f([1, 2], 3)", "[2, 4]"),
        Example("f([], 0)", "[]"),
        Example("f([5], 1)", "[10]"),
        Example("f([6], 1)", "[12]"),
        Example("f([7], 2)", "[14]"),
    ]  # a name as argument or as expected value is not data: left out
    assert visible_examples("def g(): pass", "g") == []
    assert visible_examples("    g(1) => false", "g") == [Example("g(1)", "False")]


@pytest.fixture(autouse=True)
def isolation(request):
    """The checks run code in the sandbox, which needs bubblewrap; parsing does not."""
    if "literals_only" in request.node.name:
        return
    if not sandbox.bwrap_works(interpreter()):
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap cannot run here; .ci/run installs it")
        pytest.skip("bubblewrap (bwrap) is not available: apt-get install bubblewrap")


def test_a_stated_float_is_matched_within_noise_and_no_further(tmp_path):
    """A right program is not failed for floating-point noise ((0.1 + 0.2) / 2 against a
    stated 0.15; 3 * 0.1 inside a list), and a value off by more is still wrong."""
    rows = [
        {"id": "mean", "entry_point": "mean", "test": "def check(c): pass\n",
         "prompt": 'def mean(xs):\n    """The mean of xs."""\n',
         "visible_tests": ["mean([0.1, 0.2]) == 0.15", "mean([1, 2]) == 1.5"]},
        {"id": "tenths", "entry_point": "tenths", "test": "def check(c): pass\n",
         "prompt": 'def tenths(xs):\n    """Each x as tenths."""\n',
         "visible_tests": ["tenths([1, 2, 3]) == [0.1, 0.2, 0.3]"]},
    ]  # fmt: skip
    data = tmp_path / "floats.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    mean, tenths = sorted(load_dataset(f"jsonl:{data}").problems, key=lambda p: p.id)
    assert mean.visible_check is not None and tenths.visible_check is not None
    assert (0.1 + 0.2) / 2 != 0.15 and 3 * 0.1 != 0.3  # the noise this is about
    code = "```python\ndef {}(xs):\n    return {}\n```".format
    assert mean.visible_check(code("mean", "sum(xs) / len(xs)")).passed
    off = mean.visible_check(code("mean", "sum(xs) / len(xs) + 1e-6"))
    assert not off.passed and "expected 0.15" in off.detail
    assert tenths.visible_check(code("tenths", "[x * 0.1 for x in xs]")).passed
    as_tuple = code("tenths", "tuple(x * 0.1 for x in xs)")
    assert not tenths.visible_check(as_tuple).passed  # a tuple is not the list stated


def test_humaneval_problems_check_their_own_examples_not_their_tests():
    ds = load_dataset("humaneval", limit=None)
    stated = [p for p in ds.problems if p.meta.get("visible_tests")]
    assert len(stated) > 100  # most state examples; the rest get no check (None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    assert p.meta["test"] not in p.meta["visible_tests"]
    right, wrong = RIGHT, WRONG
    assert p.visible_check(right).passed and not p.visible_check(wrong).passed
    assert "returned True, expected False" in p.visible_check(wrong).detail
    raising = WRONG.replace("return True", "return numbers[99]")
    said = p.visible_check(raising).detail  # the call that raised, what, and what was wanted
    assert "has_close_elements([1.0, 2.0, 3.0], 0.5) raised IndexError" in said, said
    assert "expected False" in said
    bare = next(x for x in ds.problems if not x.meta.get("visible_tests"))
    assert bare.visible_check(right) is None


def test_a_code_block_indented_inside_a_list_item_is_run_and_graded_as_code():
    """A reply may put its code block inside a numbered step, indented with it: the code is
    the same, so it passes (or fails) the stated examples and the hidden tests as it would
    unindented, and the pitfall a wrong one files names its example, not an indent."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")

    def in_a_step(reply: str) -> str:
        return "1. **Write it**:\n" + "".join(f"   {line}\n" for line in reply.splitlines())

    assert p.visible_check(in_a_step(RIGHT)).passed and ds.grade(p, in_a_step(RIGHT)) == 1.0
    wrong = p.visible_check(in_a_step(WRONG))
    assert not wrong.passed and "returned True, expected False" in wrong.detail
    assert ds.grade(p, in_a_step(WRONG)) == 0.0


def test_the_code_run_is_the_block_that_defines_the_function_not_a_later_usage_block():
    """A reply often ends with a block of usage or printed output after its function: the
    code run is the last block that defines the function (a helper named like it does not)."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    usage = "\n\nUsage:\n```python\nprint(has_close_elements([1.0, 2.0], 0.5))\n```\n"
    output = "Output:\n```\nFalse\n```"
    assert p.visible_check(RIGHT + usage + output).passed
    assert ds.grade(p, RIGHT + usage + output) == 1.0
    assert ds.grade(p, WRONG + usage) == 0.0
    assert ds.grade(p, RIGHT + "\n" + WRONG) == 0.0  # the last definition is the answer
    helper = "```python\ndef has_close_elements_fast(xs, t):\n    return True\n```"
    assert ds.grade(p, RIGHT + "\nA variant:\n" + helper) == 1.0

    # an output block between two code blocks is no code, and does not pair its fences
    # with theirs; ```py is Python too
    between = "```python\nx = 1\n```\n```output\n1\n```\n" + RIGHT.replace("```python", "```py")
    assert ds.grade(p, between) == 1.0


@pytest.mark.parametrize(
    ("reply", "blocks"),
    [
        ("```python\nA\n```\n```output\nB\n```\n```\nC\n```", ["A\n", "C\n"]),
        ("1. Step\n   ```py\n   def f():\n       return 1\n   ```", ["def f():\n    return 1\n"]),
        ("```python\ndef f(): pass\n", []),  # never closed: cut off
        ("```\nx = 1\n```python\ny = 2\n```", ["x = 1\n", "y = 2\n"]),
        ("```pycon\n>>> f(1)\n```", []),
        ("no fence at all", []),
    ],
)
def test_code_blocks_are_read_by_their_fences(reply, blocks):
    from rse_fast.eval.code_runs import code_blocks

    assert code_blocks(reply) == blocks


def loud_wrong_quiet_right(body: dict, index: int) -> str:
    """Samples alternate between wrong code the judge loves and right code it scores low."""
    user = body["messages"][-1]["content"]
    if "Rate" in user or body.get("response_format"):
        return json.dumps({"score": 9 if "return True" in user else 3})
    if int(body.get("seed") or 0) % 2 == 0:
        return WRONG
    return RIGHT


@pytest.mark.parametrize("name", ["bon", "sc"])
async def test_the_filter_chooses_among_candidates_that_pass_the_stated_examples(name):
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    async with ScriptedServer(default_reply=loud_wrong_quiet_right) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            options = {"parallel": 4, "max_tokens": 96, "budget_mode": "cap"}
            plain = await make_method(name, **options).run(p, 3000, c)
            checked = await make_method(name, execution_filter=True, **options).run(p, 3000, c)
    assert "return True" in plain.final.text  # the judge's favourite, or the first sample
    assert "return True" not in checked.final.text
    flt = checked.meta["execution_filter"]
    assert 0 < flt["passed"] < flt["of"] == len(checked.pool) and not flt["fell_back"]
    assert ds.grade(p, checked.final.text) == 1.0
    hidden = [line.strip() for line in p.meta["test"].splitlines() if "assert" in line]
    sent = json.dumps(srv.requests)
    assert hidden and not any(json.dumps(h)[1:-1] in sent for h in hidden)


def rse_options() -> dict:
    """Two rounds of four, every round guided (no settling), items shown from one rollout."""
    from rse_fast.encoder import Encoder

    return {"parallel": 4, "max_tokens": 96, "k": 4, "max_rounds": 2,
            "encoder": Encoder(providers=["CPUExecutionProvider"]),
            "config": {"settle_margin": None, "min_support_shown": 1}}  # fmt: skip


def wrong_then_told(body: dict, index: int) -> str:
    """Rollouts write wrong code until a prompt carries the grounded failure; the distiller
    finds nothing to say, so whatever guides round 2 came from running the code."""
    from rse_fast.prompts import is_distillation

    if is_distillation(body["messages"]):
        return json.dumps({"positive": [], "negative": []})
    prompt = json.dumps(body["messages"])
    if "returned True, expected False" in prompt:
        return RIGHT
    return WRONG


async def test_rse_files_what_running_the_code_showed_as_a_grounded_pitfall():
    from rse_fast.prompts import PITFALLS_HEADER

    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = rse_options()
    async with ScriptedServer(default_reply=wrong_then_told) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("rse", checker="visible", **options).run(p, 6000, c)
    guided = [json.dumps(b["messages"]) for b in srv.requests if PITFALLS_HEADER in json.dumps(b)]
    assert guided and all("returned True, expected False" in g for g in guided)
    assert ds.grade(p, res.final.text) == 1.0  # the guided round was right and outvoted
    assert any(r.role == "check" and r.work_s > 0 for r in res.ledger.records)
    hidden = [line.strip() for line in p.meta["test"].splitlines() if "assert" in line]
    sent = json.dumps(srv.requests)
    assert not any(json.dumps(h)[1:-1] in sent for h in hidden)


def fixed_when_told(body: dict, index: int) -> str:
    prompt = json.dumps(body["messages"])
    if "Its code failed an example" in prompt and "returned True, expected False" in prompt:
        return RIGHT
    return WRONG


async def test_reflexion_retries_a_failing_sample_with_its_own_failure_shown():
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    async with ScriptedServer(default_reply=fixed_when_told) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("reflexion", parallel=2, max_tokens=96).run(p, 1500, c)
    assert res.meta["retries"] >= 1 and ds.grade(p, res.final.text) == 1.0
    assert res.meta["execution_filter"]["passed"] == res.meta["retries"]
    assert res.tokens == res.ledger.total_tokens <= 1500 * 1.1
    hidden = [line.strip() for line in p.meta["test"].splitlines() if "assert" in line]
    assert not any(json.dumps(h)[1:-1] in json.dumps(srv.requests) for h in hidden)
    with pytest.raises(ValueError, match="visible_check"):
        await make_method("reflexion").run(load_dataset("gym:basic_arithmetic", 1).problems[0],
                                           1500, c)  # fmt: skip


async def test_grounded_rse_files_failures_without_a_single_distillation():
    """Running the code costs no tokens: with no model distillation at all, the bank holds
    what the stated examples showed, and a later round sees it."""
    from rse_fast.prompts import PITFALLS_HEADER, is_distillation

    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = rse_options()
    async with ScriptedServer(default_reply=wrong_then_told) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            method = make_method("rse:grounded", checker="visible", **options)
            res = await method.run(p, 3000, c)
    assert not any(is_distillation(b["messages"]) for b in srv.requests)
    assert {r.role for r in res.ledger.records} == {"explore", "check"}
    guided = [json.dumps(b["messages"]) for b in srv.requests if PITFALLS_HEADER in json.dumps(b)]
    assert guided and all("returned True, expected False" in g for g in guided)
    assert res.meta["guided_rounds"] == [2] and res.meta["checks"] == {"verified": 4}
    assert ds.grade(p, res.final.text) == 1.0


async def test_a_grounded_bank_can_be_framed_as_observed_not_as_unchecked_opinion():
    """rse:checked: the bank of what running the code showed is framed as observations (the
    default rules call every item unchecked and partly wrong, which a grounded one is not)."""
    from rse_fast.prompts import CHECKED_RULES, GUIDED_RULES, ORIGIN_SAME, PITFALLS_HEADER

    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = rse_options()
    options["config"] = {**options["config"], "distill_with_model": False}
    async with ScriptedServer(default_reply=wrong_then_told) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            await make_method("rse:checked", checker="visible", **options).run(p, 3000, c)
    guided = [b["messages"] for b in srv.requests if PITFALLS_HEADER in json.dumps(b)]
    assert guided
    shown = json.dumps(guided)
    assert json.dumps(CHECKED_RULES.format(origin=ORIGIN_SAME))[1:-1] in shown
    assert "Nobody has checked" not in shown and GUIDED_RULES[:40] not in shown
    assert "returned True, expected False" in shown


def right_on_even_seeds(body: dict, index: int) -> str:
    from rse_fast.prompts import is_distillation

    if is_distillation(body["messages"]):
        return json.dumps({"positive": ["Compare each pair of numbers once."], "negative": []})
    return RIGHT if body.get("seed", 0) % 2 == 0 else WRONG


async def test_a_proposition_from_a_rollout_that_passed_the_stated_examples_is_verified():

    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = {**rse_options(), "seed": 0}
    async with ScriptedServer(default_reply=right_on_even_seeds) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("rse", checker="visible", **options).run(p, 20_000, c)
    # round 1: two passing rollouts' propositions verified by their run; the two failing
    # ones' unknown, and their failures filed as verified pitfalls; round 2 is not distilled
    assert res.meta["checks"] == {"verified": 4, "unknown": 2}
    assert res.meta["checks_by_kind"] == {
        "positive": {"verified": 2, "unknown": 2},
        "negative": {"verified": 2},
    }
    assert res.meta["distilled_rounds"] == 1


async def test_a_resumed_checked_run_counts_the_verdicts_of_its_earlier_rounds(tmp_path):
    """The checker's verdicts are part of what a checkpoint keeps: a finished run resumed
    reports the counts the whole run made, not those of the rounds run since."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = {**rse_options(), "seed": 0, "checker": "visible", "checkpoint_dir": tmp_path}
    async with ScriptedServer(default_reply=right_on_even_seeds) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            whole = await make_method("rse", **options).run(p, 20_000, c)
            calls = len(srv.requests)
            again = await make_method("rse", resume=True, **options).run(p, 20_000, c)
    assert len(srv.requests) == calls
    assert again.meta["checks"] == whole.meta["checks"] == {"verified": 4, "unknown": 2}
    assert again.meta["checks_by_kind"] == whole.meta["checks_by_kind"]
    assert sum(again.meta["checks_by_kind"]["positive"].values()) == 4


async def test_a_passing_rollouts_code_can_be_filed_as_a_verified_proposition():
    """rse:passing: the code that passed the stated examples reaches the next round as a
    verified proposition, without its docstring (the stated examples, but never a hidden
    test, stay in the problem alone)."""
    from rse_fast.prompts import PROPOSITIONS_HEADER

    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    options = {**rse_options(), "seed": 0}
    async with ScriptedServer(default_reply=right_on_even_seeds) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            method = make_method("rse:passing", checker="visible", **options)
            res = await method.run(p, 20_000, c)
    guided = [b["messages"][0]["content"] for b in srv.requests
              if PROPOSITIONS_HEADER in b["messages"][0]["content"]]  # fmt: skip
    assert guided and all("This code passed all 2 examples" in g for g in guided)
    assert all("abs(a - b) < threshold" in g and ">>>" not in g for g in guided)
    assert res.meta["checks"]["verified"] >= 4
    hidden = [line.strip() for line in p.meta["test"].splitlines() if "assert" in line]
    assert not any(json.dumps(h)[1:-1] in json.dumps(srv.requests) for h in hidden)


RAISES = (
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    gap = threshold - threshold\n    return len(numbers) / gap > 1\n```"
)
LOOPS = (
    "```python\ndef has_close_elements(numbers, threshold):\n    i = 0\n"
    "    while i < len(numbers): i *= 1\n    return False\n```"
)
OWN_TEST_FAILS = (
    "```python\ndef has_close_elements(numbers, threshold):\n    return False\n\n"
    "assert has_close_elements([1.0, 1.1], 0.5), 'Test case 1 failed'\n```"
)


@pytest.mark.parametrize(
    ("reply", "reason", "said"),
    [
        (  # a call that raised: the call, the error, what was expected, and the line
            RAISES,
            "failed",
            "failed an example the problem states: has_close_elements([1.0, 2.0, 3.0], 0.5) "
            "raised ZeroDivisionError: float division by zero, expected False "
            "(raised at line 3: return len(numbers) / gap > 1)",
        ),
        (  # a call that never returned: that call, past its own limit, and the line it ran
            LOOPS,
            "failed",
            "failed an example the problem states: has_close_elements([1.0, 2.0, 3.0], 0.5) "
            "raised TimeoutError: the call used over 2.0 s of CPU, expected False "
            "(raised at line 3: while i < len(numbers): i *= 1)",
        ),
        (  # the reply's own test at module level: nothing stated ran, and it says where
            OWN_TEST_FAILS,
            "load-error",
            "did not load, so no stated example ran: AssertionError: Test case 1 failed "
            "(raised at line 4: assert has_close_elements([1.0, 1.1], 0.5), 'Test case 1 failed')",
        ),
        (  # prose only: not a syntax error of the attempt's code, there was none
            "Here's how I'd do it: compare every pair and check the gap.",
            "no-code",
            "could not run: the reply has no code block and its text is not Python",
        ),
        (  # cut off inside its code block
            "```python\ndef has_close_elements(numbers, threshold):\n    for i in",
            "no-code",
            "could not run: its code block was never closed (the reply was cut off)",
        ),
        (  # cut off inside its code block, after an output block: an even count of fences
            "```output\n[1.0]\n```python\ndef has_close_elements(numbers, threshold):\n    for",
            "no-code",
            "could not run: its code block was never closed (the reply was cut off)",
        ),
        (  # an output block left open is no code cut off
            "Here it is.\n```output\nTrue",
            "no-code",
            "could not run: the reply has no code block and its text is not Python",
        ),
    ],
)
def test_a_failure_says_what_kind_it_was_and_where_the_code_raised(reply, reason, said):
    """What a pitfall and a retry are told is what happened: an example that raised names its
    call and the line that raised; a load error is not an example failed, nor a reply without
    code a syntax error of its code."""
    from rse_fast.eval.code_runs import passes_visible
    from rse_fast.rse.checking import CodeExamplesChecker

    p = next(x for x in load_dataset("humaneval", limit=None).problems if x.id == "HumanEval/0")
    outcome = passes_visible(p, reply)
    assert outcome is not None and not outcome.passed and outcome.reason == reason
    assert outcome.failure.startswith(said)
    [(kind, text, check)] = CodeExamplesChecker(lambda r: passes_visible(p, r)).observe(reply).items
    assert (kind, check.verdict) == ("negative", "verified")
    assert text == f"An attempt's code {outcome.failure}."


def test_a_jsonl_code_dataset_is_checked_on_its_own_visible_tests_and_graded_on_its_hidden(
    tmp_path,
):
    """A user's own code problems: the stated examples they list are what solving may check
    (a reply that fits them passes), the hidden test is what grades."""
    stub = 'def add(a, b):\n    """The sum of a and b."""\n'
    row = {"id": "add", "prompt": stub, "entry_point": "add",
           "test": "def check(candidate):\n    assert candidate(40, 2) == 42\n",
           "visible_tests": ["add(2, 2) == 4"]}  # fmt: skip
    data = tmp_path / "own.jsonl"
    data.write_text(json.dumps(row))
    ds = load_dataset(f"jsonl:{data}")
    [p] = ds.problems
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    fits_the_example_only = "```python\ndef add(a, b):\n    return 4\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    assert p.visible_check(right).passed and p.visible_check(fits_the_example_only).passed
    failed = p.visible_check(wrong)
    assert not failed.passed and "add(2, 2) returned 0, expected 4" in failed.failure
    assert [ds.grade(p, t) for t in (right, fits_the_example_only, wrong)] == [1.0, 0.0, 0.0]


def test_programs_that_pass_the_stated_examples_are_told_apart_by_behaviour():
    """HumanEval/0's probes (inputs near its two examples): the right program written two
    ways shares one digest; one that passes both examples by counting (len > 3) does not, nor
    one that does not load. The probes come from the stated examples, never the hidden tests."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/0")
    looped = (
        "```python\ndef has_close_elements(numbers, threshold):\n"
        "    for i in range(len(numbers)):\n"
        "        for j in range(i + 1, len(numbers)):\n"
        "            if abs(numbers[i] - numbers[j]) < threshold:\n"
        "                return True\n"
        "    return False\n```"
    )
    counting = WRONG.replace("return True", "return len(numbers) > 3")
    broken = WRONG.replace("return True", "return (")
    assert p.visible_check(counting).passed  # the stated examples cannot tell it apart
    digests = [p.behaviour(t) for t in (RIGHT, looped, counting, broken)]
    assert digests[0] == digests[1] and len(set(digests)) == 3
    hidden = [
        line.strip()
        .removeprefix("assert ")
        .split(" == ")[0]
        .replace("candidate(", "has_close_elements(")
        for line in p.meta["test"].splitlines()
        if "candidate(" in line
    ]
    assert len(hidden) > 3 and not any(call in p.meta["probe_tests"] for call in hidden)


def test_a_probe_that_loops_in_every_program_still_lets_the_others_tell_them_apart():
    """HumanEval/39's probes are prime_fib(0), on which a right program loops for ever, and
    prime_fib(6): each probe has its own time limit, so two right programs share a digest and
    one that memorised the examples (and loops on 0 as well) does not."""
    ds = load_dataset("humaneval", limit=None)
    p = next(x for x in ds.problems if x.id == "HumanEval/39")
    assert "prime_fib(0)" in p.meta["probe_tests"] and "prime_fib(6)" in p.meta["probe_tests"]
    counting = (
        "```python\ndef prime_fib(n):\n    a, b = 0, 1\n    while True:\n"
        "        a, b = b, a + b\n"
        "        if a > 1 and all(a % d for d in range(2, int(a ** 0.5) + 1)):\n"
        "            n -= 1\n            if n == 0:\n                return a\n```"
    )
    listed = (
        "```python\ndef prime_fib(n):\n    f = [0, 1]\n    found = 0\n    while True:\n"
        "        f.append(f[-1] + f[-2])\n        k = f[-1]\n"
        "        if k >= 2 and not any(k % d == 0 for d in range(2, k)):\n"
        "            found += 1\n            if found == n:\n                return k\n```"
    )
    memorised = (
        "```python\ndef prime_fib(n):\n    while n < 1:\n        pass\n"
        "    return [2, 3, 5, 13, 89, 144][n - 1]\n```"
    )
    assert all(p.visible_check(t).passed for t in (counting, listed, memorised))
    digests = [p.behaviour(t) for t in (counting, listed, memorised)]
    assert digests[0] == digests[1] != digests[2]


#: A code problem whose hidden test uses values found nowhere else (not in the stub, not in
#: its stated example): any of them in a request is a leak, whatever route it took (a
#: failure message built from a hidden test, a grounded pitfall, a retry's feedback).
SCALE_STUB = (
    'def scale(xs, k):\n    """Each item times k.\n    >>> scale([1, 2], 3)\n    [3, 6]\n    """\n'
)
HIDDEN_TEST = (
    "def check(candidate):\n    assert candidate([4181, 6765], 10946) == [45765226, 74049690]\n"
)
HIDDEN_VALUES = ("4181", "6765", "10946", "45765226", "74049690")


def scale_wrong_then_right(body: dict, index: int) -> str:
    from rse_fast.prompts import is_distillation

    if is_distillation(body["messages"]):
        return json.dumps({"positive": ["scale multiplies each item by k."], "negative": []})
    if "expected" in json.dumps(body["messages"]):  # shown a failure: fix it
        return "```python\ndef scale(xs, k):\n    return [x * k for x in xs]\n```"
    return "```python\ndef scale(xs, k):\n    return [x + k for x in xs]\n```"


@pytest.mark.parametrize("name", ["rse+check", "reflexion", "sc+filter", "bon+filter"])
async def test_no_hidden_test_value_reaches_any_prompt_by_any_route(name):
    from rse_fast.eval.datasets import code_problem
    from rse_fast.eval.examples import visible_examples

    p = code_problem("scale", SCALE_STUB, "scale", HIDDEN_TEST,
                     visible_examples(SCALE_STUB, "scale"))  # fmt: skip
    options = rse_options() if name.startswith("rse") else {"parallel": 2, "max_tokens": 96}
    async with ScriptedServer(default_reply=scale_wrong_then_right) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method(name, **options).run(p, 4000, c)
    sent = json.dumps(srv.requests)
    assert "expected" in sent or name.endswith("filter")  # a failure was shown (not filters)
    assert not [v for v in HIDDEN_VALUES if v in sent], name
    assert res.final is not None and not any(v in sent for v in HIDDEN_VALUES)
