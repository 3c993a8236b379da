"""Sampling shared by the families: one sample (with its confidence, or stopped mid-stream by
the online rule), what a sample costs, and a pool cut to a smaller budget (SC and best-of-N
generate once at the largest budget and are subsampled for the smaller ones)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rse_fast.answers.confidence import rollout_confidence, token_confidences
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import CostModel
from rse_fast.llm.ledger import Ledger
from rse_fast.methods.base import Method, prompt_cost
from rse_fast.methods.types import Candidate, MethodResult, Problem
from rse_fast.methods.voting import (
    ConfidenceRule,
    OnlineGate,
)


async def sample(
    method: Method,
    client: LLMClient,
    problem: Problem,
    i: int,
    role: str = "explore",
    confidence: ConfidenceRule | None = None,
    on_logprobs: Callable[[Any], None] | None = None,
) -> Candidate:
    """One sample. With a ``confidence`` rule the call asks for the top-k logprobs and the
    candidate's ``confidence`` score is the rule's measure (absent when the server sent none);
    ``on_logprobs`` sees them too (the online rule's warm-up)."""
    res = await client.chat(
        problem.messages(),
        role=role,
        task=f"c{i}",
        seed=method.seed + i,
        temperature=method.temperature,
        max_tokens=method.max_tokens,
        tools=list(problem.tools) or None,
        tool_choice=problem.tool_choice if problem.tools else None,
        logprobs=True if confidence else None,
        top_logprobs=confidence.top_logprobs if confidence else None,
    )
    cand = problem.candidate(
        res.text,
        cost=res.usage.total_tokens,
        completion_tokens=res.usage.completion_tokens,
        origin="sample",
        tool_calls=res.choices[0].tool_calls if res.choices else (),
        reasoning=res.reasoning,
    )
    if confidence is not None and res.choices:
        score = confidence.score(res.choices[0].logprobs)
        if score is not None:
            cand.scores["confidence"] = score
        if on_logprobs is not None:
            on_logprobs(res.choices[0].logprobs)
    return cand


async def sample_online(
    method: Method, client: LLMClient, problem: Problem, i: int, gate: OnlineGate
) -> Candidate:
    """One sample under DeepConf's online rule: before the threshold is set (the first wave)
    a plain sample that teaches the gate; after it, a streamed one stopped the moment its
    window confidence falls below the threshold. A stopped sample's tokens are booked (the
    stream's estimate) and it has no answer, so it does not vote."""
    if not gate.ready():
        return await sample(
            method, client, problem, i, confidence=gate.rule, on_logprobs=gate.learn
        )
    return await sample_streamed(method, client, problem, i, gate.rule, gate)


async def sample_streamed(
    method: Method,
    client: LLMClient,
    problem: Problem,
    i: int,
    confidence: ConfidenceRule | None = None,
    gate: OnlineGate | None = None,
) -> Candidate:
    """One sample, streamed: what a stop that cancels it had cost is what it had streamed
    (a whole-reply call cancelled is booked at its reservation, since the server may go on
    generating). With a ``gate``, stopped the moment its window confidence falls below the
    gate's threshold (no answer then, so no vote)."""
    text: list[str] = []
    thought: list[str] = []
    confidences: list[float] = []
    stream = client.stream(
        problem.messages(),
        role="explore",
        task=f"c{i}",
        seed=method.seed + i,
        temperature=method.temperature,
        max_tokens=method.max_tokens,
        logprobs=True if confidence else None,
        top_logprobs=confidence.top_logprobs if confidence else None,
    )
    stopped = False
    try:
        async for event in stream:
            text.append(event.delta)
            thought.append(event.reasoning)
            confidences += token_confidences(event.logprobs) or []
            if gate is not None and gate.unsure(confidences):
                stopped = True
                break
    finally:
        await stream.aclose()
    cost = task_tokens(client.ledger, f"c{i}")  # this sample's calls alone
    if stopped and gate is not None:
        gate.stopped += 1
        return Candidate(text="".join(text), cost=cost, origin="stopped-unsure")
    cand = problem.candidate(
        "".join(text), cost=cost, origin="sample", reasoning="".join(thought) or None
    )
    if confidence is not None:
        summary = rollout_confidence(confidences, confidence.window, confidence.window)
        if summary is not None:
            cand.scores["confidence"] = summary.measure(confidence.measure)
    return cand


def sample_cost(method: Method, client: LLMClient, problem: Problem) -> float:
    """The estimate a first wave starts from: the prompt as counted plus the completion cap.
    ``Method.planned_cost`` scales it by how far such estimates were off in earlier runs (one
    correction on a fixed basis, so it does not compound with another prior)."""
    return prompt_cost(client, problem.messages()) + method.max_tokens


def prefix_within(
    pool: list[Candidate], budget: float, costs: list[float] | None = None
) -> list[Candidate]:
    """The longest prefix whose cost is nearest to ``budget`` (at least one candidate);
    ``costs``: each candidate's cost in the budget's unit (default: its tokens)."""
    total, best, best_err = 0.0, 1, float("inf")
    for i, cost in enumerate(costs if costs is not None else [c.cost for c in pool], 1):
        total += cost
        if abs(total - budget) < best_err:
            best, best_err = i, abs(total - budget)
        if total > budget:
            break
    return pool[:best]


@dataclass(frozen=True)
class PoolCut:
    """A pool cut to a smaller budget: the prefix, its calls, and the budget in tokens (a
    budget in another unit at the rate the cut part actually cost)."""

    pool: list[Candidate]
    ledger: Ledger
    tokens: int


def cut_within(full: MethodResult, budget: float, unit: CostModel) -> PoolCut:
    """``full``'s pool cut to the prefix whose cost in ``unit`` is nearest to ``budget``: a
    price or time budget counts each candidate's own calls (its cached prompt tokens, its
    seconds), so the cut lands where a run at that budget would have stopped."""
    if unit.unit == "tokens":
        pool = prefix_within(full.pool, budget)
        return PoolCut(pool, sub_ledger(full.ledger, pool), int(budget))
    by_task = full.ledger.cost_by_task(unit.of_record)
    costs = [by_task.get(f"c{i}", 0.0) for i in range(len(full.pool))]
    pool = prefix_within(full.pool, budget, costs)
    ledger = sub_ledger(full.ledger, pool)
    spent = unit.of_ledger(ledger)
    tokens = round(budget * ledger.total_tokens / spent) if spent > 0 else ledger.total_tokens
    return PoolCut(pool, ledger, tokens)


def task_tokens(ledger: Ledger, task: str) -> int:
    return ledger.tokens_of(task=task)


def sub_ledger(ledger: Ledger, pool: list[Candidate]) -> Ledger:
    """The records of the first ``len(pool)`` candidates (their sampling and scoring calls)."""
    return ledger.of_tasks({f"c{i}" for i in range(len(pool))})
