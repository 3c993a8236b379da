"""The RSE engine end to end against the scripted server."""

from __future__ import annotations

import json

import pytest
from conftest import threaded_server

from rse_fast.encoder import Encoder
from rse_fast.errors import RoundFailedError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.retry import RetryPolicy
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE
from rse_fast.testing import Fault, ScriptedServer

from fakes.scripted_model import (
    FACT,
    GOLD,
    PITFALL,
    PITFALLS_HEADER,
    PROBLEM,
    is_distill,
    is_solve,
    reply,
    rollout_index,
)

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=0.002)


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


def make_rse(url: str, encoder: Encoder, **cfg) -> RSE:
    client = LLMClient(url, "scripted", retry=FAST)
    return RSE(client, encoder, RSEConfig(**{"rounds": 3, "k": 4, **cfg}))


async def solve(url: str, encoder: Encoder, gold: str | None = None, **cfg):
    rse = make_rse(url, encoder, **cfg)
    async with rse.client:
        return await rse.solve(PROBLEM, gold=gold)


async def test_recycling_changes_round_two_prompts_and_answers(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        result = await solve(srv.base_url, encoder, GOLD)
    solve_prompts = [b["messages"][-1]["content"] for b in srv.requests if is_solve(b)]
    assert len(solve_prompts) == 12
    assert all(PITFALLS_HEADER not in p for p in solve_prompts[:4])  # empty bank: plain prompt
    assert all(PITFALL in p and FACT in p for p in solve_prompts[4:])
    assert result.accuracy_per_round == [0.0, 1.0, 1.0]
    assert [r.answer for r in result.rounds] == ["32", "42", "42"]
    assert result.answer == "42" and result.correct is True
    assert result.rounds[0].experience_block == ""
    roles = result.ledger["roles"]
    assert roles["explore"]["calls"] == 12 and roles["distill"]["calls"] == 12
    assert result.ledger["total_tokens"] == sum(r.tokens for r in result.rounds)


async def test_dedup_within_and_across_rounds_explains_rejections(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        result = await solve(srv.base_url, encoder, rounds=2)
    r1, r2 = result.rounds
    neg1 = [d for d in r1.decisions if d.kind == "negative"]
    assert [d.accepted for d in neg1] == [True, False, False, False]  # 4 identical pitfalls
    assert all(d.matched == PITFALL and d.similarity == pytest.approx(1.0) for d in neg1[1:])
    fact2 = [d for d in r2.decisions if d.text == FACT]
    assert len(fact2) == 4 and not any(d.accepted for d in fact2)  # already banked in round 1
    assert r1.bank_sizes["negative"] == 1 and result.bank_sizes["negative"] == 1
    for d in r1.decisions + r2.decisions:  # every decision is consistent with τ
        if not d.accepted:
            assert d.similarity >= 0.85 and d.matched is not None
        elif d.similarity is not None:
            assert d.similarity < 0.85


async def test_same_outputs_give_the_same_bank_whatever_the_arrival_order(encoder):
    banks = []
    for seed in (1, 2):
        latency = lambda rng: rng.uniform(0.0, 0.03)  # noqa: E731
        async with ScriptedServer(default_reply=reply, latency=latency, seed=seed) as srv:
            result = await solve(srv.base_url, encoder, rounds=2)
        banks.append(result)
    a, b = banks
    assert [d.text for r in a.rounds for d in r.decisions] == [
        d.text for r in b.rounds for d in r.decisions
    ]
    positives = [d for d in a.rounds[0].decisions if d.kind == "positive" and d.accepted]
    assert [(d.rollout, d.position) for d in positives] == sorted(
        (d.rollout, d.position) for d in positives
    )


async def test_resume_after_interruption_loses_only_the_round_in_flight(encoder, tmp_path):
    def fail_round_three(i, body):
        return Fault("status", status=503) if (body.get("seed") or 0) >= 3000 else None

    ckpt = tmp_path / "ckpt"
    async with ScriptedServer(default_reply=reply, faults=fail_round_three) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=3, k=4), checkpoint_dir=ckpt)
        with pytest.raises(RoundFailedError, match="round 3"):
            async with client:
                await rse.solve(PROBLEM, gold=GOLD)
    assert json.loads((ckpt / "latest.json").read_text())["round"] == 2

    async with ScriptedServer(default_reply=reply) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=3, k=4), checkpoint_dir=ckpt)
        async with client:
            result = await rse.solve(PROBLEM, gold=GOLD, resume=True)
    assert result.resumed_from_round == 2 and len(result.rounds) == 3
    assert len(srv.requests) == 8  # only round 3: 4 rollouts + 4 distillations
    assert all(PITFALL in b["messages"][-1]["content"] for b in srv.requests if is_solve(b))
    assert result.ledger["roles"]["explore"]["calls"] >= 12  # round 1-2 calls restored
    assert result.accuracy_per_round == [0.0, 1.0, 1.0]


async def test_resume_refuses_another_problem(encoder, tmp_path):
    async with ScriptedServer(default_reply=reply) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=1, k=2), checkpoint_dir=tmp_path)
        async with client:
            await rse.solve(PROBLEM)
            with pytest.raises(ValueError, match="another problem"):
                await rse.solve("A different problem", resume=True)


async def test_faults_are_recorded_and_the_round_continues(encoder):
    def faults(i, body):
        idx = rollout_index(body)
        if is_solve(body) and idx == 1:
            return Fault("status", status=500)  # rollout 1 fails after retries
        return None

    def garbage_for_rollout_2(body, index):
        if is_distill(body) and rollout_index(body) == 2:
            return "I think the attempt is fine, nothing to add."
        if is_distill(body) and rollout_index(body) == 3:
            long = "word " * 200
            return json.dumps({"positive": [long], "negative": []})
        return reply(body, index)

    async with ScriptedServer(default_reply=garbage_for_rollout_2, faults=faults) as srv:
        result = await solve(srv.base_url, encoder, rounds=1, max_chars_per_experience=60)
    r1 = result.rounds[0]
    assert r1.failed_rollouts == 1 and r1.rollouts[1].error and "500" in r1.rollouts[1].error
    assert r1.unparseable == 1 and r1.rollouts[2].distill == "unparseable"
    long = [t for t in r1.rollouts[3].positive if t.startswith("word")]
    assert len(long[0]) <= 60 and long[0].endswith("…")
    assert result.ledger["roles"]["explore"]["errors"] == 1


async def test_a_round_where_every_call_fails_raises(encoder):
    async with ScriptedServer(faults=lambda i, b: Fault("status", status=502)) as srv:
        with pytest.raises(RoundFailedError, match="all 4 rollouts failed"):
            await solve(srv.base_url, encoder, rounds=1)


async def test_server_rejecting_json_schema_falls_back_to_tolerant_parsing(encoder):
    def reject_schema(i, body):
        refuse = Fault("status", status=400, message="response_format is not supported")
        return refuse if body.get("response_format") else None

    def prose_json(body, index):
        if is_distill(body):
            return "Here you go:\n```json\n" + reply(body, index) + "\n```"
        return reply(body, index)

    async with ScriptedServer(default_reply=prose_json, faults=reject_schema) as srv:
        result = await solve(srv.base_url, encoder, rounds=2)
    assert result.rounds[0].unparseable == 0 and result.bank_sizes["negative"] == 1
    distills = [b for b in srv.requests if is_distill(b)]
    # distillations already in flight when the first refusal came back may carry the schema;
    # from then on it is never sent again
    assert 1 <= sum(bool(b.get("response_format")) for b in distills) <= 4
    assert not any(b.get("response_format") for b in distills[4:])


def test_sync_solve_and_config_validation(encoder):
    with pytest.raises(ValueError, match="rounds"):
        RSEConfig(rounds=0)
    with pytest.raises(ValueError, match="k lists"):
        RSEConfig(rounds=2, k=[1, 2, 3])
    with pytest.raises(ValueError, match="tau_positive"):
        RSEConfig(tau_positive=1.5)
    with threaded_server(default_reply=reply) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=[2, 3])
        result = rse.solve_sync(PROBLEM, gold=GOLD)
        assert [r.k for r in result.rounds] == [2, 3] and result.answer == GOLD  # 3 of 5 votes
        with pytest.raises(ValueError, match="non-empty"):
            rse.solve_sync("   ")
