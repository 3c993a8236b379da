"""Answer checks that can be killed: a symbolic check that runs away is killed at its timeout
and replaced; expressions no check could evaluate are refused at once; both are UNDECIDED,
counted, and later checks are right again."""

from __future__ import annotations

import time

import pytest

from rse_fast.answers import CheckerPool, Verdict, check_equivalence, checker_stats
from rse_fast.answers.checker import refuse, tower_depth

from fakes.slow_checks import SLOW, serve_slowly, serve_without_math_verify


@pytest.mark.parametrize(
    ("text", "depth"),
    [("2", 0), ("2^3", 1), ("2^{10}+3^4", 1), ("9^{9^{9^{9}}}", 3), ("a^b^c", 2),
     ("x^{y^{2}}", 2), ("{2}^{3}", 1)],
)  # fmt: skip
def test_tower_depth(text, depth):
    assert tower_depth(text) == depth


@pytest.mark.parametrize(
    "text", ["9^{9^{9^{9}}}", "8^{8^{8^{8}}}", "2^{123456}", "x" * 201, "10^{99999}"]
)
def test_guard_refuses_what_cannot_be_evaluated_in_time(text):
    assert refuse(text) is not None


@pytest.mark.parametrize("text", ["\\frac{1}{2}", "2^{10}", "3\\sqrt{2}", "x^2+1", "10^{9}"])
def test_guard_lets_ordinary_answers_through(text):
    assert refuse(text) is None


def test_towers_are_undecided_at_once_and_counted():
    before = checker_stats()
    t0 = time.perf_counter()
    verdict = check_equivalence("9^{9^{9^{9}}}", "8^{8^{8^{8}}}")
    assert verdict is Verdict.UNDECIDED and time.perf_counter() - t0 < 0.1
    after = checker_stats()
    assert after["undecided"] == before["undecided"] + 1
    assert after["refused"] == before["refused"] + 1


def test_a_runaway_check_is_killed_at_its_timeout_and_the_pool_recovers():
    pool = CheckerPool(size=1, timeout_s=0.5, target=serve_slowly)
    try:
        assert pool.check("a", "a") is Verdict.EQUAL  # the worker is up
        t0 = time.perf_counter()
        assert pool.check(SLOW, "1") is Verdict.UNDECIDED
        took = time.perf_counter() - t0
        assert 0.5 <= took < 1.5, took
        assert pool.stats.killed == 1 and pool.stats.undecided == 1
        # a fresh worker took the killed one's place: later checks answer again
        assert pool.check("b", "b") is Verdict.EQUAL
        assert pool.check("b", "c") is Verdict.DIFFERENT
    finally:
        pool.close()


def test_a_check_that_cannot_run_is_undecided_not_different():
    """Without math-verify no symbolic check can run: two forms of one value are UNDECIDED
    (they used to come back DIFFERENT), counted, and not cached as an answer."""
    pool = CheckerPool(size=1, timeout_s=5, target=serve_without_math_verify)
    try:
        assert pool.check("\\frac{1}{2}", "0.5") is Verdict.UNDECIDED
        assert pool.check("\\frac{1}{2}", "0.5") is Verdict.UNDECIDED  # not cached
        assert pool.stats.undecided == 2 and pool.stats.killed == 0
    finally:
        pool.close()


def test_real_math_verify_after_an_undecided_check_is_still_right():
    pytest.importorskip("math_verify")
    assert check_equivalence("9^{9^{9^{9}}}", "8^{8^{8^{8}}}") is Verdict.UNDECIDED
    assert check_equivalence("\\frac12", "0.5") is Verdict.EQUAL
    assert check_equivalence("\\frac{1}{3}", "0.5") is Verdict.DIFFERENT
