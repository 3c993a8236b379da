"""A fresh client's first capped calls hold what the server's chat template adds: where the
server can count a prompt (vLLM's ``/tokenize``, llama.cpp's ``/apply-template`` and
``/tokenize``), one probe before the first capped call seeds the margin; a server that cannot
is asked once and never again, a slow one delays nothing past the probe's timeout, and a
call without a cap never asks."""

from __future__ import annotations

import asyncio
import time

import pytest

from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetTooSmallError
from rse_fast.llm import LLMClient, prompt_count
from rse_fast.llm.ledger import count_prompt_tokens
from rse_fast.llm.meter import BudgetCap, PromptMargin
from rse_fast.llm.prompt_count import server_prompt_tokens
from rse_fast.methods import Problem, make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import FILLER, GOLD, PROBLEM
from fakes.scripted_tts import reply as tts_reply

MSG = [{"role": "user", "content": "Count from one to five hundred, one number per line."}]
LONG_REPLY = " ".join(["seven"] * 400)
#: what the template adds per request: a default system turn and the turn markers
TEMPLATE = 80


def probes(server: ScriptedServer) -> list[str]:
    return [path for path, _ in server.tokenizer_requests]


@pytest.mark.parametrize(
    ("api", "asked"),
    [("llama.cpp", ["/tokenize", "/apply-template", "/tokenize"]), ("vllm", ["/tokenize"])],
)
async def test_the_servers_count_is_what_it_then_bills(api, asked):
    server = ScriptedServer(default_reply=LONG_REPLY, template_tokens=TEMPLATE, tokenizer_api=api)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        counted = await server_prompt_tokens(c.transport, c.build_body(MSG))
        billed = (await c.chat(MSG, max_tokens=4)).usage.prompt_tokens
    assert counted == billed == len(MSG[0]["content"].split()) + TEMPLATE
    assert probes(srv) == asked


@pytest.mark.parametrize("api", ["llama.cpp", "vllm"])
@pytest.mark.parametrize("concurrent", [1, 8])
async def test_a_fresh_clients_first_wave_stays_within_a_budget_the_template_would_break(
    api, concurrent
):
    """A first wave whose calls fill the budget between them: the template's 80 unseen
    tokens per call would put the wave above it on the default margin. One probe, shared by
    the whole wave, makes the reservations hold them (the last call is cut to the room)."""
    billed = len(MSG[0]["content"].split()) + TEMPLATE
    estimate = count_prompt_tokens(MSG, LLMClient("http://x", "m").count_tokens)
    assert PromptMargin().reserve(estimate) < billed  # the default margin misses the template
    completion = 120
    budget = concurrent * (billed + completion) - 40  # the cap binds, not max_tokens
    server = ScriptedServer(default_reply=LONG_REPLY, template_tokens=TEMPLATE, tokenizer_api=api)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        view = c.with_cap(BudgetCap(budget))
        calls = [view.chat(MSG, max_tokens=completion, seed=i) for i in range(concurrent)]
        results = await asyncio.gather(*calls)
        spent = sum(r.usage.total_tokens for r in results)
        assert all(r.choices[0].finish_reason == "length" for r in results)
        assert spent <= budget, (spent, budget)
        assert spent >= 0.9 * budget  # and the room was still used
        await c.with_cap(BudgetCap(10_000)).chat(MSG, max_tokens=8)  # a later run: no probe
    assert probes(srv) == (["/tokenize", "/apply-template", "/tokenize"] if api == "llama.cpp"
                           else ["/tokenize"])  # fmt: skip


@pytest.mark.parametrize("name", ("sc", "rse"))
async def test_a_fresh_clients_first_run_ends_within_its_budget(name):
    """The method-level promise on a fresh client (the case the margin learnt from replies
    could not cover: its first run), across budgets from one call up."""

    def long(body: dict, index: int) -> str:  # every completion runs into its cap
        text = tts_reply(body, index)
        return text if text.startswith("{") else " ".join([FILLER] * 40) + " " + text

    options: dict = {"parallel": 4, "max_tokens": 96, "budget_mode": "cap"}
    if name == "rse":
        encoder = Encoder(providers=["CPUExecutionProvider"])
        options.update(encoder=encoder, k=8, max_rounds=24, config={"settle_margin": None})
    problem = Problem("p", PROBLEM, GOLD)
    for budget in (300, 600, 1000, 2600):
        server = ScriptedServer(default_reply=long, template_tokens=TEMPLATE, tokenizer_api="vllm")
        async with server as srv, LLMClient(srv.base_url, "m") as c:
            m = make_method(name, **options)
            res = await m.run(problem, budget, c)
            assert res.tokens <= budget, (budget, res.tokens)
            assert len(res.pool) >= 1  # a budget it accepted bought a sample
            with pytest.raises(BudgetTooSmallError):  # the refusal minimum holds the template
                await m.run(problem, m.minimum_budget(c, problem) - 1, c)
            assert m.minimum_budget(c, problem) > TEMPLATE


async def test_a_server_without_a_tokenizer_is_asked_once_and_calls_go_ahead():
    async with ScriptedServer(template_tokens=TEMPLATE) as srv, LLMClient(srv.base_url, "m") as c:
        view = c.with_cap(BudgetCap(50_000))
        results = await asyncio.gather(*(view.chat(MSG, max_tokens=16) for _ in range(4)))
        await view.chat(MSG, max_tokens=16)
        await c.with_cap(BudgetCap(50_000)).chat(MSG, max_tokens=16)
    assert all(r.text for r in results)
    assert probes(srv) == ["/tokenize", "/apply-template"]  # one probe, both dialects tried
    assert len(srv.requests) == 6


async def test_a_call_without_a_cap_never_asks():
    server = ScriptedServer(tokenizer_api="vllm")
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        await c.chat(MSG, max_tokens=16)
        _ = [e async for e in c.stream(MSG, max_tokens=16)]
    assert probes(srv) == []


async def test_a_stalled_tokenizer_holds_the_first_call_no_longer_than_the_probe_timeout(
    monkeypatch,
):
    monkeypatch.setattr(prompt_count, "PROBE_TIMEOUT_S", 0.3)
    server = ScriptedServer(tokenizer_api="llama.cpp", tokenizer_delay_s=30)
    async with server as srv, LLMClient(srv.base_url, "m") as c:
        view = c.with_cap(BudgetCap(5_000))
        t0 = time.perf_counter()
        events = [e async for e in view.stream(MSG, max_tokens=16)]
        waited = time.perf_counter() - t0
    assert events[-1].done and waited < 10  # not the 30 s the tokenizer would take
    assert probes(srv) == ["/tokenize"]


async def test_the_probe_carries_the_key_and_the_tools():
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    server = ScriptedServer(api_key="k", tokenizer_api="vllm")
    async with server as srv, LLMClient(srv.base_url, "m", api_key="k") as c:
        await c.with_cap(BudgetCap(5_000)).chat(MSG, max_tokens=16, tools=tools)
    ((path, body),) = srv.tokenizer_requests
    assert path == "/tokenize"
    assert body["tools"] == tools and body["messages"] == MSG and body["model"] == "m"
    unauthorised = ScriptedServer(api_key="k", tokenizer_api="vllm")
    async with unauthorised as srv, LLMClient(srv.base_url, "m") as c:
        assert await server_prompt_tokens(c.transport, c.build_body(MSG)) is None
