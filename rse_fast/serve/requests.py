"""The service's TTS side: parse ``<method>:<model>`` requests and run them on the upstreams."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rse_fast.errors import RequestError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import Ledger
from rse_fast.methods import Problem, make_method

METHOD_PREFIXES = ("rse", "sc", "bon", "beam", "particle", "refine", "fusion")
Progress = Callable[[dict[str, Any]], None]


@dataclass
class MethodRequest:
    method: str
    model: str  # as the caller named it
    upstream_model: str
    problem: str
    rounds: int = 3
    k: int = 4
    tau: float = 0.85
    budget: int = 8000
    max_tokens: int = 1024
    temperature: float = 0.6
    seed: int = 0
    details: bool = False


@dataclass
class Outcome:
    completion: dict[str, Any]
    tokens_by_role: dict[str, int] = field(default_factory=dict)


def _number(body: dict[str, Any], name: str, kind: type, default: Any, lo: float, hi: float) -> Any:
    value = body.get(name, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or not lo <= value <= hi:
        raise RequestError(f"'{name}' must be a number in [{lo}, {hi}], got {value!r}")
    return kind(value)


def parse_method_request(body: dict[str, Any]) -> MethodRequest | None:
    """None for a plain model name (pass-through); otherwise the validated method request."""
    model = body["model"]
    prefix, sep, upstream = model.partition(":")
    if not sep or prefix not in METHOD_PREFIXES:
        return None
    if not upstream:
        raise RequestError(f"model {model!r} names no upstream model after '{prefix}:'")
    texts = [m.get("content") for m in body["messages"] if m.get("role") == "user"]
    if not texts or not all(isinstance(t, str) for t in texts) or not any(t.strip() for t in texts):
        raise RequestError("method requests need user messages with non-empty text content")
    return MethodRequest(
        method=prefix,
        model=model,
        upstream_model=upstream,
        problem="\n\n".join(texts),
        rounds=_number(body, "rounds", int, 3, 1, 16),
        k=_number(body, "k", int, 4, 1, 64),
        tau=_number(body, "tau", float, 0.85, -0.999, 1.0),
        budget=_number(body, "budget", int, 8000, 100, 10_000_000),
        max_tokens=_number(body, "max_tokens", int, 1024, 1, 1_000_000),
        temperature=_number(body, "temperature", float, 0.6, 0.0, 2.0),
        seed=_number(body, "seed", int, 0, 0, 2**31 - 1),
        details=bool(body.get("rse_details", False)),
    )


def _usage(ledger: Ledger) -> dict[str, int]:
    prompt = sum(r.prompt_tokens for r in ledger.records)
    completion = sum(r.completion_tokens for r in ledger.records)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def run_method(
    client: LLMClient, spec: MethodRequest, encoder: Any, progress: Progress | None
) -> Outcome:
    view = client.with_ledger(Ledger())
    view.model = spec.upstream_model
    details: dict[str, Any] = {"method": spec.method}
    if spec.method == "rse":
        from rse_fast.rse.config import RSEConfig
        from rse_fast.rse.engine import RSE

        cfg = RSEConfig(
            rounds=spec.rounds,
            k=spec.k,
            tau_positive=spec.tau,
            tau_negative=spec.tau,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            seed=spec.seed,
        )
        rse = RSE(
            view, encoder, cfg, progress=(lambda p: progress(asdict(p))) if progress else None
        )
        result = await rse.solve(spec.problem)
        chosen = next(
            (
                x.text
                for r in result.rounds
                for x in r.rollouts
                if x.answer is not None and x.answer == result.answer
            ),
            result.rounds[-1].rollouts[0].text,
        )
        details.update(
            answer=result.answer,
            votes=result.votes,
            rounds=[
                {
                    "round": r.round,
                    "answer": r.answer,
                    "bank_sizes": r.bank_sizes,
                    "accepted": [d.text for d in r.decisions if d.accepted],
                    "answers": r.answers,
                }
                for r in result.rounds
            ],
        )
        text = chosen
    else:
        method = make_method(
            spec.method,
            parallel=spec.k,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            seed=spec.seed,
        )
        if progress:
            progress({"method": spec.method, "status": "started", "budget": spec.budget})
        res = await method.run(Problem("request", spec.problem), spec.budget, view)
        text = res.final.text if res.final else ""
        details.update(
            answer=res.final.answer if res.final else None, pool=len(res.pool), meta=res.meta
        )
    completion: dict[str, Any] = {
        "id": "chatcmpl-rse",
        "object": "chat.completion",
        "model": spec.model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": _usage(view.ledger),
    }
    if spec.details:
        completion["rse_fast"] = details
    roles = {k: v.total_tokens for k, v in view.ledger.by_role().items()}
    return Outcome(completion, roles)
