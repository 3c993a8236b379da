"""The study's metrics on synthetic pools whose true values are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rse_fast.eval.metrics import (
    bootstrap_mean_ci,
    capture,
    capture_reason,
    linear_fit,
    mean,
    mean_pairwise_cosine_distance,
    oracle,
    oracle_bias_corrected,
    paired_difference,
    spearman,
)
from rse_fast.eval.summary import aggregate, capture_vs_rho, paired_rows
from rse_fast.eval.summary_table import markdown_table

NAN = float("nan")


def test_oracle_is_nan_safe_whatever_the_order():
    for pool in ([NAN, 0.2, 0.9], [0.9, NAN, 0.2], [0.2, 0.9, NAN]):
        assert oracle(pool) == 0.9
    assert math.isnan(oracle([NAN, NAN])) and oracle([]) == 0.0
    assert mean([NAN, None, 1.0, 0.0]) == 0.5


def test_capture_and_headroom_by_hand():
    # μ = 0.4, Q* = 0.9, Q = 0.6: h = 0.2 / 0.5
    assert capture(final=0.6, single=0.4, oracle_q=0.9) == pytest.approx(0.4)
    assert math.isnan(capture(final=0.6, single=0.9, oracle_q=0.9))  # no headroom
    # a tiny headroom explodes the ratio (h = -894% at 1%): NaN, with its reason
    assert math.isnan(capture(final=0.3, single=0.4, oracle_q=0.41))
    assert "below 0.05" in capture_reason(single=0.4, oracle_q=0.41)
    assert capture_reason(single=0.4, oracle_q=0.9) == ""
    assert capture(final=0.3, single=0.4, oracle_q=0.9) == pytest.approx(-0.2)


def test_bias_corrected_oracle_recovers_the_true_best_of_iid_pools():
    rng = np.random.default_rng(3)
    n, pools, tau, sigma = 16, 400, 0.10, 0.15
    true_best, observed, corrected = [], [], []
    for _ in range(pools):
        q = rng.normal(0.5, tau, n)
        first, second = q + rng.normal(0, sigma, n), q + rng.normal(0, sigma, n)
        fit = oracle_bias_corrected(list(first), list(second))
        assert fit is not None
        true_best.append(q.max())
        observed.append(fit.observed_max)
        corrected.append(fit.corrected)
    truth = float(np.mean(true_best))
    # the max of noisy readings overstates the best candidate (winner's curse) ...
    assert np.mean(observed) - truth > 0.05
    # ... the closed form removes nearly all of it
    assert abs(np.mean(corrected) - truth) < 0.02


def test_bias_correction_leaves_noiseless_pools_alone():
    fit = oracle_bias_corrected([0.2, 0.9, 0.6], [0.2, 0.9, 0.6])
    assert fit is not None and fit.corrected == pytest.approx(0.9) and fit.noise_var == 0
    assert oracle_bias_corrected([0.5], [0.5]) is None


def test_spearman_and_diversity_as_distance():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    e = np.eye(3, dtype=np.float32)
    assert mean_pairwise_cosine_distance(e) == pytest.approx(1.0)  # orthogonal: far apart
    same = np.ones((3, 2)) / np.sqrt(2)
    assert mean_pairwise_cosine_distance(same) == pytest.approx(0.0)  # collapsed pool
    assert mean_pairwise_cosine_distance(e[:1]) is None


def test_intervals_and_paired_differences_cover_known_effects():
    rng = np.random.default_rng(0)
    x = rng.normal(0.3, 0.1, 200)
    lo, hi = bootstrap_mean_ci(list(x))
    assert lo < 0.3 < hi and hi - lo < 0.05
    base = rng.uniform(0, 1, 100)  # per-problem difficulty, shared by both methods
    a, b = base + 0.1 + rng.normal(0, 0.01, 100), base
    diff, (dlo, dhi) = paired_difference(list(a), list(b))
    assert diff == pytest.approx(0.1, abs=0.01) and dlo > 0.09 and dhi < 0.11
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1.0], [1.0, 2.0])


def test_linear_fit_recovers_a_known_line():
    xs = [0.0, 0.1, 0.2, 0.4, 0.8]
    fit = linear_fit(xs, [0.05 + 1.2 * x for x in xs])
    assert fit is not None
    assert fit.slope == pytest.approx(1.2) and fit.intercept == pytest.approx(0.05)
    assert fit.r2 == pytest.approx(1.0) and fit.points == 5
    assert linear_fit([0.1, None, 0.3], [1.0, 2.0, None]) is None  # too few pairs


def _rec(problem, method, budget, final, pool, judge=None, rho=None):
    return {
        "problem": problem,
        "method": method,
        "budget": budget,
        "tokens": budget,
        "budget_error": 0.0,
        "exploration_tokens": budget,
        "exploitation_tokens": 0,
        "final_quality": final,
        "pool_quality": pool,
        "pool_quality_first": pool,
        "pool_quality_second": pool,
        "pool_origin": ["sample"] * len(pool),
        "judge_scores": judge or [],
        "judge_garbage": sum(1 for j in judge or [] if j != j),
        "rho_v": rho,
        "verifier": "v" if judge else None,
        "grader": "exact:test",
        "diversity": 0.3,
        "meta": {},
    }


def _single(problem, qualities):
    return {"problem": problem, "method": "single", "budget": 0, "qualities": qualities}


def test_report_rows_use_independent_single_samples_and_count_garbage():
    recs = [
        _single("a", [1.0, 0.0, 0.0, 0.0]),  # μ_a = 0.25
        _single("b", [0.0, 0.0, 0.0, 1.0]),  # μ_b = 0.25
        # the pools are full of right answers: μ must not be read from them
        _rec("a", "bon", 100, 1.0, [1.0, 1.0, 1.0], judge=[9.0, NAN, 8.0], rho=0.5),
        _rec("b", "bon", 100, 0.0, [0.0, 1.0, 1.0], judge=[NAN, NAN, 2.0], rho=None),
    ]
    row = aggregate(recs)[0]
    assert row["single"] == pytest.approx(0.25) and row["oracle"] == 1.0
    assert row["final"] == pytest.approx(0.5)
    assert row["headroom"] == pytest.approx(0.75)
    assert row["net_exploitation"] == pytest.approx(-0.5)
    assert row["capture"] == pytest.approx((0.5 - 0.25) / 0.75)
    assert row["judge_garbage"] == 3  # per method, from its own records
    assert row["rho_v"] == 0.5 and row["rho_v_pools"] == 1  # defined on one pool of two
    assert row["rho_v_kind"] == "verifier-vs-exact"
    assert row["final_ci95"] == [0.0, 1.0]


def test_a_checkers_verdicts_are_summed_per_method_and_named_in_the_table():
    """rse+arith's records carry the checker's verdicts: the row sums them over problems with
    the refuted share, the table says so; a method without a checker reports none."""
    checked = [_rec(p, "rse+arith", 100, 1.0, [1.0]) for p in "ab"]
    checked[0]["meta"] = {
        "checks": {"refuted": 1, "verified": 2},
        "checks_by_kind": {"positive": {"refuted": 1, "verified": 1}, "negative": {"verified": 1}},
    }
    checked[1]["meta"] = {"checks": {"unknown": 1},
                          "checks_by_kind": {"positive": {"unknown": 1}}}  # fmt: skip
    recs = [*checked, _rec("a", "rse", 100, 1.0, [1.0]), _rec("b", "rse", 100, 1.0, [1.0])]
    rows = {r["method"]: r for r in aggregate(recs)}
    assert rows["rse+arith"]["checks"] == {"refuted": 1, "verified": 2, "unknown": 1,
                                           "refuted_share": 0.25}  # fmt: skip
    assert rows["rse+arith"]["checks_by_kind"]["positive"]["refuted_share"] == 1 / 3
    assert rows["rse+arith"]["checks_by_kind"]["negative"] == {"verified": 1, "refuted_share": 0.0}
    assert rows["rse"]["checks"] is None and rows["rse"]["checks_by_kind"] is None
    table = markdown_table({"rows": list(rows.values()), "paired": []})
    assert "rse+arith@100 25% refuted (1 refuted, 1 unknown, 2 verified)" in table
    assert "rse@100 " not in table.split("The checker's verdicts")[-1]


def test_paired_rows_and_the_capture_regression():
    recs = [_single(p, [0.0]) for p in "abcd"]
    for p, (x, y) in zip("abcd", [(1, 0), (1, 1), (1, 0), (0, 0)], strict=True):
        recs += [_rec(p, "sc", 100, float(x), [1.0]), _rec(p, "bon", 100, float(y), [1.0])]
    pairs = {(r["a"], r["b"]): r for r in paired_rows(recs)}
    assert pairs[("bon", "sc")]["diff"] == pytest.approx(-0.5)
    assert pairs[("sc", "single")]["diff"] == pytest.approx(0.75)
    assert pairs[("bon", "sc")]["problems"] == 4
    rows = [{"method": "bon", "rho_v": r, "capture": 0.1 + 1.2 * r} for r in (0.0, 0.2, 0.5, 0.7)]
    rows += [{"method": "bon", "rho_v": None, "capture": 0.3}]
    # another family with another relation: pooled, the two would blur into one slope
    rows += [{"method": "beam", "rho_v": r, "capture": 0.5 - r} for r in (0.1, 0.3, 0.6)]
    fits = capture_vs_rho(rows)
    assert list(fits) == ["bon", "beam"]  # best-of-N first, as the study fits it
    assert fits["bon"]["slope"] == pytest.approx(1.2) and fits["bon"]["points"] == 4
    assert fits["beam"]["slope"] == pytest.approx(-1.0)


def test_methods_pair_only_at_matched_actual_spend():
    recs = [_single(p, [0.0]) for p in "abcd"]
    for p in "abcd":
        recs += [_rec(p, "sc", 1000, 1.0, [1.0]), _rec(p, "bon", 1000, 0.0, [1.0])]
    for r in recs:
        if r.get("method") == "bon":
            r["tokens"] = 1300  # spent 30% more than sc at the same nominal budget
        elif r.get("method") == "sc":
            r["tokens"] = 1000
    assert not [r for r in paired_rows(recs) if {r["a"], r["b"]} == {"sc", "bon"}]
    for r in recs:
        if r.get("method") == "bon":
            r["tokens"] = 1050
    matched = [r for r in paired_rows(recs) if {r["a"], r["b"]} == {"sc", "bon"}]
    assert len(matched) == 1 and matched[0]["tokens_b"] == 1000


def test_rho_v_is_labelled_by_the_verifier_actually_used():
    from rse_fast.eval.runner import verifier_of
    from rse_fast.eval.summary import verifier_kind
    from rse_fast.methods import HTTPRewardModel, LLMJudge, make_method

    bon = make_method("bon", judge=HTTPRewardModel("http://rm:9/score"))
    assert verifier_of(bon) == "reward:http://rm:9/score"
    assert verifier_of(make_method("bon", judge=LLMJudge())) is None  # the plan's judge
    assert verifier_kind([{"verifier": "reward:http://rm:9/score"}]) == "reward model"
    assert verifier_kind([{"verifier": "http://j:1/v1#judge"}]) == "LLM judge"
    assert verifier_kind([{"verifier": None}]) is None


def test_healthbench_overall_score_as_simple_evals_computes_it():
    """Per-response clipping lifts a response that earned negative points to 0; simple-evals
    averages the raw scores and clips only the mean."""
    from rse_fast.eval.grading import Criterion, points_score
    from rse_fast.eval.summary import simple_evals_score

    rubric = [Criterion(text="helps", points=5), Criterion(text="harms", points=-10)]
    assert points_score(rubric, [False, True]) == 0.0
    assert points_score(rubric, [False, True], clip=False) == pytest.approx(-2.0)
    recs = [
        {"grader": "http://g/v1#big", "final_quality_unclipped": -2.0},
        {"grader": "http://g/v1#big", "final_quality_unclipped": 1.0},
    ]
    assert simple_evals_score(recs) == 0.0  # mean -0.5, clipped; per-response would say 0.5
    assert simple_evals_score([{"grader": "exact:math", "final_quality_unclipped": 1.0}]) is None


def test_capture_interval_resamples_problems_and_is_undefined_without_headroom():
    from rse_fast.eval.metrics import capture, capture_ci

    assert capture_ci([0.6] * 5, [0.4] * 5, [0.8] * 5) == pytest.approx((0.5, 0.5))
    finals, singles, oracles = [1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 0, 1], [1, 1, 1, 1, 0, 1]
    lo, hi = capture_ci(finals, singles, oracles)
    point = capture(sum(finals) / 6, sum(singles) / 6, sum(oracles) / 6)
    assert lo < point < hi and hi <= 1.0
    flat = capture_ci([0.5] * 4, [0.5] * 4, [0.52] * 4)
    assert flat[0] != flat[0]  # headroom 0.02: h means nothing, nor does its interval
