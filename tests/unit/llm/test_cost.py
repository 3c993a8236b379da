"""Cost as users pay it: the cached part of a prompt and the server's own timings reach the
ledger from both servers' shapes (streamed or not), and a cost model reads one run in
tokens, in price (cached input billed apart) or in time."""

from __future__ import annotations

import pytest

from rse_fast.errors import CostModelError
from rse_fast.llm import LLMClient
from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import CallRecord
from rse_fast.llm.parse import parse_usage
from rse_fast.testing import ScriptedServer

SYSTEM = {"role": "system", "content": " ".join(["rules"] * 60)}


def test_vllm_and_llama_cpp_cache_fields_are_read():
    details = {"cached_tokens": 64}
    vllm = parse_usage(
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": details}
    )
    assert vllm is not None and vllm.cached_tokens == 64 and vllm.timings is None
    llama = parse_usage(
        {"prompt_tokens": 1125, "completion_tokens": 9},
        {"cache_n": 1108, "prompt_n": 17, "prompt_ms": 187.0, "predicted_ms": 441.0},
    )
    assert llama is not None and llama.cached_tokens == 1108
    assert llama.timings is not None and llama.timings.prompt_ms == 187.0
    too_many = {"cached_tokens": 50}
    odd = parse_usage(
        {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": too_many},
        {"prompt_ms": "x"},
    )
    assert odd is not None and odd.cached_tokens == 10 and odd.timings is None  # capped, dropped


@pytest.mark.parametrize("flavour", ["vllm", "llama.cpp"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_shared_prefix_is_booked_as_cached(flavour, stream):
    """Two calls that share a long system turn: the second's prefix is served from the
    cache, as the server reports it, and the ledger books it (llama.cpp: with its timings)."""
    server = ScriptedServer(default_reply="four words of answer", prefix_cache=flavour)
    async with server as srv, LLMClient(srv.base_url, "m") as client:
        for question in ("What is 2 + 2?", "What is 3 + 5?"):
            messages = [SYSTEM, {"role": "user", "content": question}]
            if stream:
                async for _ in client.stream(messages):
                    pass
            else:
                await client.chat(messages)
    first, second = client.ledger.records
    assert first.cached_tokens == 0 and second.cached_tokens is not None
    assert 48 <= second.cached_tokens < second.prompt_tokens
    if flavour == "vllm":
        assert second.cached_tokens % 16 == 0 and second.prefill_s is None
    else:
        assert second.prefill_s == pytest.approx(
            (second.prompt_tokens - second.cached_tokens) * 0.011
        )
        assert second.decode_s == pytest.approx(second.completion_tokens * 0.049)
    assert client.ledger.summary()["cached_prompt_tokens"] == second.cached_tokens


def record(**kw) -> CallRecord:
    base = {"role": "explore", "prompt_tokens": 1000, "completion_tokens": 200,
            "latency_s": 9.0, "endpoint": "e", "cached_tokens": 800}  # fmt: skip
    return CallRecord(**{**base, **kw})


def test_a_cost_model_reads_a_call_in_each_unit():
    rec = record(prefill_s=2.2, decode_s=9.8)
    assert CostModel().of_record(rec) == 1200
    price = CostModel.parse("price:input=0.15,cached=0.075,output=0.6")
    assert price.of_record(rec) == pytest.approx((200 * 0.15 + 800 * 0.075 + 200 * 0.6) / 1e6)
    uncached = CostModel("price", input_per_m=0.15, output_per_m=0.6)  # no cached price
    assert uncached.of_record(rec) == pytest.approx((1000 * 0.15 + 200 * 0.6) / 1e6)
    assert CostModel("time").of_record(rec) == pytest.approx(12.0)
    assert CostModel("time").of_record(record()) == pytest.approx(9.0)  # no timings: latency
    assert CostModel("time").of_record(record(work_s=0.5)) == pytest.approx(9.5)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("dollars", "'dollars'"),
        ("price", "input= and output= missing"),
        ("price:input=x,output=1", "'x' for input="),
        ("price:input=1,output=1,speed=2", "'speed=2'"),
        ("tokens:3", "takes no settings"),
        ("price:input=-1,output=1", "not negative"),
        ("price:input=0.15", "output= missing"),  # a forgotten price is not a free token
        ("price:input=1,output=2,input=3", "input= given twice"),
        ("price:input=nan,output=1", "finite"),
    ],
)
def test_a_bad_cost_spec_is_refused_by_name(spec, named):
    with pytest.raises(CostModelError) as info:
        CostModel.parse(spec)
    assert named in str(info.value)
    assert isinstance(info.value, ValueError)  # argparse and callers catching ValueError see it


def test_a_spec_reads_with_spaces_and_without_a_cached_price():
    model = CostModel.parse(" price: input=0.15 , output=0.6 ")
    assert (model.input_per_m, model.cached_input_per_m, model.output_per_m) == (0.15, None, 0.6)


@pytest.mark.parametrize(
    "model",
    [CostModel(), CostModel("time"), CostModel("price", 0.15, None, 0.6),
     CostModel("price", 2.0, 0.5, 8.0), CostModel("price", 1e-7, 0.0, 0.3)],
)  # fmt: skip
def test_a_models_spec_reads_back_as_the_same_model(model):
    """A checkpoint keeps the spec to refuse a resume at other prices: it must round-trip."""
    assert CostModel.parse(model.spec) == model


def eval_record(problem: str, method: str, cached: int, quality: float) -> dict:
    spend = {"prompt_tokens": 800, "cached_prompt_tokens": cached, "completion_tokens": 200,
             "time_s": 10.0}  # fmt: skip
    return {"problem": problem, "method": method, "budget": 1000, "tokens": 1000,
            "spend": spend, "final_quality": quality}  # fmt: skip


def test_the_eval_pairs_methods_at_matched_spend_in_the_unit_asked():
    """Two methods that spend the same tokens, one of them mostly from the prefix cache: at
    matched tokens they pair; in price (cached input at a tenth) they are not the same spend."""
    from rse_fast.eval.summary import paired_rows

    records = [eval_record(p, "a", 0, 1.0) for p in "xyz"]
    records += [eval_record(p, "b", 700, 0.0) for p in "xyz"]
    by_tokens = [r for r in paired_rows(records) if r["b"] != "single"]
    assert [(r["a"], r["b"]) for r in by_tokens] == [("a", "b")]
    price = CostModel.parse("price:input=1,cached=0.1,output=4")
    assert [r for r in paired_rows(records, price) if r["b"] != "single"] == []
    assert [r["a"] for r in paired_rows(records, CostModel("time")) if r["b"] != "single"]
    old = {k: v for k, v in records[0].items() if k != "spend"}
    with pytest.raises(ValueError, match="tokens only"):
        paired_rows([old], price)


def test_a_cap_books_what_an_interrupted_run_already_paid_in_its_own_unit():
    from rse_fast.llm.meter import BudgetCap

    price = CostModel.parse("price:input=0.15,cached=0.075,output=0.6")
    cap = BudgetCap(0.01, cost=price)
    cap.book_earlier([record(), record(cached_tokens=0)])
    paid = price.of_record(record()) + price.of_record(record(cached_tokens=0))
    assert cap.room == pytest.approx(0.01 - paid) and cap.settled == pytest.approx(paid)
