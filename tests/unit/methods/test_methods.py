"""Every TTS family against the scripted server: runs, lands near its budget, counts garbage."""

from __future__ import annotations

import math

import pytest
from conftest import serving

from rse_fast.encoder import Encoder
from rse_fast.llm.client import LLMClient
from rse_fast.methods import METHODS, Problem, VisibleResult, make_method
from rse_fast.methods.judge import parse_score
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import GOLD, PROBLEM, reply

BUDGET = 3000


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


def build(name: str, encoder: Encoder):
    extra = {"encoder": encoder} if name == "rse" else {}
    if name == "refine":
        extra["stop_score"] = None  # spend the whole budget (the threshold stop is tested apart)
    return make_method(name, parallel=4, max_tokens=256, **extra)


def problem_for(name: str) -> Problem:
    """The shared problem; reflexion's states a check (the answer 42), as code problems do."""
    problem = Problem("p", PROBLEM, GOLD)
    if name == "reflexion":
        problem.visible_check = lambda text: VisibleResult("boxed{42}" in text, "not 42")
    return problem


@pytest.mark.parametrize("name", sorted(METHODS))
async def test_method_runs_and_respects_budget(name, encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await build(name, encoder).run(problem_for(name), BUDGET, client)
    assert res.pool and res.final is not None and res.final.text
    assert abs(res.budget_error) <= 0.10, (name, res.tokens)
    assert res.ledger.total_tokens == res.tokens > 0
    assert client.ledger.total_tokens == 0  # each run counts on its own ledger
    if name in ("bon", "fusion", "refine"):  # the verifier / synthesis / revision fixes 41
        assert res.final.answer == GOLD, name
    if name in ("sc", "bon", "fusion", "rse"):
        assert res.ledger.exploration_tokens > 0


async def test_subsampling_traces_the_curve():
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        sc = make_method("sc", parallel=4, max_tokens=256)
        full = await sc.run(Problem("p", PROBLEM, GOLD), 4000, c)
    small = sc.subsample(full, 1000)
    assert len(small.pool) < len(full.pool) and abs(small.budget_error) <= 0.1
    assert small.pool == full.pool[: len(small.pool)]
    assert small.tokens == sum(x.cost for x in small.pool)


@pytest.mark.parametrize("name", ["sc", "bon"])
async def test_a_cut_pool_is_chosen_by_the_full_runs_rule(name):
    """The execution filter (and sc's confidence vote) survive the cut: the filter passes
    the minority answer 42, so a plain vote over the cut pool would say 41."""
    problem = Problem("p", PROBLEM, GOLD)
    problem.visible_check = lambda text: VisibleResult("boxed{42}" in text, "not 42")
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        m = make_method(name, parallel=4, max_tokens=256, execution_filter=True)
        full = await m.run(problem, 4000, c)
    small = m.subsample(full, 1500)
    assert len(small.pool) < len(full.pool)
    assert [x.answer for x in small.pool].count("42") < len(small.pool) / 2  # 42 is a minority
    assert small.final is not None and small.final.answer == "42"
    seen = small.meta["execution_filter"]
    assert seen["of"] == len(small.pool) and seen["passed"] == [x.answer for x in small.pool].count(
        "42"
    )


async def test_judge_garbage_is_counted_not_fatal():
    def garbage_judge(body, index):
        if "Rate it from 1" in body["messages"][-1]["content"]:
            return "I would rather not grade this."
        return reply(body, index)

    async with ScriptedServer(default_reply=garbage_judge) as srv:
        async with LLMClient(srv.base_url, "m") as c:
            res = await make_method("bon", parallel=4, max_tokens=256).run(
                Problem("p", PROBLEM, GOLD), 1500, c
            )
    assert res.meta["judge_garbage"] == len(res.pool) > 0
    assert all(math.isnan(x.scores["judge"]) for x in res.pool) and res.final is not None


def test_parse_score():
    assert parse_score('{"score": 7}') == 7
    assert parse_score("Score: 8/10") == 8
    assert parse_score(" 3 ") == 3
    assert parse_score('{"score": 42}') is None
    assert parse_score("no idea") is None


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        make_method("magic")


@pytest.mark.parametrize("name", ["beam", "particle"])
async def test_stepwise_search_sizes_itself_to_a_small_budget(name):
    """~6 extensions (step + judge, ~200 tokens each) fit: the search narrows to finish paths."""
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        res = await make_method(name, parallel=4, max_tokens=256).run(
            Problem("p", PROBLEM, GOLD), 1200, c
        )
    assert abs(res.budget_error) <= 0.10, res.tokens
    assert res.meta["finished"] >= 1 and res.final.answer is not None


async def test_rse_sizes_rounds_and_k_to_the_budget(encoder):
    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        method = make_method("rse", parallel=4, max_tokens=256, encoder=encoder)
        small = await method.run(Problem("p", PROBLEM, GOLD), 1500, c)
        large = await method.run(Problem("p", PROBLEM, GOLD), 6000, c)
    for res in (small, large):
        assert abs(res.budget_error) <= 0.10, res.tokens
        assert res.meta["rounds"] >= 2  # the bank is always used at least once
    # more budget buys more rollout tokens; not always more samples, since guided prompts
    # carry the bank block (the default rules framing costs more than a short reply here)
    explore = [r.ledger.summary()["roles"]["explore"]["total_tokens"] for r in (small, large)]
    assert explore[1] > explore[0] + 1500


async def test_reward_model_goes_through_the_transport_with_retries_and_the_ledger():
    """The scoring API is called through the one transport: a 503 is retried with backoff,
    the connection is pooled, and the call is booked under ``judge`` with its latency; a reply
    without a number scores None."""
    import aiohttp.web

    from rse_fast.llm import LLMClient
    from rse_fast.methods import HTTPRewardModel

    seen: list[dict] = []

    async def score(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(await request.json())
        if len(seen) == 1:
            return aiohttp.web.json_response({"error": "busy"}, status=503)
        if seen[-1]["response"] == "garbage":
            return aiohttp.web.json_response({"nope": 1})
        return aiohttp.web.json_response({"score": 0.75})

    app = aiohttp.web.Application()
    app.router.add_post("/score", score)
    async with serving(app) as base:
        reward = HTTPRewardModel(base + "/score", timeout_s=5)
        try:
            async with LLMClient("http://127.0.0.1:9/v1", "m") as client:
                assert await reward.score(client, "2+2?", "4") == 0.75
                assert await reward.score(client, "2+2?", "garbage") is None
                judged = [r for r in client.ledger.records if r.role == "judge"]
                assert len(judged) == 2 and all(r.latency_s > 0 for r in judged)
        finally:
            await reward.close()
    assert len(seen) == 3  # the 503 was retried once


async def test_best_of_n_makes_no_judge_call_when_every_sample_is_the_same():
    from rse_fast.llm import LLMClient
    from rse_fast.methods import Problem, make_method
    from rse_fast.testing import ScriptedServer

    async with ScriptedServer(default_reply="It is \\boxed{4}.") as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await make_method("bon", parallel=4, max_tokens=32).run(
                Problem("p", "2+2?", "4"), 1500, client
            )
    judged = [b for b in srv.requests if "Rate it" in b["messages"][-1]["content"]]
    assert not judged and res.meta["judge_calls"] == 0 and len(res.pool) > 4
    assert res.final is not None and res.final.answer == "4"


async def test_best_of_n_judges_each_distinct_text_once_when_a_second_one_appears():
    from rse_fast.llm import LLMClient
    from rse_fast.methods import Problem, make_method
    from rse_fast.testing import ScriptedServer

    def two_texts(body, index):
        if "Rate it" in body["messages"][-1]["content"]:
            return '{"score": 7}'
        return "It is \\boxed{4}." if int(body.get("seed") or 0) % 5 else "It is \\boxed{5}."

    async with ScriptedServer(default_reply=two_texts) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await make_method("bon", parallel=4, max_tokens=32).run(
                Problem("p", "2+2?", "4"), 2000, client
            )
    judged = [b for b in srv.requests if "Rate it" in b["messages"][-1]["content"]]
    assert len(judged) == 2 and res.meta["judge_calls"] == 2


async def test_every_family_runs_through_one_metered_budget_and_refuses_before_spending():
    """``Method.run`` is a template: the problem is checked first (nothing sent when a family
    cannot answer it), then one ``RunBudget`` (a fresh ledger; in cap mode the cap on the
    same view) is handed to the family's ``_run``."""
    from rse_fast.llm.budget import RunBudget
    from rse_fast.methods.base import Method

    seen: list[RunBudget] = []

    class Probe(Method):
        name = "probe"

        async def _run(self, problem, run_budget):
            seen.append(run_budget)
            res = await run_budget.client.chat(problem.messages(), max_tokens=16)
            from rse_fast.methods.types import Candidate, MethodResult

            pool = [Candidate.of(res.text)]
            return MethodResult(self.name, run_budget.budget, pool[0], pool, run_budget.ledger)

    async with ScriptedServer(default_reply="So \\boxed{4}.") as srv:
        async with LLMClient(srv.base_url, "m") as c:
            with pytest.raises(ValueError, match="visible_check"):
                await make_method("reflexion").run(Problem("p", "2 + 2?", "4"), 2000, c)
            assert not srv.requests  # refused before a call, a calibration included
            for mode in ("cap", "target"):
                res = await Probe(budget_mode=mode).run(Problem("p", "2 + 2?", "4"), 900, c)
                run_budget = seen[-1]
                assert (run_budget.client.cap is not None) == (mode == "cap")
                assert run_budget.ledger is res.ledger and run_budget.ledger is not c.ledger
                assert run_budget.spent == res.tokens > 0 and run_budget.left == 900 - res.tokens
                held = run_budget.holding(lambda: 100.0)
                assert held.client is run_budget.client and held.left == run_budget.left - 100


def test_a_name_adds_modifiers_as_the_reports_name_methods():
    from rse_fast.methods.defaults import STOP_EPSILON

    both = make_method("sc+stop+conf")
    assert both.name == "sc+stop+conf" and both.stop_epsilon == STOP_EPSILON
    assert both.confidence is not None and both.confidence.weighted
    online = make_method("sc+conf-online")
    assert online.confidence is not None and online.confidence.online
    assert make_method("sc+stop", stop_epsilon=0.02).stop_epsilon == 0.02  # a keyword wins
    checked = make_method("rse:conf-agree+check")
    assert checked.name == "rse:conf-agree+check" and checked.checker == "visible"
    assert checked.overrides["bank_follows_vote"] is True
    assert make_method("bon+filter").execution_filter and not make_method("bon").execution_filter
    assert make_method("sc").name == "sc"
    # the arithmetic arm the reports call rse+arith, by name and by its checker's name
    from rse_fast.rse.checking import ArithmeticChecker

    assert isinstance(make_method("rse+arith").checker, ArithmeticChecker)
    assert isinstance(make_method("rse", checker="arithmetic").checker, ArithmeticChecker)


@pytest.mark.parametrize(
    ("checker", "error", "says"),
    [
        ("arith", ValueError, r"unknown checker 'arith'; choose from 'visible', 'arithmetic'"),
        (object(), TypeError, r"has no check\(text, kind\) method"),
    ],
)
def test_a_checker_rse_cannot_use_is_refused_before_any_call(checker, error, says):
    with pytest.raises(error, match=says):
        make_method("rse", checker=checker)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("sc+fast", r"unknown modifier \+fast in method 'sc\+fast'; one of \+stop"),
        ("reflexion+stop", r"'reflexion\+stop' \(a modifier sets what reflexion does not take\)"),
        ("rse+filter", "unknown option 'execution_filter'"),
        ("sc+arith", r"'sc\+arith' \(a modifier sets what sc does not take\)"),
        ("sc:conf-agree", "unknown method 'sc:conf-agree'"),
    ],
)
def test_a_modifier_a_family_cannot_take_is_refused_naming_it(name, says):
    with pytest.raises(ValueError, match=says):
        make_method(name)


async def test_sc_with_the_filter_stops_once_a_code_sample_passes():
    """On code (no answers to vote on) the filtered pick is the earliest sample that passes the
    stated examples, so once one has passed nothing later can change it: ``sc+filter+stop``
    stops there, with the pick the full run makes, and hands the rest of a cap back. While no
    sample passes nothing is settled (the pick may yet fall back to every sample)."""
    from rse_fast.methods.types import no_answer

    def code(passing: bool) -> Problem:
        problem = Problem("c", "Complete add(a, b).", answer_of=no_answer)
        problem.visible_check = lambda text: VisibleResult(passing and "a + b" in text, "no")
        return problem

    def replies(body: dict, index: int) -> str:
        body_of = "a + b" if body.get("seed") == 2 else "a - b"
        return f"```python\ndef add(a, b):\n    return {body_of}\n```\nSo \\boxed{{3}}."

    options = {"parallel": 1, "max_tokens": 64, "budget_mode": "cap"}
    async with ScriptedServer(default_reply=replies) as srv, LLMClient(srv.base_url, "m") as c:
        full = await make_method("sc+filter", **options).run(code(True), 3000, c)
        stopped = await make_method("sc+filter+stop", **options).run(code(True), 3000, c)
        never = await make_method("sc+filter+stop", **options).run(code(False), 3000, c)
    assert "a + b" in full.final.text and stopped.final.text == full.final.text
    assert len(stopped.pool) == 3 and stopped.meta["early_stop"]["stopped"]
    assert len(full.pool) > 10 and stopped.unspent > 2 * stopped.tokens
    # no passer: it spends the cap as the full run does (its stop is the cap's refusal)
    assert len(never.pool) == len(full.pool) and never.unspent == full.unspent


def test_a_filtered_stop_asks_its_rule_over_the_passers_where_answers_are_read():
    from rse_fast.methods import Candidate
    from rse_fast.methods.voting import filtered_settled, vote_settled

    seen: list[list[str | None]] = []

    def inner(pool, left):
        seen.append([c.answer for c in pool])
        return vote_settled(pool, left)

    rule = filtered_settled(inner, reads_answers=True)
    failed = Candidate("x", "1", scores={"visible": 0.0})
    passed = [Candidate(t, "2", scores={"visible": 1.0}) for t in ("y", "z")]
    unchecked = Candidate("w", "1")
    assert not rule([failed, unchecked], 0) and seen == []  # no passer: nothing settled
    assert rule([failed, *passed, unchecked], 1) and seen == [["2", "2"]]
    assert not rule([failed, *passed], 2)  # two votes left could tie the passers' 2 with a 3


async def test_rse_with_the_checker_stops_once_a_code_rollout_passes(encoder):
    """rse+check's pick on code is the earliest rollout that passes the stated examples; with
    +stop a round that has one ends the run (no later round could change the pick)."""
    import json as _json

    from rse_fast.methods.types import no_answer
    from rse_fast.prompts import is_distillation

    problem = Problem("c", "Complete add(a, b).", answer_of=no_answer)
    problem.visible_check = lambda text: VisibleResult("a + b" in text, "add(1, 2) returned -1")

    def replies(body: dict, index: int) -> str:
        if is_distillation(body["messages"]):
            return _json.dumps({"positive": [], "negative": ["subtracting gives -1 for add(1, 2)"]})
        body_of = "a + b" if body.get("seed") == 2 else "a - b"
        return f"```python\ndef add(a, b):\n    return {body_of}\n```"

    options = {"encoder": encoder, "k": 4, "max_tokens": 64, "budget_mode": "cap"}
    async with ScriptedServer(default_reply=replies) as srv, LLMClient(srv.base_url, "m") as c:
        full = await make_method("rse+check", **options).run(problem, 6000, c)
        stopped = await make_method("rse+check+stop", **options).run(problem, 6000, c)
    assert full.meta["rounds"] > 1 and stopped.meta["rounds"] == 1
    assert "a + b" in stopped.final.text and stopped.final.text == full.final.text
    assert stopped.meta["early_stop"]["stopped"] and stopped.tokens < full.tokens / 2
