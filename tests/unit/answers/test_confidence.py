"""Confidence and stopping: the model's own token probabilities summarized per rollout, the
Beta stop, and self-consistency using them: it stops once its vote is settled and leaves the
rest of the budget unspent, and a confidence rule can change which answer wins (or, without
logprobs, falls back to the plain vote and says so)."""

from __future__ import annotations

import math

import pytest

from rse_fast.answers.confidence import (
    beta_leader_probability,
    keep_most_confident,
    rollout_confidence,
    statistically_settled,
    threshold_from_warmup,
    token_confidences,
    window_means,
)
from rse_fast.llm import LLMClient
from rse_fast.methods import Problem, make_method
from rse_fast.methods.voting import ConfidenceRule
from rse_fast.testing import Reply, ScriptedServer


def test_token_confidence_is_the_negative_mean_of_the_top_k():
    entry = {"token": "4", "logprob": -0.1, "top_logprobs": [
        {"token": "4", "logprob": -0.1}, {"token": "5", "logprob": -2.5}]}  # fmt: skip
    assert token_confidences({"content": [entry]}) == pytest.approx([1.3])
    assert token_confidences({"content": [{"token": "4", "logprob": -0.1}]}) is None
    assert token_confidences(None) is None and token_confidences({"content": []}) is None
    peaked = Reply(content="a b c", token_probability=0.99).logprobs(5)
    flat = Reply(content="a b c", token_probability=0.3).logprobs(5)
    assert min(token_confidences(peaked)) > max(token_confidences(flat))


def test_rollout_measures_find_the_stretch_where_it_was_lost():
    conf = [5.0] * 40 + [0.5] * 8 + [5.0] * 40
    summary = rollout_confidence(conf, window=8, tail=8)
    assert summary.lowest_window == pytest.approx(0.5) and summary.tail == pytest.approx(5.0)
    assert summary.mean == pytest.approx(sum(conf) / len(conf))
    assert window_means([1.0, 3.0], 8) == [2.0]  # shorter than a window: one mean
    with pytest.raises(ValueError, match="unknown confidence measure"):
        summary.measure("median")


def test_filters_and_thresholds_keep_the_most_confident():
    assert keep_most_confident([0.1, 0.9, None, 0.5], 0.5) == [False, True, True, True]
    assert keep_most_confident([0.1, 0.2], 0.01) == [False, True]  # at least one
    assert threshold_from_warmup([1.0, 4.0, 3.0, 2.0], 0.5) == 3.0
    with pytest.raises(ValueError):
        keep_most_confident([1.0], 0.0)


@pytest.mark.parametrize("votes", range(0, 9))
def test_the_beta_probability_matches_its_closed_form(votes):
    # Beta(a + 1, 1): P(p > 1/2) = 1 - 2^-(a + 1)
    assert beta_leader_probability(votes, 0) == pytest.approx(1 - 2.0 ** -(votes + 1), abs=1e-4)


def test_the_beta_stop_needs_a_clear_lead():
    assert not statistically_settled([2.0], 0.05)  # 0.875: not yet
    assert statistically_settled([5.0], 0.05)  # 0.984
    assert not statistically_settled([5.0, 4.0], 0.05)
    assert statistically_settled([14.0, 1.0], 0.01)
    assert math.isclose(beta_leader_probability(3, 3), 0.5, abs_tol=1e-6)


def test_a_confidence_weighted_stop_counts_effective_votes():
    """Three unsure votes for 4 and two sure ones for 5: by count 4 leads and nothing is
    settled; weighted (scaled to a mean of 1, so five votes stay five) 5 leads and, at
    ε = 0.1, is settled. A vote without a confidence weighs the mean; none at all: counts."""
    from rse_fast.methods import Candidate
    from rse_fast.methods.voting import answers_settled, beta_settled, confidence_weights

    answers, sure = ["4", "4", "4", "5", "5"], [1.0, 1.0, 1.0, 10.0, 10.0]
    weights = confidence_weights(sure)
    assert weights is not None and sum(weights) == pytest.approx(5.0)
    assert not answers_settled(answers, 0.1)
    assert answers_settled(answers, 0.1, weights=weights)
    assert not answers_settled(answers, 0.05, weights=weights)  # 0.94 < 0.95
    assert confidence_weights([None, 2.0, 4.0]) == pytest.approx([1.0, 2 / 3, 4 / 3])
    assert confidence_weights([None, None]) is None
    pool = [Candidate(a, a, scores={"confidence": c}) for a, c in zip(answers, sure, strict=True)]
    assert beta_settled(0.1, weighted=True)(pool, 3) and not beta_settled(0.1)(pool, 3)


PROBLEM = Problem("p", "What is 2 + 2?", "4")


async def test_sc_stops_once_settled_and_returns_the_rest_of_the_budget():
    async with (
        ScriptedServer(default_reply="So \\boxed{4}.") as srv,
        LLMClient(srv.base_url, "m") as c,
    ):
        options = {"parallel": 2, "max_tokens": 32, "budget_mode": "cap"}
        plain = await make_method("sc", **options).run(PROBLEM, 2000, c)
        stopping = await make_method("sc", stop_epsilon=0.05, **options).run(PROBLEM, 2000, c)
    assert stopping.final.answer == plain.final.answer == "4"
    assert len(stopping.pool) <= 6 < len(plain.pool)
    assert stopping.meta["early_stop"]["stopped"] and "beta" in stopping.meta["early_stop"]["rule"]
    assert stopping.unspent > 1000 and stopping.tokens == stopping.ledger.total_tokens
    assert stopping.unspent == 2000 - stopping.tokens


@pytest.mark.parametrize("name", ("bon", "rse"))
async def test_best_of_n_and_rse_rounds_stop_once_settled_too(name):
    from rse_fast.encoder import Encoder

    options: dict = {"parallel": 2, "max_tokens": 32, "budget_mode": "cap"}
    if name == "rse":
        options.update(k=2, max_rounds=20, encoder=Encoder(providers=["CPUExecutionProvider"]),
                       config={"settle_margin": None})  # fmt: skip
    async with (
        ScriptedServer(default_reply="So \\boxed{4}.") as srv,
        LLMClient(srv.base_url, "m") as c,
    ):
        plain = await make_method(name, **options).run(PROBLEM, 2000, c)
        stopping = await make_method(name, stop_epsilon=0.05, **options).run(PROBLEM, 2000, c)
    assert stopping.final.answer == plain.final.answer == "4"
    assert len(stopping.pool) <= 6 < len(plain.pool)
    assert stopping.meta["early_stop"]["stopped"] and "beta" in stopping.meta["early_stop"]["rule"]
    assert stopping.unspent == 2000 - stopping.tokens > 1000
    assert plain.unspent < 500


def split_replies(body: dict, index: int) -> Reply:
    """Two sure samples in eight answer 5, the unsure others 4."""
    seed = int(body.get("seed") or 0)
    if seed % 8 < 2:
        return Reply(content="It is \\boxed{5}.", token_probability=0.99)
    return Reply(content="Maybe it is \\boxed{4}.", token_probability=0.3)


async def test_sc_stops_by_the_vote_it_will_return_weighted_where_it_weighs():
    """Two sure samples in eight say 5, six unsure ones 4. Counted, 4 leads 6 to 2 and the
    stop ends the run after two waves; weighted by confidence the two answers weigh about
    the same, so the stop waits, and the weighted vote it returns says 5."""
    async with (
        ScriptedServer(default_reply=split_replies) as srv,
        LLMClient(srv.base_url, "m") as c,
    ):
        options = {"parallel": 4, "max_tokens": 32, "stop_epsilon": 0.1}
        counted = await make_method("sc", **options).run(PROBLEM, 40 * 32, c)
        rule = ConfidenceRule(weighted=True, window=4)
        weighed = await make_method("sc", confidence=rule, **options).run(PROBLEM, 40 * 32, c)
    assert counted.meta["early_stop"]["stopped"] and len(counted.pool) == 8
    assert counted.final.answer == "4" and weighed.final.answer == "5"
    assert len(weighed.pool) >= 3 * len(counted.pool)


@pytest.mark.parametrize("logprobs", [True, False])
async def test_a_confidence_rule_can_change_the_winner_or_says_it_could_not(logprobs):
    server = ScriptedServer(default_reply=split_replies, logprobs_supported=logprobs)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        options = {"parallel": 8, "max_tokens": 32, "budget_mode": "cap"}
        plain = await make_method("sc", **options).run(PROBLEM, 8 * 40, c)
        rule = ConfidenceRule(keep=0.25, weighted=False, window=4)  # the filter alone
        confident = await make_method("sc", confidence=rule, **options).run(PROBLEM, 8 * 40, c)
    assert len(plain.pool) >= 6 and len(confident.pool) >= 6
    asked = srv.requests[-len(confident.pool) :]
    assert all(b.get("logprobs") is True and b.get("top_logprobs") == 5 for b in asked)
    assert plain.final.answer == "4"
    if logprobs:
        kept = f"kept 2 of {len(confident.pool)}"  # the two sure ones
        assert confident.final.answer == "5" and kept in confident.meta["confidence"]
    else:
        assert confident.final.answer == "4"
        assert confident.meta["confidence"].startswith("unavailable: plain vote")


async def test_a_server_that_refuses_logprobs_gets_the_plain_vote_and_is_asked_without_them():
    """vLLM past its --max-logprobs (and a llama.cpp build with tools + stream) answers a 400
    that names logprobs: the client asks again without them and remembers, so a confidence
    rule falls back to the plain vote and says so; the refusal stays in the ledger."""
    server = ScriptedServer(default_reply=split_replies, max_logprobs=0)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        rule = ConfidenceRule(keep=0.25, weighted=False, window=4)
        options = {"parallel": 8, "max_tokens": 32, "budget_mode": "cap"}
        res = await make_method("sc", confidence=rule, **options).run(PROBLEM, 8 * 40, c)
        async with LLMClient(srv.base_url, "m") as fresh:  # streams before it has learnt
            asked = dict(logprobs=True, top_logprobs=5)
            streamed = [e async for e in fresh.stream(PROBLEM.messages(), **asked)]
            again = [e async for e in fresh.stream(PROBLEM.messages(), **asked)]
    assert res.final.answer == "4" and res.meta["confidence"].startswith("unavailable")
    assert len(res.pool) >= 6 and streamed[-1].done and again[-1].done
    # the server answered only requests without logprobs (a refused one is not kept)
    assert len(srv.requests) == len(res.pool) + 2
    assert not any(b.get("logprobs") or b.get("top_logprobs") for b in srv.requests)
    errors = [r for r in res.ledger.records if not r.ok]
    assert errors and all("logprobs" in (r.error or "") for r in errors)
    assert len([r for r in fresh.ledger.records if not r.ok]) == 1  # learnt on its first


async def test_a_server_within_its_logprobs_limit_or_another_400_is_not_a_refusal():
    from rse_fast.errors import LLMBadRequestError

    async with ScriptedServer(default_reply="4", max_logprobs=5) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await c.chat(PROBLEM.messages(), logprobs=True, top_logprobs=5)
            with pytest.raises(LLMBadRequestError, match="seed"):
                await c.chat(PROBLEM.messages(), logprobs=True, top_logprobs=5, extra={"seed": "x"})
    assert res.choices[0].logprobs is not None and len(srv.requests) == 1


@pytest.mark.parametrize("unit", ["tokens", "price:input=1,cached=0.5,output=4"])
async def test_a_capped_run_that_stops_hands_the_rest_back_in_its_result_and_its_ledger(unit):
    """Every sample says 4: the stop ends the run early, and the rest of the budget is
    handed back, in the budget's unit, in the result and in the ledger's summary."""
    async with (
        ScriptedServer(default_reply="So \\boxed{4}.") as srv,
        LLMClient(srv.base_url, "m") as c,
    ):
        method = make_method("sc", parallel=2, max_tokens=32, stop_epsilon=0.05,
                             budget_mode="cap", budget_unit=unit)  # fmt: skip
        budget = 3000 if unit == "tokens" else 0.01
        res = await method.run(PROBLEM, budget, c)
        target = await make_method("sc", parallel=2, max_tokens=32).run(PROBLEM, 3000, c)
    booked = res.ledger.summary()["budget"]
    spent = res.tokens if unit == "tokens" else res.meta["cost"]["spent"]
    assert booked["amount"] == budget and booked["spent"] == pytest.approx(spent)
    assert booked["unspent"] == pytest.approx(budget - spent) and booked["unspent"] > budget / 2
    assert booked["unit"] == ("tokens" if unit == "tokens" else "$")
    if unit == "tokens":
        assert res.unspent == booked["unspent"]
    else:
        assert res.meta["cost"]["unspent"] == pytest.approx(booked["unspent"])
    assert "budget" not in target.ledger.summary()  # a target run is not handed a cap


async def test_the_service_stops_a_settled_sc_and_reports_the_unspent_budget():
    import aiohttp
    from conftest import running_service

    msg = [{"role": "user", "content": "What is 2 + 2?"}]
    async with ScriptedServer(default_reply="So \\boxed{4}.") as up:
        async with running_service(up) as (_svc, url), aiohttp.ClientSession() as s:
            body = {"model": "sc:m", "messages": msg, "k": 2, "budget": 3000, "max_tokens": 32,
                    "stop_epsilon": 0.05}  # fmt: skip
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                data = await r.json()
            assert r.status == 200, data
            usage = data["usage"]
            assert usage["budget_unspent"] == 3000 - usage["total_tokens"] > 2000
            for bad in ({"model": "refine:m", "stop_epsilon": 0.1}, {"stop_epsilon": 0.9},
                        {"confidence": "yes"}):  # fmt: skip
                async with s.post(url + "/v1/chat/completions", json={**body, **bad}) as r:
                    err = await r.json()
                assert r.status == 400 and err["error"]["param"] in bad, err
                if bad.get("model") == "refine:m":  # names who takes it: each family says so
                    assert "methods that take it: bon, rse, sc" in err["error"]["message"], err


def sure_or_not(body: dict, index: int) -> Reply:
    """Even seeds: a sure reply; odd: an unsure one, as long, with another answer."""
    words = " ".join(["step"] * 40)
    if int(body.get("seed") or 0) % 2 == 0:
        return Reply(content=f"{words} so \\boxed{{4}}.", token_probability=0.99)
    return Reply(content=f"{words} so \\boxed{{5}}.", token_probability=0.3)


async def test_online_rule_stops_unsure_samples_mid_stream_and_books_them():
    """The first wave sets the threshold; later samples stream with their logprobs and an
    unsure one is stopped once a window of its tokens falls below it: it does not vote, and
    what it streamed is paid for and booked."""
    rule = ConfidenceRule(keep=0.5, weighted=False, window=8, online=True)
    async with ScriptedServer(default_reply=sure_or_not) as srv, LLMClient(srv.base_url, "m") as c:
        method = make_method("sc", parallel=4, max_tokens=64, confidence=rule)
        res = await method.run(PROBLEM, 12 * 60, c)
    stopped = [x for x in res.pool if x.origin == "stopped-unsure"]
    assert res.meta["online"]["threshold"] is not None and res.meta["online"]["stopped"] > 0
    assert len(stopped) == res.meta["online"]["stopped"] and all(x.answer is None for x in stopped)
    full = [x for x in res.pool if x.origin == "sample"]
    # a stopped sample is booked at its prompt's bound (no usage came) and what it streamed:
    # fewer completion tokens than any sample that ran to its end
    by_task = {r.task: r for r in res.ledger.records}
    cut = [by_task[f"c{i}"] for i, x in enumerate(res.pool) if x.origin == "stopped-unsure"]
    ran = [by_task[f"c{i}"] for i, x in enumerate(res.pool) if x.origin == "sample"]
    assert all(r.usage_source == "bound" and r.prompt_tokens > 0 for r in cut)
    assert all(0 < r.completion_tokens < min(f.completion_tokens for f in ran) for r in cut)
    assert all(x.cost > 0 for x in stopped) and full
    assert res.tokens == res.ledger.total_tokens == sum(x.cost for x in res.pool)
    assert res.final.answer == "4"
    streamed = [b for b in srv.requests if b.get("stream")]
    assert streamed and all(b.get("logprobs") is True for b in streamed)


def rse_split_replies(body: dict, index: int) -> Reply | str:
    """split_replies for rollouts; a distillation names the answer of the rollout it read."""
    import json

    from rse_fast.prompts import is_distillation

    if is_distillation(body["messages"]):
        read = json.dumps(body["messages"])
        said = "5" if "boxed{5}" in read else "4"
        return json.dumps({"positive": [f"the sum is {said}"], "negative": []})
    return split_replies(body, index)


async def test_rse_votes_by_confidence_as_sc_does_and_can_distill_only_the_sure():
    """With a confidence rule RSE's rollouts ask for logprobs and its final vote keeps and
    weights the sure ones, as sc's; a confident share distills only a round's surest
    rollouts (here a quarter: the two sure ones of eight, whose answer is 5)."""
    from rse_fast.encoder import Encoder
    from rse_fast.prompts import is_distillation

    encoder = Encoder(providers=["CPUExecutionProvider"])
    rule = ConfidenceRule(keep=0.25, weighted=False, window=4)

    def rse(**options):
        return make_method("rse", parallel=8, max_tokens=32, k=8, max_rounds=2,
                           encoder=encoder, **options)  # fmt: skip

    unsettled = {"settle_margin": None}
    picky = {**unsettled, "confidence_top_logprobs": 5, "distill_confident_share": 0.25}
    server = ScriptedServer(default_reply=rse_split_replies)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        plain = await rse(config=unsettled).run(PROBLEM, 4000, c)
        sure = await rse(confidence=rule, config=unsettled).run(PROBLEM, 4000, c)
        srv.requests.clear()
        await rse(config=picky).run(PROBLEM, 6000, c)
    assert plain.final.answer == "4" and sure.final.answer == "5"
    assert "kept" in sure.meta["confidence"]
    distilled = [b for b in srv.requests if is_distillation(b["messages"])]
    rollouts = [b for b in srv.requests if not is_distillation(b["messages"])]
    assert rollouts and all(b.get("top_logprobs") == 5 for b in rollouts)
    assert distilled and all("boxed{5}" in str(b["messages"]) for b in distilled)


def rse_items_replies(body: dict, index: int) -> Reply | str:
    """split_replies for rollouts; a distillation states a proposition and a pitfall about
    the answer of the rollout it read."""
    import json

    from rse_fast.prompts import is_distillation

    if is_distillation(body["messages"]):
        said = "5" if "boxed{5}" in json.dumps(body["messages"]) else "4"
        return json.dumps({"positive": [f"the sum is {said}"],
                           "negative": [f"stopping at {said} unchecked"]})  # fmt: skip
    return split_replies(body, index)


@pytest.mark.parametrize(
    ("variant", "shown", "filed"),
    [("rse", {"4", "5"}, 2), ("rse:conf-split", {"4"}, 1), ("rse:conf-agree", {"4"}, 2)],
)
async def test_rse_propositions_follow_the_confidence_weighted_vote(variant, shown, filed):
    """Six unsure rollouts say 4, two sure ones 5; weighted by confidence 4 still leads.
    conf-split files the confident minority's propositions as nothing (its pitfalls stay);
    conf-agree files them but shows a proposition only while its rollouts side with the
    running weighted vote; plain RSE shows both."""
    from rse_fast.encoder import Encoder
    from rse_fast.prompts import PROPOSITIONS_HEADER, is_distillation

    encoder = Encoder(providers=["CPUExecutionProvider"])
    config = {"settle_margin": None, "confidence_top_logprobs": 5}
    server = ScriptedServer(default_reply=rse_items_replies)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        method = make_method(variant, parallel=8, max_tokens=32, k=8, max_rounds=2,
                             encoder=encoder, config=config)  # fmt: skip
        res = await method.run(PROBLEM, 6000, c)
    guided = [b["messages"][0]["content"] for b in srv.requests
              if not is_distillation(b["messages"]) and PROPOSITIONS_HEADER in
              b["messages"][0]["content"]]  # fmt: skip
    assert guided, "round 2 was guided"
    propositions = guided[0].split(PROPOSITIONS_HEADER, 1)[1]
    assert {a for a in "45" if f"the sum is {a}" in propositions} == shown
    assert res.meta["bank_sizes"]["positive"] == filed
    assert res.meta["bank_sizes"]["negative"] >= 1  # the minority's pitfalls are kept


@pytest.mark.parametrize(
    "fields",
    [{"distill_confident_share": 0.5}, {"propositions_from_confident": True},
     {"bank_follows_vote": True}],
)  # fmt: skip
def test_an_rse_rule_that_reads_confidence_needs_logprobs_asked_for(fields):
    from rse_fast.rse import RSEConfig

    with pytest.raises(ValueError, match=f"{next(iter(fields))} needs confidence_top_logprobs"):
        RSEConfig(**fields)
    RSEConfig(**fields, confidence_top_logprobs=5)
