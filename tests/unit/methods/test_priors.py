"""Cost priors kept across processes: a fresh method reading them plans its first wave like a
warm one; a broken or foreign store never fails a run."""

from __future__ import annotations

import json

import pytest

from rse_fast.llm.client import LLMClient
from rse_fast.methods import PriorStore, Problem, make_method
from rse_fast.testing import ScriptedServer

REPLY = "Six times seven is 42, so \\boxed{42}."
PROBLEM = Problem("p", "What is 6 times 7?")


async def sample_cost(srv: ScriptedServer) -> int:
    async with LLMClient(srv.base_url, "m") as c:
        res = await c.chat(PROBLEM.messages(), max_tokens=256)
        return res.usage.total_tokens


async def first_wave(method, srv: ScriptedServer, budget: int) -> int:
    """Requests the method had in flight at once on its first problem."""
    srv.max_in_flight = 0
    async with LLMClient(srv.base_url, "m", max_concurrency=64) as c:
        await method.run(PROBLEM, budget, c)
    return srv.max_in_flight


async def test_fresh_method_with_store_sizes_first_wave_like_a_warm_one(tmp_path):
    store = PriorStore(tmp_path / "priors.json")
    async with ScriptedServer(default_reply=REPLY, latency=0.05) as srv:
        budget = 8 * await sample_cost(srv)
        cold = make_method("sc", parallel=32, max_tokens=256)
        cold_wave = await first_wave(cold, srv, budget)  # sized from the completion cap
        writer = make_method("sc", parallel=32, max_tokens=256).keep_priors(store)
        await first_wave(writer, srv, budget)  # an earlier process: measures and writes
        fresh = make_method("sc", parallel=32, max_tokens=256).keep_priors(store)
        fresh_wave = await first_wave(fresh, srv, budget)
    assert cold_wave < 8  # the cold start the store is for
    assert fresh_wave == 8  # every sample the budget buys, in one wave
    assert fresh.completion_prior == pytest.approx(writer.completion_prior)


async def test_priors_are_kept_per_endpoint_model_and_cap(tmp_path):
    store = PriorStore(tmp_path / "priors.json")
    async with ScriptedServer(default_reply=REPLY) as srv:
        budget = 8 * await sample_cost(srv)
        await first_wave(make_method("sc", max_tokens=256).keep_priors(store), srv, budget)
        other_cap = make_method("sc", max_tokens=128).keep_priors(store)
        async with LLMClient(srv.base_url, "another-model") as c:
            other_model = make_method("sc", max_tokens=256).keep_priors(store)
            await other_model.run(PROBLEM, budget, c)
        await first_wave(other_cap, srv, budget)
    keys = sorted(json.loads((tmp_path / "priors.json").read_text()))
    assert len(keys) == 3
    assert any("#another-model|sc|max_tokens=256" in k for k in keys)
    assert any("#m|sc|max_tokens=128" in k for k in keys)


async def test_bon_and_rse_keep_their_own_priors(tmp_path):
    store = PriorStore(tmp_path / "priors.json")
    async with ScriptedServer(default_reply=REPLY) as srv:
        budget = 6 * await sample_cost(srv)
        bon = make_method("bon", max_tokens=256).keep_priors(store)
        await first_wave(bon, srv, budget)
    saved = next(iter(json.loads((tmp_path / "priors.json").read_text()).values()))["priors"]
    assert saved["distinct_prior"] == pytest.approx(bon.distinct_prior)
    assert saved["completion_prior"] == pytest.approx(bon.completion_prior)


@pytest.mark.parametrize(
    "content", ["{not json", "[1, 2]", '{"k": {"priors": {"completion_prior": "x"}}}', ""]
)
async def test_unreadable_store_is_an_empty_one(tmp_path, content):
    path = tmp_path / "priors.json"
    path.write_text(content)
    store = PriorStore(path)
    async with ScriptedServer(default_reply=REPLY) as srv:
        budget = 4 * await sample_cost(srv)
        method = make_method("sc", max_tokens=256).keep_priors(store)
        await first_wave(method, srv, budget)
    data = json.loads(path.read_text())  # rewritten whole, with this run's priors
    (entry,) = [v for k, v in data.items() if k != "k"]
    assert entry["priors"]["completion_prior"] > 0


def test_store_drops_non_positive_and_non_finite_values(tmp_path):
    store = PriorStore(tmp_path / "p.json")
    store.save("k", {"a": 2.0, "b": float("nan"), "c": -1.0, "d": float("inf"), "e": 0.0})
    assert store.load("k") == {"a": 2.0}
    assert store.load("missing") == {}


def test_memory_store_keeps_priors_in_this_process():
    store = PriorStore()
    store.save("k", {"completion_prior": 12.5})
    assert store.load("k") == {"completion_prior": 12.5}
    assert PriorStore().load("k") == {}
