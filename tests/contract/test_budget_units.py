"""A budget in the unit a user pays in. In a price, a cap is as hard as in tokens (priced by
what the ledger booked, cached input at its own price) and a target lands near it; in server
seconds only a target can be kept (nothing knows a call's seconds before it ends), and only
once the client has seen how fast its server is; a refusal names the unit."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from conftest import running_service
from test_budget_cap import method, varied

from rse_fast.cli import main
from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError, BudgetTooSmallError, BudgetUnitError
from rse_fast.eval.runner import SINGLE
from rse_fast.eval.summary import load_records
from rse_fast.llm import LLMClient
from rse_fast.llm.cost import TIME, CostModel
from rse_fast.llm.ledger import Ledger
from rse_fast.llm.meter import BudgetCap
from rse_fast.methods import Problem, make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import GOLD, PROBLEM

#: dear output, cheap (and cheaper cached) input: a price that does not move with tokens
PRICE = CostModel.parse("price:input=0.5,cached=0.05,output=4")
FAMILIES = ("sc", "bon", "beam", "particle", "refine", "fusion", "rse")
MAX_TOKENS_CUT = 96


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


def priced(name: str, mode: str, encoder: Encoder):
    m = method(name, mode, encoder)
    m.budget_unit = PRICE
    return m


@pytest.mark.parametrize("name", FAMILIES)
async def test_a_price_cap_is_never_exceeded_and_mostly_spent(name, encoder):
    problem = Problem("p", PROBLEM, GOLD)
    server = ScriptedServer(default_reply=varied, prefix_cache="llama.cpp")
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        m = priced(name, "cap", encoder)
        for budget in (0.002, 0.006, 0.02):
            res = await m.run(problem, budget, c)
            paid = PRICE.of_ledger(res.ledger)
            assert paid <= budget + 1e-12, (name, budget, paid)
            assert res.meta["cost"]["spent"] == pytest.approx(paid)
            assert res.meta["cost"]["unspent"] == pytest.approx(budget - paid)
            if budget == 0.02 and not (name == "rse" and len(res.pool) >= 8 * 24):
                assert paid >= 0.85 * budget, (name, budget, paid)


async def test_a_price_target_lands_near_the_budget_on_average(encoder):
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        m = priced("sc", "target", encoder)
        errors = []
        for budget in (0.003, 0.006, 0.012):
            res = await m.run(problem, budget, c)
            errors.append(PRICE.of_ledger(res.ledger) / budget - 1)
    assert abs(sum(errors) / len(errors)) <= 0.10, errors


async def test_the_same_price_buys_more_tokens_of_cheap_input_than_of_dear_output(encoder):
    """A price is not a token count in disguise: with output dear, the same dollars buy a
    run fewer tokens than with output cheap."""
    problem = Problem("p", PROBLEM, GOLD)
    cheap_output = CostModel.parse("price:input=0.5,output=0.5")
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        dear = await priced("sc", "cap", encoder).run(problem, 0.01, c)
        m = method("sc", "cap", encoder)
        m.budget_unit = cheap_output
        cheap = await m.run(problem, 0.01, c)
    assert cheap.tokens > 2 * dear.tokens


async def test_a_time_budget_is_a_target_once_the_server_has_shown_its_speed(encoder):
    with pytest.raises(ValueError, match=r"cannot be a cap.*budget_mode='target'"):
        make_method("sc", budget_mode="cap", budget_unit="time")
    problem = Problem("p", PROBLEM, GOLD)
    server = ScriptedServer(default_reply=varied, prefix_cache="llama.cpp")
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        m = make_method("sc", budget_mode="target", budget_unit="time", max_tokens=96)
        with pytest.raises(BudgetUnitError, match="server's speed"):
            await m.run(problem, 30.0, c)
        await make_method("sc", max_tokens=96).run(problem, 600, c)  # a run in tokens
        assert c.speed.seconds_per_token is not None
        errors = []
        for seconds in (20.0, 40.0, 80.0):
            res = await m.run(problem, seconds, c)
            errors.append(TIME.of_ledger(res.ledger) / seconds - 1)
            assert res.meta["cost"]["unit"] == "s" and "unspent" not in res.meta["cost"]
    assert abs(sum(errors) / len(errors)) <= 0.15, errors


async def test_a_price_too_small_for_one_call_is_refused_in_its_unit(encoder):
    problem = Problem("p", PROBLEM, GOLD)
    async with ScriptedServer(default_reply=varied) as srv, LLMClient(srv.base_url, "m") as c:
        with pytest.raises(BudgetTooSmallError, match=r"budget of 1e-06 \$.*minimum is .*\$"):
            await priced("sc", "cap", encoder).run(problem, 0.000001, c)


async def test_the_service_takes_a_budget_in_dollars_at_the_operators_price():
    """With ``--price`` set, a request may budget in dollars: usage stays under it, priced
    as the ledger booked it, and says what is left; without prices, or in time, a 400 names
    ``budget_unit``."""
    from rse_fast.serve.requests import Caps

    msg = [{"role": "user", "content": PROBLEM}]
    body = {"model": "sc:m", "messages": msg, "max_tokens": 96, "k": 4,
            "budget": 0.004, "budget_unit": "price"}  # fmt: skip
    async with ScriptedServer(default_reply=varied, prefix_cache="llama.cpp") as up:
        async with running_service(up, caps=Caps(price=PRICE)) as (_, url):
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    data = await r.json()
        async with running_service(up) as (_, url), aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                unpriced = (r.status, await r.json())
            timed = {**body, "budget_unit": "time"}
            async with s.post(url + "/v1/chat/completions", json=timed) as r:
                in_time = (r.status, await r.json())
    assert "error" not in data, data
    usage = data["usage"]
    paid = PRICE.of_call(usage["prompt_tokens"], usage["completion_tokens"], 0)
    assert usage["cost"]["unit"] == "$" and usage["cost"]["spent"] <= 0.004 + 1e-12
    assert usage["cost"]["spent"] <= paid + 1e-12  # cached input was cheaper, never dearer
    assert usage["budget_unspent"] == pytest.approx(0.004 - usage["cost"]["spent"])
    assert usage["total_tokens"] > 0.5 * 0.004 / max(PRICE.token_rates())
    for status, err in (unpriced, in_time):
        assert status == 400 and err["error"]["param"] == "budget_unit", err
    assert "--price" in unpriced[1]["error"]["message"]
    assert "cannot be capped" in in_time[1]["error"]["message"]


def test_a_price_without_an_output_price_caps_by_the_prompts_alone():

    cap = BudgetCap(0.001, cost=CostModel.parse("price:input=1,output=0"))
    assert cap.reserve(500, 4096).completion == 4096  # $0.0005 of prompt; output is free
    with pytest.raises(BudgetExhaustedError, match=r"\$ left"):
        cap.reserve(600, 4096)  # $0.0006 more does not fit the $0.0005 left


async def test_a_server_that_ignores_n_stays_within_a_price_cap():
    """Asked once per choice, each request pays its prompt at the input price: the priced
    meter reserves those prompts as the token meter does, dropping what does not fit."""
    long = [{"role": "user", "content": " ".join(["word"] * 150)}]
    server = ScriptedServer(default_reply=" ".join(["more"] * 400), ignore_n=True)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        for budget in (0.0015, 0.004, 0.02):
            capped = c.with_ledger(Ledger()).with_cap(BudgetCap(budget, cost=PRICE))
            result = await capped.chat(long, n=4, max_tokens=300)
            paid = PRICE.of_ledger(capped.ledger)
            assert 1 <= len(result.choices) <= 4 and paid <= budget + 1e-12, (budget, paid)
        assert len(result.choices) == 4  # the largest budget holds all four requests


async def test_a_pool_cut_to_a_smaller_price_lands_near_it_in_dollars():
    """SC and best-of-N run once at the largest budget and are cut to the smaller ones: in
    dollars the cut counts each candidate's own calls (cached input at its own price)."""
    problem = Problem("p", PROBLEM, GOLD)
    server = ScriptedServer(default_reply=varied, prefix_cache="llama.cpp")
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        m = make_method("sc", parallel=4, max_tokens=MAX_TOKENS_CUT, budget_unit=PRICE)
        full = await m.run(problem, 0.02, c)
    per_sample = PRICE.of_ledger(full.ledger) / len(full.pool)
    for budget in (0.005, 0.01):
        cut = m.subsample(full, budget)
        paid = PRICE.of_ledger(cut.ledger)
        assert abs(paid - budget) <= per_sample, (budget, paid, per_sample)
        assert cut.meta["cost"] == {"unit": "$", "budget": budget, "spent": pytest.approx(paid)}
        assert cut.pool == full.pool[: len(cut.pool)] and cut.tokens < full.tokens


async def test_an_evaluation_runs_its_budget_grid_in_dollars_and_says_so(tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(
        json.dumps({"id": f"q{i}", "problem": PROBLEM, "answer": GOLD}) for i in range(2)
    ))  # fmt: skip
    out = tmp_path / "run"
    grid = ["0.002", "0.004", "0.008"]
    async with ScriptedServer(default_reply=varied, prefix_cache="llama.cpp") as srv:
        argv = ["eval", "--dataset", f"jsonl:{data}", "--base-url", srv.base_url, "--model", "m",
                "--methods", "sc,fusion", "--budgets", ",".join(grid), "--budget-unit",
                "price:input=0.5,cached=0.05,output=4", "--max-tokens", "96", "--out",
                str(out), "--single-samples", "1", "--quiet"]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        asked = len(srv.requests)
        assert await asyncio.to_thread(main, argv) == 0  # resumed: every cell is done
        assert len(srv.requests) == asked
    recs = [r for r in load_records(out / "results.jsonl") if r["method"] != SINGLE]
    assert sorted({r["budget"] for r in recs}) == [0.002, 0.004, 0.008] and len(recs) == 12
    assert all(r["budget_unit"] == "$" for r in recs)
    for r in recs:  # the error is in dollars, as the budget was
        paid = PRICE.of_spend(r["spend"])
        assert r["budget_error"] == pytest.approx(paid / r["budget"] - 1)
    errors = [r["budget_error"] for r in recs if r["method"] == "fusion"]
    assert abs(sum(errors) / len(errors)) <= 0.2, errors
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cost_unit"] == "price"  # paired in the budget's unit unless told
    table = capsys.readouterr().out
    assert "| sc | $0.002 |" in table and "| fusion | $0.008 |" in table


@pytest.mark.parametrize(
    ("budgets", "unit", "said"),
    [("2000,lots", "tokens", "'lots' is not a number"), ("0.5,1000", "tokens", "whole number"),
     ("0.01,-0.02", "price:input=1,output=2", "positive"), ("nan", "time", "positive")],
)  # fmt: skip
def test_a_budget_grid_that_is_not_numbers_in_its_unit_is_a_usage_error(
    budgets, unit, said, capsys
):
    with pytest.raises(SystemExit) as stop:
        main(["eval", "--dataset", "humaneval", "--budgets", budgets, "--budget-unit", unit])
    assert stop.value.code == 2 and said in capsys.readouterr().err
