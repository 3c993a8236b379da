"""Shared sample pools: families whose requests are the same share one stored reply, each
charged what the server reported for it, with results equal to sampling live."""

from __future__ import annotations

import json

from rse_fast.encoder import Encoder
from rse_fast.llm import LLMClient
from rse_fast.llm.sample_pool import SamplePool, body_key
from rse_fast.methods import Problem, make_method
from rse_fast.testing import ScriptedServer

from fakes.scripted_tts import GOLD, PROBLEM
from fakes.scripted_tts import reply as tts_reply

FAMILIES = ("sc", "bon", "fusion", "refine", "rse")
OPTIONS = {"parallel": 4, "max_tokens": 96, "seed": 5}


def method(name: str, encoder: Encoder):
    extra = {"encoder": encoder, "config": {"settle_margin": None}} if name == "rse" else {}
    return make_method(name, **OPTIONS, **extra)


def run_summary(res) -> dict:
    """What a family's result says: its answer, its pool, and what it was charged."""
    return {
        "answer": res.final.answer if res.final else None,
        "pool": [c.text for c in res.pool],
        "tokens": res.tokens,
        "roles": {k: v.total_tokens for k, v in res.ledger.by_role().items()},
    }


async def test_families_share_their_samples_and_each_reads_as_if_it_sampled_itself():
    encoder = Encoder(providers=["CPUExecutionProvider"])
    problem = Problem("p", PROBLEM, GOLD)
    live: dict[str, dict] = {}
    for name in FAMILIES:  # each on a server of its own: nothing shared
        async with ScriptedServer(default_reply=tts_reply) as srv:
            async with LLMClient(srv.base_url, "m") as client:
                live[name] = run_summary(await method(name, encoder).run(problem, 3000, client))
    pool = SamplePool()
    async with ScriptedServer(default_reply=tts_reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            shared = client.with_options(samples=pool)
            pooled = {}
            for name in FAMILIES:
                res = await method(name, encoder).run(problem, 3000, shared)
                pooled[name] = run_summary(res)
            sent = len([b for b in srv.requests if not b.get("stream")])
    assert pooled == live  # the same answers, pools and charges as sampling live
    # sc's samples were paid once: best-of-N (and the families asking the same) read them
    assert pool.hits >= 4 and pool.hits + sent == pool.hits + pool.misses
    assert pool.saved_share is not None and pool.saved_share > 0


async def test_a_pool_on_disk_is_found_again_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "pool.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": PROBLEM}], "seed": 1}
    async with ScriptedServer(default_reply=tts_reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            first = await client.with_options(samples=SamplePool(path)).chat(
                body["messages"], seed=1
            )
            path.write_text(path.read_text() + '{"key": "torn", "raw": {')  # a cut write
            again = SamplePool(path)
            second = await client.with_options(samples=again).chat(body["messages"], seed=1)
            assert len(srv.requests) == 1 and again.hits == 1  # answered from the file
    assert second.text == first.text and second.usage == first.usage
    assert len(again) == 1 and body_key({"a": 1, "b": 2}) == body_key({"b": 2, "a": 1})
    rows = [json.loads(x) for x in path.read_text().splitlines()[:1]]
    assert rows[0]["raw"]["usage"]["total_tokens"] == first.usage.total_tokens
