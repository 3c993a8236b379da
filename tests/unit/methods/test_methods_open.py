"""Methods fit for every task: task-aware prompts, step-wise searches that always finish,
particle resampling by effective sample size, refinement that keeps its best draft, bounded
fusion over a random subset, score-weighted best-of-N; and the wave behaviour shared by the
sampling families (no solo probe, each distinct candidate judged once, early stop)."""

from __future__ import annotations

import json
import random
import time

import pytest

from rse_fast.llm.budget import buys_part_unit
from rse_fast.llm.client import LLMClient
from rse_fast.methods import Problem, make_method
from rse_fast.methods.particle import effective_sample_size, systematic_resample
from rse_fast.prompts import END_MARK, JUDGE_SYSTEM, RESPOND_SYSTEM
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import GOLD, PROBLEM, reply

ADVICE = Problem(
    "hb",
    "And what should I do tonight?",
    None,
    {},
    history=(
        {"role": "user", "content": "My ankle is swollen after a run."},
        {"role": "assistant", "content": "That sounds like a sprain. Does it hurt to walk?"},
    ),
    open_ended=True,
)


def is_judge(body: dict) -> bool:
    return body["messages"][0]["content"].startswith(JUDGE_SYSTEM[:40]) and "Rate" in str(
        body["messages"][-1]["content"]
    )


def open_reply(body: dict, index: int) -> str:
    user = str(body["messages"][-1]["content"])
    if is_judge(body):
        return json.dumps({"score": 6})
    if "Write only the next step" in user:
        return "Rest and raise the ankle."  # never says it is done
    if "Continue this response" in user:
        return f"Ice it for 15 minutes, and see a doctor if it gets worse. {END_MARK}"
    return "Rest, ice, compression and elevation tonight; see a doctor if you cannot walk."


@pytest.mark.parametrize("name", ["bon", "beam", "particle", "refine", "fusion"])
async def test_open_ended_tasks_get_open_ended_prompts(name):
    async with ScriptedServer(default_reply=open_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method(name, parallel=4, max_tokens=128).run(ADVICE, 2500, c)
    assert res.final is not None and res.final.text
    for body in srv.requests:
        text = json.dumps(body["messages"])
        assert "boxed" not in text, (name, text[:300])
    solves = [b for b in srv.requests if b["messages"][0]["content"] == RESPOND_SYSTEM]
    assert solves, name
    if name in ("bon", "fusion", "refine"):  # plain samples keep the conversation's turns
        roles = [m["role"] for m in solves[0]["messages"]]
        assert roles == ["system", "user", "assistant", "user"]


@pytest.mark.parametrize("name", ["beam", "particle"])
async def test_stepwise_search_never_returns_unfinished_text(name):
    async with ScriptedServer(default_reply=open_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method(name, parallel=4, max_tokens=128, max_depth=3).run(
                ADVICE, 2500, c
            )
    assert res.meta["completed_open_paths"] >= 1
    assert all("see a doctor" in p.text for p in res.pool)  # every candidate was finished
    assert END_MARK not in res.final.text


def test_systematic_resampling_and_ess():
    rng = random.Random(0)
    assert systematic_resample([1.0, 0.0, 0.0], 4, rng) == [0, 0, 0, 0]
    draws = systematic_resample([1.0, 1.0, 2.0], 4, rng)
    assert sorted(draws) == [0, 1, 2, 2]  # systematic: counts within one of n·w
    assert effective_sample_size([1.0, 1.0, 1.0, 1.0]) == pytest.approx(4.0)
    assert effective_sample_size([1.0, 0.0, 0.0]) == pytest.approx(1.0)


def step_reply(body: dict, index: int) -> str:
    """Steps whose judge scores differ a lot (unbalanced weights); finishes at depth 3."""
    user = str(body["messages"][-1]["content"])
    seed = int(body.get("seed") or 0)
    if is_judge(body):
        return json.dumps({"score": 10 if "bright" in user else 1})
    if "Write only the next step" in user:
        steps = user.split("so far:\n", 1)[1].split("\n\nWrite only", 1)[0]
        depth = 0 if steps.startswith("(nothing yet") else steps.count("\n\n") + 1
        if depth >= 2:
            return "So \\boxed{42}."
        return f"Step {depth + 1} {'bright' if seed % 2 else 'dim'} {seed}."
    return reply(body, index)


@pytest.mark.parametrize(("threshold", "resampled"), [(0.0, False), (1.0, True)])
async def test_particle_filter_resamples_when_ess_is_low(threshold, resampled):
    async with ScriptedServer(default_reply=step_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method(
                "particle", parallel=4, max_tokens=128, ess_threshold=threshold
            ).run(Problem("p", PROBLEM, GOLD), 2500, c)
    assert (res.meta["resamples"] > 0) is resampled
    assert res.final.answer == GOLD


def worsening_reply(body: dict, index: int) -> str:
    """The first draft is right; every revision makes it wrong."""
    user = str(body["messages"][-1]["content"])
    if is_judge(body):
        return json.dumps({"score": 8 if "boxed{42}" in user else 2})
    if "Review of it" in user:
        return "Revised: \\boxed{41}"
    if body["messages"][0]["content"].startswith(JUDGE_SYSTEM[:30]):
        return "Looks slightly off."
    return "Six sevens: \\boxed{42}"


async def test_refinement_returns_its_best_draft_and_stops_at_a_threshold():
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=worsening_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("refine", max_tokens=64, stop_score=None).run(problem, 2500, c)
            assert res.meta["revisions"] >= 2 and res.pool[-1].answer == "41"
            assert res.final.answer == GOLD and res.meta["best_draft"] == 0
            early = await make_method("refine", max_tokens=64, stop_score=8).run(problem, 2500, c)
    assert early.meta["revisions"] == 0 and early.meta["stopped_at_threshold"]
    assert early.tokens < res.tokens


async def test_fusion_fuses_a_bounded_random_subset():
    long_reply = "x" * 5000 + " \\boxed{42}"
    async with ScriptedServer(default_reply=long_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("fusion", max_tokens=64, fuse_k=3, max_fusion_chars=3000).run(
                Problem("p", PROBLEM, GOLD), 30_000, c
            )
    fuse = srv.requests[-1]["messages"][-1]["content"]
    assert res.meta["fused"] == 3 and res.meta["sampled"] > 3
    assert fuse.count("### Candidate") == 3
    assert len(fuse) < 3000 + 1500  # the candidates are clipped to 3000 characters in all


def weighted_reply(body: dict, index: int) -> str:
    user = str(body["messages"][-1]["content"])
    if is_judge(body):
        return json.dumps({"score": 9 if "boxed{42}" in user else 5})
    seed = int(body.get("seed") or 0)
    return f"Attempt {seed}: \\boxed{{{'42' if seed % 4 == 0 else '41'}}}"


async def test_best_of_n_score_weighted_voting():
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=weighted_reply) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            best = await make_method("bon", parallel=8, max_tokens=64).run(problem, 4000, c)
            weighted = await make_method(
                "bon", parallel=8, max_tokens=64, selection="weighted"
            ).run(problem, 4000, c)
    # one 42 in four scores 9; three 41s score 5 each: 15 > 9 per group of four
    assert best.final.answer == "42"
    assert weighted.final.answer == "41" and weighted.meta["vote_weight"] > 9
    with pytest.raises(ValueError, match="weighted"):
        await make_method("bon", selection="weighted").run(ADVICE, 1000, c)


@pytest.mark.parametrize("name", ["sc", "bon"])
async def test_first_wave_fans_out_at_once(name):
    """No solo probe: once a run has taught the method its completion length, 8 samples at
    parallel 8 take one latency (best-of-N: one for the samples, one for their judges)."""
    latency = 0.3
    async with ScriptedServer(default_reply=reply, latency=latency) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            method = make_method(name, parallel=8, max_tokens=64)
            warm = await method.run(Problem("p", PROBLEM, GOLD), 1000, c)
            unit = warm.tokens / len(warm.pool)
            started = time.perf_counter()
            res = await method.run(Problem("p", PROBLEM, GOLD), int(8 * unit), c)
            wall = time.perf_counter() - started
    assert 7 <= len(res.pool) <= 9
    layers = 1 if name == "sc" else 2  # best-of-N: samples, then their judges
    assert wall < (layers + 0.7) * latency, wall
    assert srv.max_in_flight >= 8


async def test_each_distinct_candidate_is_judged_once():
    """Two distinct replies among many samples: one judge call per distinct text, every
    duplicate a zero-token reuse in the ledger (with one distinct text, no call at all:
    tests/test_methods.py)."""

    def two(body: dict, index: int) -> str:
        if is_judge(body):
            return json.dumps({"score": 7})
        seed = int(body.get("seed") or 0)
        return "Always the same: \\boxed{42}" if seed % 4 else "Another: \\boxed{41}"

    async with ScriptedServer(default_reply=two) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("bon", parallel=4, max_tokens=64).run(
                Problem("p", PROBLEM, GOLD), 3000, c
            )
    judged = [b for b in srv.requests if is_judge(b)]
    assert len(judged) == 2 and len(res.pool) > 4
    assert res.meta["judge_reused"] == len(res.pool) - 2
    reused = [r for r in res.ledger.records if r.usage_source == "reused"]
    assert len(reused) == len(res.pool) - 2 and all(r.total_tokens == 0 for r in reused)
    assert all(p.scores["judge"] == 7 for p in res.pool)


async def test_best_of_n_plans_waves_with_free_duplicate_judging():
    """Three distinct replies in turn: after one run the method knows most samples are judged
    free, so 8 samples at 4 calls in flight go out in two full waves (not priced as if each
    brought a judge call, which split the last samples into small extra waves): 11 calls in
    three layers, as few as 4 slots allow."""
    latency = 0.2
    turn = iter(range(10**6))

    def cycle(body: dict, index: int) -> str:
        if is_judge(body):
            return json.dumps({"score": 8 if "{42}" in str(body["messages"][-1]) else 4})
        k = next(turn) % 3
        return f"Variant {k}: \\boxed{{{('42', '41', '42')[k]}}}"

    async with ScriptedServer(default_reply=cycle, latency=latency) as srv:
        async with LLMClient(srv.base_url, "m", max_concurrency=4) as c:
            method = make_method("bon", parallel=4, max_tokens=64)
            warm = await make_method("bon", max_tokens=64).run(Problem("p", PROBLEM, GOLD), 2000, c)
            sample = [r.total_tokens for r in warm.ledger.records if r.role == "explore"]
            judge = [
                r.total_tokens
                for r in warm.ledger.records
                if r.role == "judge" and r.usage_source != "reused"
            ]
            budget = int(8 * sum(sample) / len(sample) + 3 * sum(judge) / len(judge))
            await method.run(Problem("p", PROBLEM, GOLD), budget, c)
            started = time.perf_counter()
            res = await method.run(Problem("p", PROBLEM, GOLD), budget, c)
            wall = time.perf_counter() - started
    # 8 samples' worth: 7 or 8 (a later wave buys a part sample only when stopping short
    # would land more than 10% under), either way in two waves, 3 judged
    assert 7 <= len(res.pool) <= 8 and res.meta["judge_calls"] == 3
    assert abs(res.budget_error) <= 0.10
    assert wall < 3.7 * latency, wall


def test_a_later_wave_buys_a_part_unit_only_to_stay_within_ten_percent():
    assert not buys_part_unit(0.9, 4.6)  # under 5 units: whole units only
    assert not buys_part_unit(0.7, 7.7) and buys_part_unit(0.9, 7.9)  # 0.77 / 0.79 needed
    assert not buys_part_unit(0.99, 12.0)  # 10 units and more: one unit short is within 10%


@pytest.mark.parametrize(("units", "expected"), [(4.6, 4), (7.7, 7), (7.9, 8), (4.4, 4)])
async def test_self_consistency_tail_waves_buy_whole_units(units, expected):
    """A budget of 4.6 samples at 4 in flight is one wave of 4, not a wave of 4 and a wave
    of one (twice the wall time for a fifth of the votes)."""
    async with ScriptedServer(default_reply=lambda b, i: "So \\boxed{42}") as srv:
        async with LLMClient(srv.base_url, "m") as c:
            method = make_method("sc", parallel=4, max_tokens=64)
            warm = await method.run(Problem("p", PROBLEM, GOLD), 1000, c)
            unit = warm.tokens / len(warm.pool)
            res = await method.run(Problem("p", PROBLEM, GOLD), int(units * unit + 0.5), c)
    assert len(res.pool) == expected


async def test_self_consistency_early_stop_saves_tokens():
    def unanimous(body: dict, index: int) -> str:
        return "Clearly \\boxed{42}"

    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=unanimous, latency=0.05) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            full = await make_method("sc", parallel=4, max_tokens=64).run(problem, 3000, c)
            calls_full = len(srv.requests)
            early = await make_method("sc", parallel=4, max_tokens=64, early_stop=True).run(
                problem, 3000, c
            )
    assert early.final.answer == full.final.answer == GOLD
    assert len(srv.requests) - calls_full < calls_full
    stop = early.meta["early_stop"]
    assert stop["stopped"] and stop["saved_tokens_estimate"] > 0
    assert early.tokens + stop["saved_tokens_estimate"] == pytest.approx(full.tokens, rel=0.35)
