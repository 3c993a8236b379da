"""A budget is a promise. In ``cap`` mode no run of any family ends above its budget, and a cap
that buys nothing is no better: the mean spend stays near the budget. A budget below one
useful call is refused up front, naming the minimum; the service defaults to a modest budget
and reports as usage exactly what its ledger booked."""

from __future__ import annotations

import json

import aiohttp
import pytest
from conftest import running_service
from hypothesis import given
from hypothesis import strategies as st

from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError, BudgetTooSmallError
from rse_fast.llm import LLMClient
from rse_fast.llm.meter import MAX_LEARNED_SLACK, BudgetCap, PromptMargin
from rse_fast.methods import Problem, VisibleResult, make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import FILLER, GOLD, PROBLEM
from fakes.scripted_tts import reply as tts_reply

FAMILIES = ("sc", "bon", "beam", "particle", "refine", "fusion", "rse", "reflexion")
MAX_TOKENS = 96


def varied(body: dict, index: int) -> str:
    """The TTS fake, with completions whose length varies by seed (2 to ~90 words)."""
    text = tts_reply(body, index)
    seed = int(body.get("seed") or 0)
    if text.startswith(("{", "Step", "So the answer")):
        return text
    return " ".join([FILLER] * (seed * 7 % 6)) + " " + text


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


def method(name: str, mode: str, encoder: Encoder):
    options = {"parallel": 4, "max_tokens": MAX_TOKENS, "budget_mode": mode}
    if name == "rse":
        options.update(encoder=encoder, k=8, max_rounds=24, config={"settle_margin": None})
    if name in ("beam", "particle"):
        options["step_tokens"] = 48
    if name == "refine":
        options["stop_score"] = None  # its own early stop would hide what the budget buys
    return make_method(name, **options)


@pytest.mark.parametrize("name", FAMILIES)
async def test_cap_mode_never_ends_above_the_budget_and_spends_most_of_it(name, encoder):
    """Every family, budgets from the refusal minimum up: never a token above the budget;
    from 10 units up, at least 85% of it spent (and best-of-N as much as its target mode),
    unless the method ran out of its own structure (RSE's rounds × K)."""
    problem = Problem("p", PROBLEM, GOLD)
    if name == "reflexion":  # it retries on the examples a problem states: this one's is 42
        problem.visible_check = lambda text: VisibleResult("boxed{42}" in text, "not 42")
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        m = method(name, "cap", encoder)
        target = method(name, "target", encoder)
        minimum = m.minimum_budget(c, problem)
        unit = 0.0
        budgets = (minimum, 2 * minimum, 1500, 6000, 20_000)
        budgets += (50_000,) if name in ("sc", "fusion") else ()
        for budget in budgets:
            res = await m.run(problem, budget, c)
            planned = (await target.run(problem, budget, c)).tokens if name == "bon" else 0
            assert res.tokens <= budget, (name, budget, res.tokens)
            assert res.tokens == res.ledger.total_tokens
            if budget == 1500 and res.pool:
                unit = res.tokens / len(res.pool)
            structural = name == "rse" and len(res.pool) >= 8 * 24
            if not unit or budget < 10 * unit or structural:
                continue
            assert res.tokens >= 0.85 * budget, (name, budget, res.tokens, unit)
            if name == "bon":  # a cap costs nothing against target mode (the same history)
                assert res.tokens >= 0.95 * min(planned, budget), (budget, res.tokens, planned)
        with pytest.raises(BudgetTooSmallError, match=f"the minimum is {minimum}"):
            await m.run(problem, minimum - 1, c)


@pytest.mark.parametrize("name", ("sc", "bon", "beam", "particle", "fusion"))
async def test_target_mode_lands_near_the_budget_on_average(name, encoder):
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        m = method(name, "target", encoder)
        errors = []
        for budget in (1500, 3000, 6000):
            res = await m.run(problem, budget, c)
            errors.append(res.tokens / budget - 1)
    assert abs(sum(errors) / len(errors)) <= 0.10, errors


def test_the_meter_cuts_the_last_call_to_the_room_left_and_refuses_below_it():
    cap = BudgetCap(250)
    first = cap.reserve(50, 100)  # 50 prompt tokens reserved as 65 (margin), 100 completion
    assert (first.prompt, first.completion) == (65, 100)
    second = cap.reserve(20, 100)  # 85 left, 31 of them for the prompt: completion cut to 54
    assert (second.prompt, second.completion) == (31, 54) and cap.room == 0
    with pytest.raises(BudgetExhaustedError):
        cap.reserve(20, 100)
    cap.settle(first, 60, 90, 50)  # it used less than it reserved: the rest is free again
    assert cap.room == 250 - 90 - second.total and cap.refused == 1
    cap.settle(second, 45, 99, 20)  # the server counts this prompt higher than reserved
    assert cap.margin.reserve(20) >= 45 and cap.room == 250 - 90 - 99


def test_the_margin_learns_a_template_as_slack_and_a_miscount_as_ratio():
    """A default system turn (7 estimated, 36 counted: Qwen2.5 behind llama-server) widens
    the slack, not the ratio, so a long prompt after it is not reserved 5 times over; an
    excess that grows with the prompt (a digit-heavy one: 1,000 estimated, 1,540 counted)
    raises the ratio once the slack is at its most."""
    margin = PromptMargin()
    margin.learn(7, 36)
    assert margin.reserve(7) >= 36 and margin.ratio == PromptMargin().ratio
    assert margin.reserve(2000) < 1.2 * 2000
    margin.learn(1000, 1540)
    assert margin.reserve(1000) >= 1540 and margin.slack == MAX_LEARNED_SLACK


@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 20000)), max_size=12))
def test_the_margin_covers_every_prompt_it_has_seen(calls):
    margin = PromptMargin()
    for estimate, counted in calls:
        margin.learn(estimate, counted)
    assert all(margin.reserve(estimate) >= counted for estimate, counted in calls)


@pytest.mark.parametrize("name", ("sc", "rse"))
async def test_a_template_the_estimate_misses_is_learned_once_per_client(name, encoder):
    """A server whose chat template adds tokens the client cannot see (here 80 per request,
    as a long default system turn does) overruns the default prompt margin. The client keeps the
    margin its first capped run measured, so every later run on it, down to its refusal
    minimum (which rises to match), ends within its budget."""

    def long(body: dict, index: int) -> str:  # every completion runs into its cap
        text = tts_reply(body, index)
        return text if text.startswith("{") else " ".join([FILLER] * 40) + " " + text

    problem = Problem("p", PROBLEM, GOLD)
    server = ScriptedServer(default_reply=long, template_tokens=80)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        m = method(name, "cap", encoder)
        naive = m.minimum_budget(c, problem)
        await m.run(problem, 3000, c)  # the first run on this client measures the margin
        minimum = m.minimum_budget(c, problem)
        assert minimum > naive  # the margin now holds what the template adds
        for budget in (minimum, minimum + 17, 2 * minimum, 1500):
            res = await m.run(problem, budget, c)
            assert res.tokens <= budget, (budget, res.tokens)
        fresh = method(name, "cap", encoder)  # another method on the same client: the same
        assert fresh.minimum_budget(c, problem) == minimum


async def test_service_default_budget_refusal_and_usage_equal_to_the_ledger():
    async with ScriptedServer(default_reply=varied) as up:
        async with running_service(up) as (svc, url), aiohttp.ClientSession() as s:
            msg = [{"role": "user", "content": PROBLEM}]
            # the whole budget (no stop): every call answered, so the upstream's own counts
            body = {"model": "sc:m", "messages": msg, "max_tokens": MAX_TOKENS, "k": 4,
                    "stop_epsilon": None}  # fmt: skip
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                data = await r.json()
            assert r.status == 200
            booked = sum(len(" ".join(m["content"] for m in b["messages"]).split())
                         for b in up.requests)  # fmt: skip
            assert data["usage"]["prompt_tokens"] == booked  # usage = what the ledger booked
            # the default stop cancels calls in flight: usage holds at least what the upstream
            # counted (a cancelled call at its bound), and still within the budget
            sent = len(up.requests)
            stopped = {k: v for k, v in body.items() if k != "stop_epsilon"}
            async with s.post(url + "/v1/chat/completions", json=stopped) as r:
                cut = await r.json()
            counted = sum(up.served[sent:])
            assert counted <= cut["usage"]["total_tokens"] <= 8000, (counted, cut["usage"])
            assert data["usage"]["total_tokens"] <= 8000  # the default budget, as a cap
            assert svc.config.caps.default_budget_tokens == 8000
            tiny = {**body, "budget": 5}
            async with s.post(url + "/v1/chat/completions", json=tiny) as r:
                err = await r.json()
            assert r.status == 400 and err["error"]["param"] == "budget"
            assert "the minimum is" in err["error"]["message"]
            heavy = {**body, "model": "fusion:m", "budget": 3000, "max_tokens": 1024}
            async with s.post(url + "/v1/chat/completions", json=heavy) as r:
                data = await r.json()
            assert r.status == 200 and data["usage"]["total_tokens"] <= 3000, data["usage"]
    assert json.dumps(data)  # a whole JSON reply


async def test_a_judge_on_another_client_draws_on_the_runs_cap(encoder):
    """Best-of-N in cap mode with an external judge: the judge's calls are booked in the
    run's ledger *and* reserved on its cap (the judge used to copy a client without it, and
    a run of budget 2,000 spent 2,750)."""
    from rse_fast.methods import LLMJudge

    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        async with ScriptedServer(default_reply='{"score": 7}') as jsrv:
            async with LLMClient(jsrv.base_url, "judge") as judge_client:
                judge = LLMJudge(client=judge_client, max_tokens=400, use_schema=False)
                bon = make_method(
                    "bon", parallel=4, max_tokens=MAX_TOKENS, budget_mode="cap", judge=judge
                )
                for budget in (600, 2000, 5000):
                    res = await bon.run(problem, budget, c)
                    judged = sum(r.total_tokens for r in res.ledger.records if r.role == "judge")
                    assert judged > 0 and len(jsrv.requests) > 0
                    assert res.tokens == res.ledger.total_tokens <= budget, (budget, res.tokens)


async def test_a_judge_on_another_model_is_priced_at_its_own_prices(encoder):
    """A run budgeted in dollars, its judge on a model ten times dearer: the judge's calls are
    reserved and settled at the judge's prices (not the run's), the ledger prices its records
    so, and the cap holds in dollars counted that way."""
    from rse_fast.llm.cost import CostModel
    from rse_fast.methods import LLMJudge

    run_price = CostModel.parse("price:input=1,output=2")
    judge_price = CostModel.parse("price:input=10,output=20")
    budget = 0.004  # dollars
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        async with ScriptedServer(default_reply='{"score": 7}') as jsrv:
            async with LLMClient(jsrv.base_url, "judge", price=judge_price) as judge_client:
                judge = LLMJudge(client=judge_client, max_tokens=64, use_schema=False)
                bon = make_method("bon", parallel=4, max_tokens=MAX_TOKENS, budget_mode="cap",
                                  judge=judge, budget_unit=run_price)  # fmt: skip
                res = await bon.run(problem, budget, c)
    # (a score reused for an identical reply is booked at nothing, with no prices)
    judged = [r for r in res.ledger.records if r.role == "judge" and r.usage_source != "reused"]
    sampled = [r for r in res.ledger.records if r.role != "judge"]
    assert judged and sampled and all(r.priced_as == judge_price.spec for r in judged)
    at_judge = judge_price.of_records(judged)
    assert run_price.of_records(judged) == at_judge  # each record names its own prices
    assert at_judge > 5 * CostModel.parse("price:input=1,output=2").of_call(
        sum(r.prompt_tokens for r in judged), sum(r.completion_tokens for r in judged)
    )
    spent = run_price.of_ledger(res.ledger)
    assert spent == at_judge + run_price.of_records(sampled) and spent <= budget * (1 + 1e-9)


async def test_a_reward_model_reserves_what_it_books():
    """The reward model's estimated tokens are reserved on the cap before each call (and
    refused, scoring None, once they do not fit), so scoring never carries a run past its
    budget; it used to book them without asking."""
    import aiohttp.web
    from conftest import serving

    from rse_fast.methods import HTTPRewardModel

    async def score(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"score": 0.5})

    app = aiohttp.web.Application()
    app.router.add_post("/score", score)
    response = " ".join([FILLER] * 30)
    async with serving(app) as base, LLMClient("http://127.0.0.1:9/v1", "m") as client:
        reward = HTTPRewardModel(base + "/score", timeout_s=5)
        try:
            capped = client.with_cap(BudgetCap(1000))
            scores = [await reward.score(capped, PROBLEM, response) for _ in range(12)]
        finally:
            await reward.close()
    assert scores[0] == 0.5 and scores[-1] is None  # scored while it fit, refused after
    assert 0 < capped.ledger.total_tokens <= 1000 and capped.cap.settled <= 1000


@pytest.mark.parametrize("name", ("sc", "bon", "fusion"))
async def test_a_server_that_ignores_n_keeps_every_family_within_its_cap(name, encoder):
    problem = Problem("p", PROBLEM + " " + " ".join([FILLER] * 40), GOLD)
    server = ScriptedServer(default_reply=varied, ignore_n=True)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        m = method(name, "cap", encoder)
        minimum = m.minimum_budget(c, problem)
        for budget in (minimum, 2 * minimum, 3 * minimum + 7, 1500, 4000):
            res = await m.run(problem, budget, c)
            assert res.tokens == res.ledger.total_tokens <= budget, (name, budget, res.tokens)


async def test_a_server_that_ignores_n_is_paid_one_prompt_per_request():
    """A server that ignores ``n`` is asked once per choice: each of those requests pays its
    prompt, and the cap reserves them, sending fewer requests where they do not all fit (it
    used to hold one prompt while n were booked)."""
    long = [{"role": "user", "content": " ".join(["word"] * 150)}]
    server = ScriptedServer(default_reply=" ".join(["more"] * 400), ignore_n=True)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        for budget in (900, 2500, 6000):
            capped = c.with_cap(BudgetCap(budget))
            result = await capped.chat(long, n=4, max_tokens=300)
            assert 1 <= len(result.choices) <= 4
            assert capped.ledger.total_tokens <= budget, (budget, capped.ledger.total_tokens)
        assert len(result.choices) == 4  # the largest budget holds all four requests


def test_the_meter_reserves_the_prompts_of_added_requests_and_drops_what_does_not_fit():
    cap = BudgetCap(400, margin=PromptMargin(ratio=1.0, slack=0))
    grant = cap.reserve(50, 40, n=4)  # 50 + 4 x 40 = 210
    assert grant.total == 210 and cap.room == 190
    sent = cap.add_requests(grant, 3)  # each needs 50 more: 150 of the 190 left
    assert sent == 3 and grant.total == 360 and cap.room == 40
    tight = BudgetCap(300, margin=PromptMargin(ratio=1.0, slack=0))
    grant = tight.reserve(50, 40, n=4)  # 210 reserved, 90 left
    sent = tight.add_requests(grant, 3)  # room for 1 more prompt + dropping 2 choices frees 80
    assert sent == 2 and grant.n == 3 and grant.total <= 300 and tight.room >= 0


async def test_a_refusal_by_the_cap_is_not_a_failed_call(encoder):
    """A budget refusal is its own family: RSE's rollouts refused by the cap are not failed
    rollouts, and a round the cap refuses whole ends the run's spending, not as a failure."""
    from rse_fast.errors import LLMError, RoundFailedError
    from rse_fast.rse import RSE, ExperienceBank, RSEConfig

    assert not issubclass(BudgetExhaustedError, LLMError)
    cfg = RSEConfig(k=4, rounds=2, max_tokens=MAX_TOKENS, settle_margin=None)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        one = await c.chat([{"role": "user", "content": PROBLEM}], max_tokens=MAX_TOKENS)
        room = int(2.5 * (one.usage.prompt_tokens + MAX_TOKENS))  # two rollouts, not four
        capped = c.with_ledger(c.ledger.__class__()).with_cap(BudgetCap(room))
        engine = RSE(capped, encoder, cfg)
        bank = ExperienceBank(encoder.dim)
        result, _ = await engine.run_round(PROBLEM, 1, bank, GOLD, "", distill=False)
        refused = [x for x in result.rollouts if x.error is not None]
        assert refused and all("BudgetExhaustedError" in x.error for x in refused)
        assert result.refused_rollouts == len(refused) and result.failed_rollouts == 0
        with pytest.raises(BudgetExhaustedError):  # once nothing fits: not a RoundFailedError
            for r in range(2, 12):
                await engine.run_round(PROBLEM, r, bank, GOLD, "", distill=False)
        assert not issubclass(BudgetExhaustedError, RoundFailedError)


async def test_under_a_cap_rse_later_rounds_buy_only_whole_rollouts(encoder):
    """A rollout the cap must cut short is a truncated sample in the pool, tokens spent on
    no answer. Under a cap, RSE's later rounds buy whole rollouts only, as sc's later waves
    do (``RunBudget.units_left``), landing under the budget instead; so after round 1 no
    request is cut to less than half its ``max_tokens`` (rollouts here always run to it; a
    few tokens go to the meter's prompt margin, which the plan does not see)."""
    long_reply = " ".join([FILLER] * 40) + " so \\boxed{12}"
    async with ScriptedServer(default_reply=long_reply) as srv, LLMClient(srv.base_url, "m") as c:
        m = method("rse", "cap", encoder)
        problem = Problem("p", PROBLEM, GOLD)
        cut = []
        for budget in range(700, 2000, 60):
            srv.requests.clear()
            res = await m.run(problem, budget, c)
            assert res.tokens <= budget
            limits = [b.get("max_tokens") for b in srv.requests]
            later = limits[len([r for r in res.meta["pool_rounds"] if r == 1]) :]
            cut += [(budget, x) for x in later if x is not None and x < MAX_TOKENS / 2]
    assert not cut, cut


def answers_at_different_speeds(body: dict, index: int) -> str:
    """Every sample answers 42, the later seeds at greater length: a stop settles while the
    long ones are still being generated."""
    seed = int(body.get("seed") or 0)
    return " ".join([FILLER] * (1 + 6 * (seed % 4))) + " So the answer is \\boxed{42}."


async def test_a_stop_books_what_the_server_generated_for_the_calls_it_cancelled():
    """sc's stop cancels the calls in flight; the server had generated part of them (a stream
    stops when its caller leaves). The ledger, and so the cap, books at least what the server
    worked through, and the cap holds counting it."""
    budget = 4000
    async with (
        ScriptedServer(default_reply=answers_at_different_speeds, stream_tokens_per_s=400) as srv,
        LLMClient(srv.base_url, "m") as client,
    ):
        method = make_method("sc", stop_epsilon=0.2, parallel=4, max_tokens=MAX_TOKENS,
                             budget_mode="cap")  # fmt: skip
        run = await method.run(Problem("p", PROBLEM, GOLD), budget, client)
    served = sum(srv.served)
    assert run.meta["early_stop"]["cancelled"] >= 1
    assert run.ledger.total_tokens >= served  # nothing the server did goes unbooked
    assert served <= budget


async def test_a_whole_reply_call_cancelled_is_booked_at_its_reservation():
    """A call cancelled before its reply came: the server may generate to the end (the
    fixture does), so the ledger and the cap book the reservation, never less than that."""
    import asyncio

    async with (
        ScriptedServer(default_reply=" ".join([FILLER] * 12), stream_tokens_per_s=100) as srv,
        LLMClient(srv.base_url, "m") as client,
    ):
        cap = BudgetCap(2000)
        capped = client.with_cap(cap)
        call = asyncio.ensure_future(
            capped.chat([{"role": "user", "content": PROBLEM}], max_tokens=MAX_TOKENS)
        )
        await asyncio.sleep(0.2)  # sent, and being generated
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(1.0)  # the server finishes what nobody waits for
    booked = capped.ledger.total_tokens
    assert srv.served[0] > 0 and booked >= srv.served[0]
    assert capped.ledger.records[-1].usage_source == "bound"
    assert cap.settled >= booked and cap.reserved == 0
