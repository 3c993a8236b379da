"""The RSE engine end to end against the scripted server."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from conftest import threaded_server

from rse_fast.encoder import Encoder
from rse_fast.errors import RoundFailedError
from rse_fast.llm.client import LLMClient
from rse_fast.methods.rse_method import RSEMethod
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE
from rse_fast.testing import Fault, ScriptedServer

from fakes.engines import FAST, make_rse
from fakes.scripted_model import (
    FACT,
    GOLD,
    MECHANISM,
    PITFALL,
    PROBLEM,
    is_distill,
    is_guided,
    is_solve,
    prompt_of,
    reply,
    rollout_index,
)


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"])


async def solve(url: str, encoder: Encoder, gold: str | None = None, **cfg):
    rse = make_rse(url, encoder, **cfg)
    async with rse.client:
        return await rse.solve(PROBLEM, gold=gold)


async def test_recycling_changes_round_two_prompts_and_answers(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        result = await solve(srv.base_url, encoder, GOLD)
    solve_prompts = [prompt_of(b) for b in srv.requests if is_solve(b)]
    assert len(solve_prompts) == 12
    guided = [is_guided(b) for b in srv.requests if is_solve(b)]
    assert guided == [False] * 4 + [True] * 8  # empty bank: plain prompt
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
        # rollouts are seeded by their index in the run: round 3's are samples 8-11
        late = is_solve(body) and (body.get("seed") or 0) >= 8
        return Fault("status", status=503) if late else None

    ckpt = tmp_path / "ckpt"
    async with ScriptedServer(default_reply=reply, faults=fail_round_three) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=3, k=4, **MECHANISM), checkpoint_dir=ckpt)
        with pytest.raises(RoundFailedError, match="round 3"):
            async with client:
                await rse.solve(PROBLEM, gold=GOLD)
    assert json.loads((ckpt / "latest.json").read_text())["round"] == 2

    async with ScriptedServer(default_reply=reply) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=3, k=4, **MECHANISM), checkpoint_dir=ckpt)
        async with client:
            result = await rse.solve(PROBLEM, gold=GOLD, resume=True)
    assert result.resumed_from_round == 2 and len(result.rounds) == 3
    assert len(srv.requests) == 8  # only round 3: 4 rollouts + 4 distillations
    assert all(PITFALL in prompt_of(b) for b in srv.requests if is_solve(b))
    assert result.ledger["roles"]["explore"]["calls"] >= 12  # round 1-2 calls restored
    assert result.accuracy_per_round == [0.0, 1.0, 1.0]


async def test_resume_refuses_another_problem(encoder, tmp_path):
    async with ScriptedServer(default_reply=reply) as srv:
        client = LLMClient(srv.base_url, "scripted", retry=FAST)
        rse = RSE(client, encoder, RSEConfig(rounds=1, k=2, **MECHANISM), checkpoint_dir=tmp_path)
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
            long = "word" + "-and-word" * 24  # long in characters, few tokens: it fits
            return json.dumps({"positive": [long], "negative": []})  # the distill cap
        return reply(body, index)

    async with ScriptedServer(default_reply=garbage_for_rollout_2, faults=faults) as srv:
        result = await solve(
            srv.base_url, encoder, rounds=1, max_chars_per_experience=60, distill_retries=0
        )
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


class TimedEncoder:
    """The real encoder, noting when each ``aencode`` call starts and what it was given."""

    def __init__(self, inner: Encoder) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    async def aencode(self, texts):
        self.calls.append((time.perf_counter(), list(texts)))
        return await self.inner.aencode(texts)


async def test_streamed_distillation_embeds_statements_while_the_reply_streams(encoder):
    """Each statement goes to the encoder as its item closes: the first embedding starts
    well before the distillation's stream ends, and the bank is the one a plain call builds."""
    rate = 60.0  # tokens (words) per second
    distill_started: list[tuple[float, int]] = []

    def timed(body, index):
        text = reply(body, index)
        if is_distill(body):
            distill_started.append((time.perf_counter(), len(text.split())))
        return text

    banks = {}
    for streamed in (True, False):
        timed_encoder = TimedEncoder(encoder)
        async with ScriptedServer(default_reply=timed, stream_tokens_per_s=rate) as srv:
            rse = RSE(
                LLMClient(srv.base_url, "scripted", retry=FAST),
                timed_encoder,  # type: ignore[arg-type]
                RSEConfig(rounds=1, k=1, stream_distill=streamed, **MECHANISM),
            )
            async with rse.client:
                result = await rse.solve(PROBLEM)
        banks[streamed] = [
            (d.text, d.kind, d.accepted, d.matched, round(d.similarity or 0.0, 4))
            for d in result.rounds[0].decisions
        ]
        rollout = result.rounds[0].rollouts[0]
        statements = len(rollout.positive) + len(rollout.negative)
        assert statements == 3
        if streamed:
            began, words = distill_started[-1]
            first_call, texts = timed_encoder.calls[0]
            assert len(texts) == 1  # one item, embedded on its own as it closed
            assert first_call - began < 0.6 * words / rate, (first_call - began, words / rate)
            assert rollout.embedded_early == statements
        else:
            assert rollout.embedded_early == 0 and len(timed_encoder.calls) == 1
    assert banks[True] == banks[False] and result.bank_sizes["positive"] == 2


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


# -- fidelity to the method: rules, traces, retries, support, ablations ------------------------
from rse_fast.prompts import FRAMING, GUIDED_RULES, ORIGIN_SAME  # noqa: E402
from rse_fast.prompts.common import SOLVE_SYSTEM  # noqa: E402
from rse_fast.prompts.rse import PRIMED_CUE, primed_preamble  # noqa: E402
from rse_fast.rse.bank import ExperienceBank  # noqa: E402
from rse_fast.testing import Reply  # noqa: E402

TRACE_FACT = "the carry from the units column is exactly one"


def thinking_reply(body: dict, index: int):
    """A thinking model: its trace holds a fact its short final answer never states."""
    if is_distill(body):
        prompt = prompt_of(body)
        seen = TRACE_FACT in prompt
        return json.dumps(
            {
                "propositions": [
                    {
                        "statement": "The carry from 7 + 5 is one" if seen else "Unknown",
                        "conditions": "units digits 7 and 5",
                        "source": "reasoning trace" if seen else "final answer only",
                    }
                ],
                "pitfalls": [],
            }
        )
    return Reply(
        content="\\boxed{42}",
        reasoning=f"Units: 7 + 5 = 12, so {TRACE_FACT}; tens: 2 + 1 + 1 = 4.",
    )


async def test_distiller_reads_the_reasoning_trace_of_a_thinking_model(encoder):
    async with ScriptedServer(default_reply=thinking_reply) as srv:
        result = await solve(srv.base_url, encoder, GOLD, rounds=1)
    distills = [b for b in srv.requests if is_distill(b)]
    assert distills and all(TRACE_FACT in prompt_of(b) for b in distills)
    r1 = result.rounds[0]
    assert all(x.reasoning and TRACE_FACT in x.reasoning for x in r1.rollouts)
    assert result.bank_sizes["positive"] == 1
    bank_texts = [d.text for d in r1.decisions if d.accepted]
    assert bank_texts == [
        "The carry from 7 + 5 is one (holds if units digits 7 and 5; from reasoning trace)"
    ]


async def test_truncated_rollout_is_distilled_and_marked(encoder):
    def cut(body, index):
        if is_distill(body):
            assert "cut off by its length limit" in prompt_of(body)
            return reply(body, index)
        return Reply(content="7 + 5 = 12, write 2. 2 + 1 =", finish_reason="length")

    async with ScriptedServer(default_reply=cut) as srv:
        result = await solve(srv.base_url, encoder, rounds=1)
    r1 = result.rounds[0]
    assert all(x.truncated and x.distill == "ok" for x in r1.rollouts)
    assert result.bank_sizes["positive"] >= 1


async def test_unparseable_distillation_is_retried_with_new_seeds_and_booked(encoder):
    tries: dict[int, list[int]] = {}

    def flaky(body, index):
        if is_distill(body):
            seeds = tries.setdefault(len(prompt_of(body)), [])
            seeds.append(body["seed"])
            if len(seeds) < 3:  # the first two tries of every rollout are garbage
                return "sorry, I cannot produce JSON"
        return reply(body, index)

    async with ScriptedServer(default_reply=flaky) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=1, k=1, distill_retries=2)
        async with rse.client:
            result = await rse.solve(PROBLEM)
    (seeds,) = tries.values()
    assert len(seeds) == 3 and len(set(seeds)) == 3  # new seed each time
    rec = result.rounds[0].rollouts[0]
    assert rec.distill == "ok" and rec.distill_tries == 3
    assert result.ledger["roles"]["distill"]["calls"] == 3  # every try booked

    async with ScriptedServer(
        default_reply=lambda b, i: "no json" if is_distill(b) else reply(b, i)
    ) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=1, k=2, distill_retries=1)
        async with rse.client:
            result = await rse.solve(PROBLEM)
    assert result.rounds[0].unparseable == 2
    assert [x.distill_tries for x in result.rounds[0].rollouts] == [2, 2]


async def test_short_guidance_is_one_framing_line_then_the_items(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        result = await solve(srv.base_url, encoder, GOLD, rounds=2, guidance="short")
    block = result.rounds[1].experience_block
    lines = block.splitlines()
    assert lines[0] == FRAMING[True] and f"- avoid: {PITFALL}" in lines
    assert all(line.startswith(("- avoid: ", "- found: ")) for line in lines[1:])
    assert "Never repeat one" not in block  # no rules in the short framing
    # the bank goes to the next problem: the framing says it comes from related problems
    other = "What is 38 + 27? Mind the carry."
    async with ScriptedServer(default_reply=reply) as srv2:
        rse = make_rse(srv2.base_url, encoder, rounds=1, guidance="short")
        seeded = await _bank_from(srv2.base_url, encoder)
        async with rse.client:
            await rse.solve(other, bank=seeded)
        prompts = [prompt_of(b) for b in srv2.requests if is_solve(b)][-4:]
    assert all(FRAMING[False] in p for p in prompts)
    assert not any(FRAMING[True] in p for p in prompts)


async def test_default_guidance_is_the_rules_asking_for_a_recheck_not_a_number_ban(encoder):
    """The dev set's choice (dev-three-ablate-0.5b): the four rules, rule 3 a re-check."""
    assert RSEConfig().guidance == "rules"
    async with ScriptedServer(default_reply=reply) as srv:
        result = await solve(srv.base_url, encoder, GOLD, rounds=2)
    block = result.rounds[1].experience_block
    assert block.startswith(GUIDED_RULES.format(origin=ORIGIN_SAME)) and PITFALL in block
    assert "Never repeat one" in block and "Re-check every number" in block
    assert "Use only numbers you derive yourself" not in block


async def _bank_from(url: str, encoder: Encoder) -> ExperienceBank:
    rse = make_rse(url, encoder, rounds=1)
    bank = ExperienceBank(encoder.dim)
    async with rse.client:
        await rse.solve(PROBLEM, bank=bank)
    return bank


async def test_echoes_of_problem_and_instructions_never_reach_the_bank(encoder):
    def echoing(body, index):
        if is_distill(body):
            return json.dumps(
                {
                    "positive": [PROBLEM, FACT],
                    "negative": [
                        "The attempt did not check that every claim is an unverified hypothesis."
                    ],
                }
            )
        return reply(body, index)

    async with ScriptedServer(default_reply=echoing) as srv:
        result = await solve(srv.base_url, encoder, rounds=1)
    assert result.bank_sizes == {"negative": 0, "positive": 1}
    assert all(x.echoes == 2 for x in result.rounds[0].rollouts)


async def test_support_counts_rollouts_that_rederive_an_experience(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2)
        bank = ExperienceBank(encoder.dim)
        async with rse.client:
            await rse.solve(PROBLEM, bank=bank)
    fact = bank.texts("positive").index(FACT)
    # FACT is distilled from all 4 rollouts of both rounds: 8 rollouts derived it
    assert bank.support("positive")[fact] == 8
    assert {r for r, _ in bank.derived_by("positive", fact)} == {1, 2}
    assert bank.ranked("positive")[0] == fact


async def test_selection_and_ablation_options(encoder):
    async with ScriptedServer(default_reply=reply) as srv:
        guided = await solve(srv.base_url, encoder, GOLD, rounds=2, select_from="guided")
        everything = await solve(srv.base_url, encoder, GOLD, rounds=2, select_from="all")
        neg_only = await solve(srv.base_url, encoder, GOLD, rounds=2, use_positive=False)
        pos_only = await solve(srv.base_url, encoder, GOLD, rounds=2, use_negative=False)
    assert guided.answer == "42" and guided.total_votes == 4  # round 1 (all 32) not counted
    assert everything.total_votes == 8 and everything.answer in ("32", "42")
    assert neg_only.bank_sizes["positive"] == 0 and neg_only.accuracy_per_round[1] == 1.0
    assert pos_only.bank_sizes["negative"] == 0 and pos_only.accuracy_per_round[1] == 0.0
    with pytest.raises(ValueError, match="both be False"):
        RSEConfig(use_positive=False, use_negative=False)


async def test_rse_variants_as_eval_methods(encoder):
    from rse_fast.methods import Problem, make_method

    async with ScriptedServer(default_reply=reply) as srv, LLMClient(srv.base_url, "m") as c:
        res = await make_method("rse:neg-only", encoder=encoder, k=4).run(
            Problem("p", PROBLEM, GOLD), 4000, c
        )
    assert res.method == "rse:neg-only" and res.meta["bank_sizes"]["positive"] == 0
    with pytest.raises(ValueError, match="unknown RSE variant"):
        make_method("rse:everything")
    with pytest.raises(ValueError, match="unknown method"):
        make_method("sc:neg-only")


async def test_distillation_can_use_its_own_endpoint_model_and_extra_body(encoder):
    async with (
        ScriptedServer(default_reply=reply) as policy,
        ScriptedServer(default_reply=reply) as distiller,
    ):
        client = LLMClient(policy.base_url, "policy", retry=FAST)
        cfg = RSEConfig(
            rounds=1,
            k=2,
            **MECHANISM,
            distill_model="small-distiller",
            distill_extra={"chat_template_kwargs": {"enable_thinking": False}},
            distill_max_tokens=333,
        )
        async with client, LLMClient(distiller.base_url, "x", retry=FAST) as dclient:
            result = await RSE(client, encoder, cfg, distill_client=dclient).solve(PROBLEM)
    assert not any(is_distill(b) for b in policy.requests)
    assert len(distiller.requests) == 2
    b = distiller.requests[0]
    assert b["model"] == "small-distiller" and b["max_tokens"] == 333
    assert b["chat_template_kwargs"] == {"enable_thinking": False}
    assert result.ledger["roles"]["distill"]["calls"] == 2  # booked in the run's ledger


@pytest.mark.parametrize(
    ("target", "damage"),
    [
        ("latest.json", lambda t: t[: len(t) // 2]),
        ("latest.json", lambda t: '{"round": 1}'),
        ("round-1.json", lambda t: t[: len(t) // 3]),
        ("round-1.json", lambda t: t.replace('"rollouts"', '"rolls"')),
        ("bank-1.json", lambda t: t.replace('"text"', '"txt"', 1)),
    ],
)
async def test_damaged_checkpoint_names_the_file_and_the_remedy(encoder, tmp_path, target, damage):
    async with ScriptedServer(default_reply=reply) as srv:
        client = LLMClient(srv.base_url, "m", retry=FAST)
        async with client:
            await RSE(
                client, encoder, RSEConfig(rounds=1, k=4, **MECHANISM), checkpoint_dir=tmp_path
            ).solve(PROBLEM)
    path = tmp_path / target
    path.write_text(damage(path.read_text()))
    rse = RSE(
        LLMClient("http://127.0.0.1:9/v1", "m"),
        encoder,
        RSEConfig(rounds=2, k=4),
        checkpoint_dir=tmp_path,
    )
    with pytest.raises(ValueError, match=re.escape(str(path))):
        await rse.solve(PROBLEM, resume=True)


@pytest.mark.parametrize("unanimous", [True, False])
async def test_a_settled_first_round_is_not_distilled(encoder, unanimous):
    """Under the settle rule round 1's distillations wait for its vote: a unanimous round
    costs no distillation (nothing reads its bank), a split one is distilled as before (and
    the last round, whose bank is not wanted, is not)."""

    def replies(body: dict, index: int) -> str:
        if is_solve(body) and not unanimous and rollout_index(body) % 2:
            return "7 + 5 = 12, and 2 + 1 = 4 here: \\boxed{41}"  # round 1 splits 2 to 2
        return reply(body, index)  # round 1: four times 32

    async with ScriptedServer(default_reply=replies) as srv:
        result = await solve(
            srv.base_url, encoder, GOLD, settle_margin=1.0, rounds=2, distill_final_round=False,
            skip_settled_distill=True,
        )  # fmt: skip
    distills = [b for b in srv.requests if is_distill(b)]
    first = result.rounds[0]
    if unanimous:
        assert distills == [] and all(x.distill == "skipped" for x in first.rollouts)
        assert result.ledger["roles"].get("distill") is None
    else:
        assert len(distills) == 4 and all(x.distill == "ok" for x in first.rollouts)


async def test_budgeted_rse_pays_no_distillation_for_a_settled_first_round(encoder):
    """Under a token budget (RSEMethod) a unanimous round 1 buys samples, not a bank."""
    from rse_fast.methods import Problem, make_method

    async with ScriptedServer(default_reply=reply) as srv:  # round 1: four times 32
        async with LLMClient(srv.base_url, "scripted") as client:
            method = make_method("rse", encoder=encoder, k=4, max_tokens=256)
            run = await method.run(Problem("p", PROBLEM, gold=GOLD), 6000, client)
    assert run.meta["settled"] is True
    assert not any(is_distill(b) for b in srv.requests)
    assert run.ledger.summary()["roles"].get("distill") is None
    assert len(run.pool) > 4  # what distillation would have cost went on samples


async def test_budgeted_rse_names_the_rounds_its_bank_guided(encoder):
    """``guided_rounds`` lists exactly the rounds whose prompts carried a bank block, so an
    analysis of the bank's effect compares guided samples only (a round after a distillation
    that kept nothing is plain sampling)."""
    from rse_fast.methods import Problem, make_method

    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "scripted") as client:
            config = {"settle_margin": None, "min_support_shown": 1}
            method = make_method("rse", encoder=encoder, k=4, max_tokens=256, config=config)
            run = await method.run(Problem("p", PROBLEM, gold=GOLD), 9000, client)
    shown = [is_guided(b) for b in srv.requests if is_solve(b)]
    per_round = {d["round"]: d["k"] for d in run.meta["rounds_detail"]}
    guided = run.meta["guided_rounds"]
    assert guided and 1 not in guided
    assert sum(shown) == sum(per_round[r] for r in guided)
    assert not any(shown[: per_round[1]])


@pytest.mark.parametrize(("carried", "keep", "last_distilled"), [
    (False, None, False),  # a fresh bank nobody keeps: the last round buys nothing
    (True, None, True),  # a bank carried in is carried on: the last round feeds it
    (True, False, False),  # unless the caller says it is not kept
    (False, True, True),
])  # fmt: skip
async def test_last_round_is_distilled_only_when_the_bank_is_wanted(
    encoder, carried, keep, last_distilled
):
    async with ScriptedServer(default_reply=reply) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, distill_final_round=False)
        bank = ExperienceBank(encoder.dim) if carried else None
        async with rse.client:
            result = await rse.solve(PROBLEM, bank=bank, keep_bank=keep)
    assert all(x.distill != "skipped" for x in result.rounds[0].rollouts)
    assert all((x.distill != "skipped") is last_distilled for x in result.rounds[1].rollouts)


@pytest.mark.parametrize("cache", [None, "llama.cpp"])
async def test_distillation_continues_the_rollout_where_the_server_caches(encoder, cache):
    """By default a distillation continues its rollout's conversation once the server has
    reported cached prompt tokens (its prefix cache then serves the rollout), and pastes the
    rollout into a fresh prompt where no cache was seen (fewer tokens to read there)."""
    server = ScriptedServer(default_reply=reply, prefix_cache=cache)
    async with server as srv:
        rse = make_rse(srv.base_url, encoder, rounds=3, k=4)
        async with rse.client:
            await rse.solve(PROBLEM, gold=GOLD)
            records = list(rse.client.ledger.records)
    distills = [b for b in srv.requests if is_distill(b)]
    continuing = [b["messages"][-2]["role"] == "assistant" for b in distills]
    if cache is None:
        assert distills and not any(continuing)
        return
    assert sum(continuing) >= len(distills) - 4  # round 1 may go before any cache was seen
    late = [r for r in records if r.role == "distill"][4:]
    cached = sum(r.cached_tokens or 0 for r in late) / sum(r.prompt_tokens for r in late)
    assert cached > 0.8, cached


async def test_the_brief_ask_leaves_less_of_a_continued_distillation_uncached(encoder):
    """The same run with the brief ask (rse:brief): its distillations still continue the
    rollout and are still told apart from rollouts; what no cache holds (the ask) shrinks."""
    uncached = {}
    for ask in ("full", "brief"):
        async with ScriptedServer(default_reply=reply, prefix_cache="llama.cpp") as srv:
            rse = make_rse(srv.base_url, encoder, rounds=3, k=4, distill_ask=ask)
            async with rse.client:
                await rse.solve(PROBLEM, gold=GOLD)
                late = [r for r in rse.client.ledger.records if r.role == "distill"][4:]
        distills = [b for b in srv.requests if is_distill(b)][4:]
        assert late and all(b["messages"][-2]["role"] == "assistant" for b in distills)
        uncached[ask] = sum(r.prompt_tokens - (r.cached_tokens or 0) for r in late) / len(late)
    assert uncached["brief"] < 0.6 * uncached["full"], uncached


async def test_the_primed_ask_rides_in_every_rollout_and_leaves_a_cue_to_prefill(encoder):
    """rse:primed: every rollout's system turn carries the whole ask, ahead of any bank block,
    so the continued distillation ends in a one-line cue; its distillations still parse into
    a bank, and what no cache holds shrinks to the cue."""
    uncached, banks = {}, {}
    for ask in ("full", "primed"):
        async with ScriptedServer(default_reply=reply, prefix_cache="llama.cpp") as srv:
            rse = make_rse(srv.base_url, encoder, rounds=3, k=4, distill_ask=ask)
            async with rse.client:
                result = await rse.solve(PROBLEM, gold=GOLD)
                late = [r for r in rse.client.ledger.records if r.role == "distill"][4:]
        banks[ask] = result.bank_sizes
        solves = [b for b in srv.requests if is_solve(b)]
        distills = [b for b in srv.requests if is_distill(b)]
        cfg = rse.config
        preamble = primed_preamble(
            cfg.max_experiences_per_rollout, cfg.max_words_per_experience, cfg.distill_format
        )
        primed = [b["messages"][0]["content"].startswith(f"{SOLVE_SYSTEM}\n\n{preamble}")
                  for b in solves]  # fmt: skip
        assert all(primed) if ask == "primed" else not any(primed)
        cues = [b["messages"][-1]["content"].startswith(PRIMED_CUE) for b in distills]
        assert all(cues) if ask == "primed" else not any(cues)
        assert distills and all(b["messages"][-2]["role"] == "assistant" for b in distills)
        uncached[ask] = sum(r.prompt_tokens - (r.cached_tokens or 0) for r in late) / len(late)
    assert banks["primed"] == banks["full"]
    assert uncached["primed"] < 0.3 * uncached["full"], uncached


async def test_a_primed_run_with_another_distiller_primes_nothing(encoder):
    """With a separate distillation endpoint no cache joins rollout and distillation: the
    rollouts carry no ask and the distiller gets the full one in a fresh prompt."""
    async with (
        ScriptedServer(default_reply=reply) as rollouts,
        ScriptedServer(default_reply=reply) as distiller,
    ):
        client = LLMClient(rollouts.base_url, "policy", retry=FAST)
        cfg = RSEConfig(rounds=2, k=4, **MECHANISM, distill_ask="primed")
        async with client, LLMClient(distiller.base_url, "x", retry=FAST) as dclient:
            await RSE(client, encoder, cfg, distill_client=dclient).solve(PROBLEM, gold=GOLD)
    preamble = primed_preamble(
        cfg.max_experiences_per_rollout, cfg.max_words_per_experience, cfg.distill_format
    )
    systems = [b["messages"][0]["content"] for b in rollouts.requests]
    assert len(systems) == 8 and not any(preamble in s for s in systems)
    assert sum(s == SOLVE_SYSTEM for s in systems) == 4  # round 1; round 2 shows the bank
    asks = [b["messages"][-1]["content"] for b in distiller.requests]
    assert asks and all("propositions" in a and PRIMED_CUE not in a for a in asks)


@pytest.mark.parametrize("fields", [{"distill_continues": False}, {"distill_mode": "batch"}])
def test_the_primed_ask_needs_a_distillation_that_continues_the_rollout(fields):
    with pytest.raises(ValueError, match="distill_ask='primed'"):
        RSEConfig(distill_ask="primed", **fields)


@pytest.mark.parametrize("fields", [{"use_json_schema": False}, {"distill_mode": "batch"}])
def test_the_brief_ask_needs_the_schema_to_give_the_reply_its_shape(fields):
    with pytest.raises(ValueError, match="distill_ask='brief'"):
        RSEConfig(distill_ask="brief", **fields)


async def test_a_budgeted_run_resumes_where_it_was_cut_and_spends_as_if_never_cut(
    encoder, tmp_path
):
    """RSE under a cap, checkpointed: cut in round 3, resumed, it runs only round 3 (seeded
    as the uninterrupted run's, shown the bank), the earlier rounds' calls booked in its
    ledger and its cap, and ends where the uninterrupted run ends. Another budget is refused."""
    from rse_fast.methods import Problem

    def fail_round_three(i, body):
        late = is_solve(body) and (body.get("seed") or 0) >= 8
        return Fault("status", status=503) if late else None

    def method(**kw):
        return RSEMethod(encoder=encoder, k=4, max_rounds=3, config=MECHANISM,
                         budget_mode="cap", **kw)  # fmt: skip

    problem, budget, ckpt = Problem("p", PROBLEM, GOLD), 9000, tmp_path / "ckpt"
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "scripted", retry=FAST) as c:
            whole = await method().run(problem, budget, c)
    assert whole.rounds is not None and len(whole.rounds) == 3
    async with ScriptedServer(default_reply=reply, faults=fail_round_three) as srv:
        async with LLMClient(srv.base_url, "scripted", retry=FAST) as c:
            with pytest.raises(RoundFailedError, match="round 3"):
                await method(checkpoint_dir=ckpt).run(problem, budget, c)
    assert json.loads((ckpt / "latest.json").read_text())["round"] == 2
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "scripted", retry=FAST) as c:
            with pytest.raises(ValueError, match="made under a budget of 9000 tokens"):
                await method(checkpoint_dir=ckpt, resume=True).run(problem, 8000, c)
            resumed = await method(checkpoint_dir=ckpt, resume=True).run(problem, budget, c)
    solves = [b for b in srv.requests if is_solve(b)]
    assert sorted(b["seed"] for b in solves) == [8, 9, 10, 11]
    assert all(PITFALL in prompt_of(b) for b in solves)
    assert resumed.rounds is not None and len(resumed.rounds) == 3
    assert resumed.meta["answer_per_round"] == whole.meta["answer_per_round"]
    assert resumed.meta["guided_rounds"] == whole.meta["guided_rounds"] == [3]
    assert resumed.ledger.total_tokens == whole.ledger.total_tokens <= budget
    assert resumed.final is not None and resumed.final.answer == whole.final.answer
    latest = json.loads((ckpt / "latest.json").read_text())["round"]
    saved = json.loads((ckpt / f"round-{latest}.json").read_text())
    saved["state"]["shown_bank"] = "from another version"
    (ckpt / f"round-{latest}.json").write_text(json.dumps(saved))
    async with ScriptedServer(default_reply=reply) as srv:
        async with LLMClient(srv.base_url, "scripted", retry=FAST) as c:
            with pytest.raises(ValueError, match="loop state this version cannot read"):
                await method(checkpoint_dir=ckpt, resume=True).run(problem, budget, c)


async def test_progress_counts_the_distillations_that_were_done(encoder):
    """A round whose rollouts were all distilled says so (it printed 0/k while the bank grew)."""
    seen = []
    async with ScriptedServer(default_reply=reply) as srv:
        rse = make_rse(srv.base_url, encoder, rounds=2, k=3)
        rse.progress = seen.append
        async with rse.client:
            result = await rse.solve(PROBLEM, gold=GOLD)
    done = [p for p in seen if p.round_done]
    distilled = [sum(x.distill == "ok" for x in r.rollouts) for r in result.rounds]
    assert distilled[0] == 3 and [p.distills_done for p in done] == distilled


def distiller_names_one_step_twice(body: dict, index: int) -> str:
    """A small distiller's habit: the same correct step filed as a proposition by some
    rollouts and as a pitfall by others (which, by the request's seed)."""
    if is_distill(body):
        step = "Adding 27 and 15 gives the total of the two numbers."
        other = "Forgetting to carry the ten when adding the units."
        if int(body.get("seed") or 0) % 3 == 0:
            return json.dumps({"positive": [], "negative": [step, other]})
        return json.dumps({"positive": [step], "negative": [other]})
    return reply(body, index)


async def test_no_statement_is_filed_under_both_names_over_ten_seeded_runs(encoder):
    for seed in range(10):
        async with ScriptedServer(default_reply=distiller_names_one_step_twice) as srv:
            rse = make_rse(srv.base_url, encoder, rounds=3, k=4, seed=seed)
            async with rse.client:
                result = await rse.solve(PROBLEM, gold=GOLD, keep_bank=True)
        items = rse.bank.items
        negatives = {e.text for e in items["negative"]}
        positives = {e.text for e in items["positive"]}
        assert not negatives & positives, seed
        step = "Adding 27 and 15 gives the total of the two numbers."
        assert (step in negatives) != (step in positives), seed  # under one name, not lost
        conflicts = [d for r in result.rounds for d in r.decisions if d.conflict]
        assert conflicts, seed  # the rule was exercised, not dodged


async def test_a_solves_state_is_its_own_value_rebuilt_whole_from_its_rounds(encoder):
    """Two solves on one engine at once keep apart what their rollouts left (the engine
    holds no solve's state), and what a solve remembers is rebuilt from its rounds alone, as
    a resume rebuilds it."""
    from rse_fast.rse.bank import ExperienceBank as Bank
    from rse_fast.rse.loop import unbounded
    from rse_fast.rse.settling import Memory

    async with ScriptedServer(default_reply=reply) as srv:
        rse = make_rse(srv.base_url, encoder, bank_follows_vote=True, confidence_top_logprobs=5)
        solves = [
            rse.run_loop(PROBLEM, unbounded(rse.client), Bank(encoder.dim), keep_bank=keep)
            for keep in (True, None)
        ]
        async with rse.client:
            one, two = await asyncio.gather(*solves)
    assert one.memory is not two.memory and one.memory.keep_bank and two.memory.keep_bank is None
    assert len(one.memory.sides) == sum(len(r.rollouts) for r in one.rounds) > 0
    assert one.memory.agreeing and one.memory.agreeing <= set(one.memory.sides)
    for solve in (one, two):
        keep = solve.memory.keep_bank
        assert await Memory.recalled(solve.rounds, True, keep) == solve.memory
