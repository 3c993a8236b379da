"""Checked experience: a task's checker re-computes what a distiller claims; a refuted
proposition never reaches a prompt (it is refiled as a pitfall that states the evidence, or
dropped), the bank keeps every verdict and its evidence, and the checker's time is booked."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rse_fast.encoder import Encoder
from rse_fast.errors import CheckerError
from rse_fast.methods import VisibleResult
from rse_fast.prompts import PROPOSITIONS_HEADER
from rse_fast.rse.checking import (
    ArithmeticChecker,
    Check,
    CodeExamplesChecker,
    bare_function,
    evaluate,
)
from rse_fast.testing import ScriptedServer

from fakes.engines import make_rse
from fakes.scripted_model import GOLD, MECHANISM, PROBLEM, is_distill, is_guided, prompt_of
from fakes.scripted_model import reply as scripted_reply

WRONG = "Adding the units gives 27 + 15 = 32."
RIGHT = "The units give 7 + 5 = 12."


@pytest.mark.parametrize(
    ("text", "verdict", "evidence"),
    [
        ("So 81 + 78 = 3.", "refuted", "81 + 78 = 159, not 3"),
        ("81 + 78 = 159, not 3", "verified", "81 + 78 = 159"),
        ("( 5 / 1 + -3 ) = 8", "refuted", "= 2, not 8"),
        ("7 / 2 = 3", "refuted", "7 / 2 = 3.5, not 3"),
        ("Multiply 6 x 7 = 42.", "verified", "6 x 7 = 42"),
        ("Carry the one.", "unknown", ""),
        ("It is 1,000 + 5 = 1005", "unknown", ""),  # a thousands separator is not parsed
        ("x = 5", "unknown", ""),
        # the number first, an expression on either side, a chain read pair by pair
        ("358 = -72 + (-16 * -78)", "refuted", "-72 + (-16 * -78) = 1176, not 358"),
        ("-8 + 0 + 0 - 4 = -8 + 4", "refuted", "-8 + 0 + 0 - 4 = -12, not -8 + 4 = -4"),
        ("Subtract: 1 - (-6) = 1 + 6 = 7", "verified", "1 - (-6) = 7; 1 + 6 = 7"),
        ("-48 = -50 - 48 = -120", "refuted", "-50 - 48 = -98, not -120"),
        # every link of a chain is equal: a plain number is held to its nearest expression
        ("3 + 4 = 7 = 8", "refuted", "3 + 4 = 7, not 8"),
        ("7 = 8 = 3 + 5", "refuted", "3 + 5 = 8, not 7"),
        ("4 + 4 = 8 = 2 * 5", "refuted", "2 * 5 = 10, not 8"),
        ("4 + 4 = 8 = 2 * 4", "verified", "4 + 4 = 8; 2 * 4 = 8"),
        ("1 + 1 = 2 = 2 = 3", "refuted", "1 + 1 = 2, not 3"),
        ("5 = 5", "unknown", ""),
        # as LaTeX, Unicode and Python write it
        (r"So \(6 \times 7 = 42\) and \(84 \div 2 = 40\)", "refuted", "84 / 2 = 42, not 40"),
        ("9 − 4 = 5, and 3 · 3 = 9", "verified", "9 - 4 = 5; 3 * 3 = 9"),
        ("(-97 + (-69)) == -166", "verified", "(-97 + (-69)) = -166"),
        ("(3 + 4 = 8)", "refuted", "3 + 4 = 7, not 8"),
        # amounts of money: a currency sign before a number is part of the amount
        ("Her change is $20 - $12 = $8.", "verified", "20 - 12 = 8"),
        ("so 4 x $3 = $13", "refuted", "4 x 3 = 12, not 13"),
        ("It costs €4 * 3 = €12 and £5 + £5 = £10.", "verified", "5 + 5 = 10"),
        (r"In LaTeX: $20 - 12 = 8$ and \$7 + \$1 = \$8", "verified", "7 + 1 = 8"),
        # a decimal holds to the places it is written to, rounded or cut; an integer is exact
        ("1 / 3 = 0.333 and 2 / 3 = 0.666 and 22 / 7 = 3.14", "verified", "22 / 7 = 3.14286"),
        ("1 / 3 = 0.34", "refuted", "1 / 3 = 0.333333, not 0.34"),
        ("2 ⋅ 3.5 = 7.0", "verified", "2 * 3.5 = 7"),
        # a side that runs on into a term the claim leaves out is not a claim about numbers
        ("x + 3 = 5 + 1", "unknown", ""),
        ("2^3 + 1 = 9", "unknown", ""),
        ("3 + 4 = 7x", "unknown", ""),
        ("Add 14 to 36 = 50", "unknown", ""),
        ("1 / 0 = 5", "unknown", ""),
    ],
)
def test_equations_between_numbers_are_recomputed_exactly(text, verdict, evidence):
    check = ArithmeticChecker().check(text, "positive")
    assert check.verdict == verdict and evidence in check.evidence


def test_a_long_or_hostile_statement_is_read_in_one_pass():
    """A checker reads what a distiller wrote, whatever its length: the scan has no
    backtracking, so a statement the old pattern needed minutes for is read at once, and a
    claim at its end is still found."""
    checker = ArithmeticChecker()
    assert checker.check("(" * 5000 + "1 + 1 = 3", "positive").verdict == "refuted"
    assert checker.check("1 + " * 3000 + "= 5 " + ")" * 3000, "positive").verdict == "unknown"
    spaced = checker.check("1" + " " * 20000 + "+ 7 + 5 = 12", "positive")
    assert spaced.verdict == "refuted" and spaced.evidence == "1 + 7 + 5 = 13, not 12"


SPELLED = {"+": ["+"], "-": ["-", "−"], "*": ["*", "×", "\\times", "x", "\\cdot"],
           "/": ["/", "÷", "\\div"]}  # fmt: skip


@st.composite
def written_claims(draw):
    """``a op b = stated`` as a distiller might write it, amid prose, with its truth."""
    a, b = draw(st.integers(-999, 999)), draw(st.integers(-999, 999))
    op = draw(st.sampled_from(sorted(SPELLED)))
    if op == "/":
        b = b or 1
        a = a * b  # a whole quotient: what is stated is an integer
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[op]
    stated = value + draw(st.sampled_from([0, 0, 1, -1, 10, draw(st.integers(-50, 50))]))
    shown_b = f"({b})" if b < 0 else str(b)
    claim = f"{a} {draw(st.sampled_from(SPELLED[op]))} {shown_b} = {stated}"
    if draw(st.booleans()):
        claim = f"{stated} = {a} {draw(st.sampled_from(SPELLED[op]))} {shown_b}"
    before = draw(st.sampled_from(["", "So ", "Step 2: ", "$", "\\(", "We get: "]))
    after = draw(st.sampled_from(["", ".", ", so the sum is right", "$", "\\)", " and then"]))
    return before + claim + after, stated == value


@settings(max_examples=300, deadline=None)
@given(written_claims())
def test_a_written_claim_gets_the_verdict_its_arithmetic_deserves(written):
    text, true = written
    check = ArithmeticChecker().check(text, "positive")
    assert check.verdict == ("verified" if true else "refuted"), text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789 +-*/()=.,x^%−×÷\\timesdivcdot abc", max_size=80))
def test_any_statement_gets_a_verdict(text):
    """Whatever a distiller writes, the checker answers: no exception reaches the engine."""
    assert ArithmeticChecker().check(text, "positive").verdict in ("verified", "refuted", "unknown")


def test_only_small_arithmetic_is_evaluated():
    assert evaluate("0.1 + 0.2") == evaluate("3 / 10")  # exact, not float
    assert evaluate("1 / 0") is None and evaluate("__import__('os')") is None
    assert evaluate("2 ** 10") is None and evaluate("1 + " * 60 + "1") is None


def distiller_claims(body: dict, index: int) -> str:
    if is_distill(body):
        return json.dumps({"positive": [WRONG, RIGHT], "negative": []})
    return scripted_reply(body, index)


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("as_pitfall", [True, False])
async def test_a_refuted_claim_never_reaches_a_prompt_as_a_proposition(encoder, as_pitfall):
    async with ScriptedServer(default_reply=distiller_claims) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=4, refuted_as_pitfall=as_pitfall)
        rse.checker = ArithmeticChecker()
        async with rse.client:
            await rse.solve(PROBLEM, gold=GOLD, keep_bank=True)
        records = list(rse.client.ledger.records)
    guided = [prompt_of(b) for b in srv.requests if is_guided(b)]
    assert guided and all(RIGHT in p for p in guided)
    propositions = [p.split(PROPOSITIONS_HEADER)[-1] for p in guided]
    assert all(PROPOSITIONS_HEADER in p for p in guided)
    assert not any(WRONG in p for p in propositions)
    items = rse.bank.items
    assert [e.verdict for e in items["positive"]] == ["verified"]
    assert "7 + 5 = 12" in items["positive"][0].evidence
    refiled = [e for e in items["negative"] if e.verdict == "refuted"]
    if as_pitfall:
        assert refiled and "27 + 15 = 42, not 32" in refiled[0].text
        assert all("27 + 15 = 42, not 32" in p for p in guided)
    else:
        assert not refiled
    checks = [r for r in records if r.role == "check"]
    assert checks and all(r.total_tokens == 0 and r.work_s >= 0 for r in checks)
    assert MECHANISM  # the fake's mechanism settings are what make_rse runs with


class SlowChecker(ArithmeticChecker):
    """A task's checker that takes its time (a tool, a process): where it ran is recorded."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def check(self, text: str, kind: str) -> Check:
        self.threads.add(threading.get_ident())
        time.sleep(0.05)
        return super().check(text, kind)


async def test_a_checker_runs_off_the_event_loop_and_its_time_is_booked(encoder):
    """Checking a statement may take a tool or a process: it runs off the event loop, as
    running a rollout does, so the round's other rollouts stream meanwhile; the seconds it
    took are the checker's in the ledger, and its verdicts are what the checker said."""
    checker = SlowChecker()
    async with ScriptedServer(default_reply=distiller_claims) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=4)
        rse.checker = checker
        async with rse.client:
            await rse.solve(PROBLEM, gold=GOLD, keep_bank=True)
            loop_thread = threading.get_ident()
        records = list(rse.client.ledger.records)
    assert checker.threads and loop_thread not in checker.threads
    booked = sum(r.work_s for r in records if r.role == "check")
    assert booked >= 0.05 * 2 * 4  # two statements from each of round 1's four rollouts
    assert [e.verdict for e in rse.bank.items["positive"]] == ["verified"]


class BrokenChecker(ArithmeticChecker):
    """Raises on its first statement; its later calls are slow, so rollouts are in flight."""

    def __init__(self) -> None:
        self.calls = 0

    def check(self, text: str, kind: str) -> Check:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("checker broke")
        time.sleep(0.2)
        return super().check(text, kind)


async def test_a_checker_that_raises_ends_the_run_with_a_typed_error_and_no_stray_rollout(
    encoder,
):
    """A task's checker that raises ends the run with a CheckerError naming the checker, what
    it raised and the statement, the original as its cause; the round's other rollouts are
    cancelled with it, so none keeps calling a client its caller is closing."""
    async with ScriptedServer(default_reply=distiller_claims) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=4)
        rse.checker = BrokenChecker()
        async with rse.client:
            with pytest.raises(CheckerError) as caught:
                await rse.solve(PROBLEM, gold=GOLD)
            stray = [t for t in asyncio.all_tasks() if "_rollout_and_distill" in repr(t)]
    said = str(caught.value)
    assert said.startswith("the experience checker BrokenChecker raised RuntimeError: checker")
    assert "(on the " in said and " statement " in said
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert not stray


async def test_the_report_page_shows_each_verdict_and_its_evidence(encoder):
    from rse_fast.rse.run_page import render_report

    async with ScriptedServer(default_reply=distiller_claims) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=4)
        rse.checker = ArithmeticChecker()
        async with rse.client:
            result = await rse.solve(PROBLEM, gold=GOLD)
    page = render_report(result.to_dict())
    assert "refuted: 27 + 15 = 42, not 32" in page and "verified: re-computed" in page


PASSING = '''def double(xs):
    """Doubles each item.
    >>> double([1])
    [2]
    """
    # one pass
    return [2 * x for x in xs]
'''


def test_a_passing_rollout_files_its_code_only_when_asked_and_without_its_docstring():
    ran = VisibleResult(True, code=PASSING, examples=1)
    plain = CodeExamplesChecker(lambda text: ran).observe("reply")
    assert plain.items == [] and plain.rollout.verdict == "verified"
    seen = CodeExamplesChecker(lambda text: ran, file_passing=True).observe("reply")
    [(kind, text, check)] = seen.items
    assert kind == "positive" and check.verdict == "verified"
    assert text.startswith("This code passed all 1 examples the problem states:")
    assert "return [2 * x for x in xs]" in text
    assert "Doubles" not in text and "one pass" not in text and ">>>" not in text
    too_long = VisibleResult(True, code=PASSING + "\n" + "x = 1\n" * 400, examples=1)
    assert CodeExamplesChecker(lambda text: too_long, file_passing=True).observe("r").items == []
    assert bare_function("def broken(:") is None


def distiller_blames_a_right_step(body: dict, index: int) -> str:
    if is_distill(body):
        pitfalls = [f"Pitfall: {RIGHT}", "Forgetting to subtract what was given away."]
        return json.dumps({"positive": [], "negative": pitfalls})
    return scripted_reply(body, index)


async def test_a_pitfall_whose_arithmetic_checks_out_is_not_filed(encoder):
    """A small distiller files correct steps as pitfalls; the checker re-computes the step,
    and a right step is no pitfall of making it."""
    async with ScriptedServer(default_reply=distiller_blames_a_right_step) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=2)
        rse.checker = ArithmeticChecker()
        async with rse.client:
            await rse.solve(PROBLEM, gold=GOLD, keep_bank=True)
    negatives = [e.text for e in rse.bank.items["negative"]]
    assert negatives == ["Forgetting to subtract what was given away."]
    assert rse.distiller.check_counts_by_kind["negative"]["verified"] == 4  # 2 rounds x 2
