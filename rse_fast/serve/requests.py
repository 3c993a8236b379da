"""The service's TTS side: parse ``<method>:<model>`` requests, bound them by the server's caps,
and run them on the upstreams.

A method request honours or refuses each OpenAI field, never ignores one: a field a method
cannot honour (``n`` > 1, ``stop``, ``response_format``, ``tools``, ``logprobs``, …) gets a 400
naming it and the method; ``stream_options.include_usage`` is honoured (the usage chunk is sent
only when asked). ``sc:`` honours ``tools``: it samples the conversation as sent and votes over
the tool calls (``tool_vote``: ``arguments`` by default, or ``name``). Every method, ``rse``
included, runs in ``cap`` mode: its usage never ends above its ``budget`` (a request without
one gets ``--default-budget-tokens``), and a budget below one useful call is a 400 naming
``budget`` and the minimum.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rse_fast.errors import BudgetTooSmallError, RequestError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import TOKENS, CostModel
from rse_fast.llm.ledger import Ledger
from rse_fast.methods import METHODS, PriorStore, Problem, make_method

#: every family of the catalog, by the name a model prefix gives it
METHOD_PREFIXES = tuple(METHODS)
Progress = Callable[[dict[str, Any]], None]
#: Fields a method request may carry (beyond the method's own: rounds, k, tau, budget, ...).
HONOURED = {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
            "temperature", "seed", "user", "metadata"}  # fmt: skip
METHOD_FIELDS = {"rounds", "k", "tau", "budget", "rse_details", "tool_vote", "settle_margin",
                 "entry_point", "visible_tests"}  # fmt: skip
#: What self-consistency honours on top: agentic requests, voted over their tool calls.
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
#: Fields a method cannot honour, and the value that means "not used" (then accepted).
REFUSED_UNLESS = {"n": 1, "stop": None, "response_format": None, "tools": None, "tool_choice": None,
                  "logprobs": False, "top_logprobs": None, "logit_bias": None,
                  "presence_penalty": 0, "frequency_penalty": 0, "parallel_tool_calls": None,
                  "audio": None, "modalities": None, "prediction": None}  # fmt: skip


@dataclass(frozen=True)
class Caps:
    """Server-side bounds on every method request (``rse-fast serve --max-...``)."""

    max_rounds: int = 16
    max_k: int = 64
    max_tokens: int = 32_768
    max_budget_tokens: int = 1_000_000
    #: the budget of a request that names none: modest, so a bare request cannot spend much
    default_budget_tokens: int = 8_000
    #: the operator's prices (``--price``): with them a request may budget in dollars
    price: CostModel | None = None


@dataclass(kw_only=True)
class MethodRequest:
    method: str
    model: str  # as the caller named it
    upstream_model: str
    problem: str
    rounds: int = 3
    k: int = 4
    tau: float = 0.85
    budget: float = 8000
    #: what ``budget`` counts: tokens, or the operator's price (``"budget_unit": "price"``)
    budget_unit: CostModel = TOKENS
    max_tokens: int = 1024
    temperature: float = 0.6
    seed: int = 0
    details: bool = False
    include_usage: bool = False
    messages: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    tool_vote: str = "arguments"
    settle_margin: float | None = 1.0  # rse: stop guiding once round 1's vote margin is this
    #: sc: stop once the vote is settled at 1 - this (Beta criterion; by default the measured
    #: ε); None: spend the budget
    stop_epsilon: float | None = None
    #: sc: filter and weight the vote by the model's token confidence (asks for logprobs)
    confidence: bool = False
    #: a code problem: the function the user message's stub defines, and the examples it
    #: may be checked on while solving (default: those its docstring states)
    entry_point: str | None = None
    visible_tests: tuple[Any, ...] | None = None


@dataclass
class Outcome:
    completion: dict[str, Any]
    tokens_by_role: dict[str, int] = field(default_factory=dict)
    #: rse only: whether a bank block reached any prompt (None for other methods)
    bank_shown: bool | None = None


def _number(
    body: dict[str, Any], name: str, kind: type, default: Any, lo: float, hi: float, cap: str = ""
) -> Any:
    value = body.get(name, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or value < lo:
        raise RequestError(f"'{name}' must be a number in [{lo}, {hi}], got {value!r}", param=name)
    if value > hi:
        where = f" (the server's cap {cap})" if cap else ""
        raise RequestError(f"'{name}' is {value}, over the maximum {hi}{where}", param=name)
    return kind(value)


def _refuse_unhonoured(body: dict[str, Any], method: str) -> None:
    for name, neutral in REFUSED_UNLESS.items():
        if METHODS[method].takes_tools and name in TOOL_FIELDS:
            continue
        if name in body and body[name] is not None and body[name] != neutral:
            raise RequestError(
                f"'{name}' is not supported by method '{method}' (only by plain model names, "
                "which pass straight through)",
                param=name,
            )
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise RequestError("'stream_options' may only set include_usage", param="stream_options")


def parse_method_request(body: dict[str, Any], caps: Caps | None = None) -> MethodRequest | None:
    """None for a plain model name (pass-through); otherwise the validated method request."""
    caps = caps or Caps()
    model = body["model"]
    prefix, sep, upstream = model.partition(":")
    if not sep or prefix not in METHOD_PREFIXES:
        return None
    if not upstream:
        raise RequestError(
            f"model {model!r} names no upstream model after '{prefix}:'", param="model"
        )
    _refuse_unhonoured(body, prefix)
    texts = [m.get("content") for m in body["messages"] if m.get("role") == "user"]
    if not texts or not all(isinstance(t, str) for t in texts) or not any(t.strip() for t in texts):
        raise RequestError(
            "method requests need user messages with non-empty text content", param="messages"
        )
    tools, tool_vote = _tools(body, prefix)
    settle = body.get("settle_margin", 1.0)
    if settle is not None:
        settle = _number(body, "settle_margin", float, 1.0, 0.001, 1.0)
    stop_epsilon, confidence = _stop_and_confidence(body, prefix)
    entry_point, visible = _code_problem(body)
    unit, budget = _budget(body, caps)
    default_tokens = min(1024, caps.max_tokens)  # a default never trips the cap
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default_tokens))
    return MethodRequest(
        method=prefix,
        model=model,
        upstream_model=upstream,
        problem="\n\n".join(texts),
        rounds=_number(body, "rounds", int, 3, 1, caps.max_rounds, "--max-rounds"),
        k=_number(body, "k", int, 4, 1, caps.max_k, "--max-k"),
        tau=_number(body, "tau", float, 0.85, -0.999, 1.0),
        budget=budget,
        budget_unit=unit,
        max_tokens=_number(
            {"max_tokens": max_tokens}, "max_tokens", int, 1024, 1, caps.max_tokens, "--max-tokens"
        ),
        temperature=_number(body, "temperature", float, 0.6, 0.0, 2.0),
        seed=_number(body, "seed", int, 0, 0, 2**31 - 1),
        details=bool(body.get("rse_details", False)),
        include_usage=bool((body.get("stream_options") or {}).get("include_usage", False)),
        messages=tuple(body["messages"]) if tools else (),
        tools=tuple(tools or ()),
        tool_choice=body.get("tool_choice") if tools else None,
        tool_vote=tool_vote,
        settle_margin=settle,
        stop_epsilon=stop_epsilon,
        confidence=confidence,
        entry_point=entry_point,
        visible_tests=tuple(visible) if visible is not None else None,
    )


def _tools(body: dict[str, Any], prefix: str) -> tuple[list[Any] | None, str]:
    """The request's tools (for a family that takes them) and how their calls are voted."""
    tools = body.get("tools") if METHODS[prefix].takes_tools else None
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
    ):
        raise RequestError("'tools' must be a list of tool objects", param="tools")
    tool_vote = body.get("tool_vote", "arguments")
    if tool_vote not in ("name", "arguments"):
        raise RequestError(
            f"'tool_vote' must be 'name' or 'arguments', got {tool_vote!r}", param="tool_vote"
        )
    return tools, tool_vote


def _stop_and_confidence(body: dict[str, Any], prefix: str) -> tuple[float | None, bool]:
    """The statistical stop's ε (the family's measured default when left out; off when sent
    as null) and whether confidence is asked for, each refused by a family without it."""
    for name in ("stop_epsilon", "confidence"):
        if body.get(name) not in (None, False) and name not in METHODS[prefix].request_fields:
            takers = sorted(m for m in METHOD_PREFIXES if name in METHODS[m].request_fields)
            raise RequestError(
                f"'{name}' is not an option of method '{prefix}' (methods that take it: "
                f"{', '.join(takers)})",
                param=name,
            )
    stop_epsilon = body.get("stop_epsilon", METHODS[prefix].service_defaults.get("stop_epsilon"))
    if stop_epsilon is not None:
        stop_epsilon = _number(
            {"stop_epsilon": stop_epsilon}, "stop_epsilon", float, None, 1e-4, 0.5
        )
    confidence = body.get("confidence", False)
    if not isinstance(confidence, bool):
        raise RequestError(
            f"'confidence' must be true or false, got {confidence!r}", param="confidence"
        )
    return stop_epsilon, confidence


def _code_problem(body: dict[str, Any]) -> tuple[str | None, list[Any] | None]:
    """A code problem's entry point and the examples it states (both optional)."""
    entry_point = body.get("entry_point")
    if entry_point is not None and (
        not isinstance(entry_point, str) or not entry_point.isidentifier()
    ):
        raise RequestError(
            f"'entry_point' must be a function name, got {entry_point!r}", param="entry_point"
        )
    visible = body.get("visible_tests")
    if visible is not None and (entry_point is None or not isinstance(visible, list)):
        raise RequestError(
            "'visible_tests' is a list of examples, e.g. [\"f(2) == 4\"], sent with 'entry_point'",
            param="visible_tests",
        )
    return entry_point, visible


def _budget(body: dict[str, Any], caps: Caps) -> tuple[CostModel, float]:
    """The request's budget and its unit: tokens (default), or dollars at the operator's
    price, at most what buys ``--max-budget-tokens`` of the dearer kind of token."""
    unit = body.get("budget_unit", "tokens")
    if unit == "tokens":
        budget = _number(
            body, "budget", int, min(caps.default_budget_tokens, caps.max_budget_tokens), 1,
            caps.max_budget_tokens, "--max-budget-tokens",
        )  # fmt: skip
        return TOKENS, budget
    if unit != "price":
        raise RequestError(
            f"'budget_unit' is 'tokens' or 'price', got {unit!r} (a budget in time cannot be "
            "capped, and the service's budget is a cap)",
            param="budget_unit",
        )
    if caps.price is None:
        raise RequestError(
            "'budget_unit' 'price' needs the service's prices, and none are set (the operator "
            "starts it with --price input=…,output=…)",
            param="budget_unit",
        )
    if "budget" not in body:
        raise RequestError("a budget in price names its amount: 'budget' in $", param="budget")
    most = caps.max_budget_tokens * max(caps.price.token_rates())
    return caps.price, _number(body, "budget", float, None, 1e-9, most, "--max-budget-tokens")


def usage_of(ledger: Ledger) -> dict[str, Any]:
    """OpenAI's usage over every call the method made, with the details the upstream
    reported (its cache's share of the prompt, the completion's thinking)."""
    prompt, completion = ledger.prompt_tokens, ledger.completion_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **ledger.usage_details(),
    }


def request_problem(spec: MethodRequest) -> Problem:
    """The problem a request poses: a code problem where it names an ``entry_point`` (its
    examples checked in the sandbox while solving), else the conversation as given."""
    if spec.entry_point is not None:
        from rse_fast.eval.datasets import request_code_problem

        stated = list(spec.visible_tests) if spec.visible_tests is not None else None
        try:
            return request_code_problem(spec.problem, spec.entry_point, stated)
        except ValueError as exc:
            raise RequestError(str(exc), param="visible_tests") from None
    return Problem(
        "request",
        spec.problem,
        conversation=spec.messages,
        tools=spec.tools,
        tool_choice=spec.tool_choice,
    )


def unspent_of(spec: MethodRequest, res: Any) -> dict[str, Any]:
    """What a stop left of the budget, in its unit (and, in price, what was spent), and
    which stop rule ran and whether it stopped the run."""
    stop = res.meta.get("early_stop")
    rule = {"stop_rule": stop["rule"], "stopped": stop["stopped"]} if stop else {}
    if spec.budget_unit.unit == "tokens":
        return {"budget_unspent": max(0, int(spec.budget) - res.tokens), **rule}
    cost = res.meta["cost"]
    return {
        "budget_unspent": cost["unspent"],
        "cost": {"unit": cost["unit"], "spent": cost["spent"]},
        **rule,
    }


#: What earlier requests measured per (upstream, model, method, completion cap): every request
#: builds its own method, which would otherwise size its first wave from the completion cap.
PRIORS = PriorStore()


async def run_method(
    client: LLMClient, spec: MethodRequest, encoder: Any, progress: Progress | None
) -> Outcome:
    """Run the method on its own ledger view of ``client`` within ``spec.budget`` tokens."""
    view = client.with_options(model=spec.upstream_model)  # the method meters its own ledger
    options: dict[str, Any] = dict(
        parallel=spec.k,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        seed=spec.seed,
        budget_mode="cap",  # the service's promise: usage never above the budget
        budget_unit=spec.budget_unit,
    )
    family = METHODS[spec.method]
    options.update(family.request_options(asdict(spec), encoder=encoder, progress=progress))
    if progress and not family.reports_progress:
        progress({"method": spec.method, "status": "started", "budget": spec.budget})
    method = make_method(spec.method, **options).keep_priors(PRIORS)
    problem = request_problem(spec)
    try:
        method.check_problem(problem)
    except ValueError as exc:  # the family cannot take this problem: the caller's to fix
        hint = "" if spec.entry_point else "; a code problem sends 'entry_point'"
        raise RequestError(f"{exc}{hint}", param="model") from None
    try:
        res = await method.run(problem, spec.budget, view)
    except BudgetTooSmallError as exc:
        raise RequestError(str(exc), param="budget") from None
    text = res.final.text if res.final else ""
    calls = list(res.final.tool_calls) if res.final else []
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if res.final is not None and res.final.reasoning:
        # the chosen answer's own trace, where a thinking model's upstream sent one
        message["reasoning_content"] = res.final.reasoning
    if calls:
        message["tool_calls"] = calls
    details: dict[str, Any] = {
        "method": spec.method,
        "answer": res.final.answer if res.final else None,
        "budget": spec.budget,
        "tokens": res.tokens,
        "pool": len(res.pool),
    }
    details.update(method.reply_details(res))
    completion: dict[str, Any] = {
        "id": f"chatcmpl-rse-{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": spec.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        # usage is what the ledger booked; a stop leaves the rest of the budget unspent
        "usage": {**usage_of(res.ledger), **unspent_of(spec, res)},
    }
    if spec.details:
        completion["rse_fast"] = details
    roles = {k: v.total_tokens for k, v in res.ledger.by_role().items()}
    return Outcome(completion, roles, method.bank_shown(res))
