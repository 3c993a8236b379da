"""The service's TTS side: parse ``<method>:<model>`` requests, bound them by the server's caps,
and run them on the upstreams.

A method request honours or refuses each OpenAI field, never ignores one: a field a method
cannot honour (``n`` > 1, ``stop``, ``response_format``, ``tools``, ``logprobs``, …) gets a 400
naming it and the method, and so does a field only another family declares (each family's
``request_fields``); ``stream_options.include_usage`` is honoured (the usage chunk is sent
only when asked). ``sc:`` honours ``tools``: it samples the conversation as sent and votes over
the tool calls (``tool_vote``: ``arguments`` by default, or ``name``). Every method, ``rse``
included, runs in ``cap`` mode: its usage never ends above its ``budget`` (a request without
one gets ``--default-budget-tokens``), and a budget below one useful call is a 400 naming
``budget`` and the minimum.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rse_fast.errors import BudgetTooSmallError, RequestError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.cost import TOKENS, CostModel
from rse_fast.llm.ledger import Ledger
from rse_fast.methods import METHODS, PriorStore, Problem, make_method
from rse_fast.methods.request_fields import RequestField, RunReport

#: every family of the catalog, by the name a model prefix gives it
METHOD_PREFIXES = tuple(METHODS)
Progress = Callable[[dict[str, Any]], None]
#: What self-consistency honours on top: agentic requests, voted over their tool calls.
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
#: Fields a method cannot honour, and the value that means "not used" (then accepted).
REFUSED_UNLESS = {"n": 1, "stop": None, "response_format": None, "tools": None, "tool_choice": None,
                  "logprobs": False, "top_logprobs": None, "logit_bias": None,
                  "presence_penalty": 0, "frequency_penalty": 0, "parallel_tool_calls": None,
                  "audio": None, "modalities": None, "prediction": None, "top_p": 1,
                  "reasoning_effort": None, "web_search_options": None}  # fmt: skip


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
    k: int = 4
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
    #: the family's own fields (its ``request_fields``), validated, defaults filled in
    options: dict[str, Any] = field(default_factory=dict)
    #: a code problem: the function the user message's stub defines, and the examples it
    #: may be checked on while solving (default: those its docstring states)
    entry_point: str | None = None
    visible_tests: tuple[Any, ...] | None = None


@dataclass
class Outcome:
    completion: dict[str, Any]
    tokens_by_role: dict[str, int] = field(default_factory=dict)
    #: what the run adds to its family's counter in the metrics (None: the family keeps none)
    report: RunReport | None = None


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
    tools = _tools(body, prefix)
    options = family_options(body, prefix, caps)
    entry_point, visible = _code_problem(body)
    unit, budget = _budget(body, caps)
    default_tokens = min(1024, caps.max_tokens)  # a default never trips the cap
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default_tokens))
    return MethodRequest(
        method=prefix,
        model=model,
        upstream_model=upstream,
        problem="\n\n".join(texts),
        k=_number(body, "k", int, 4, 1, caps.max_k, "--max-k"),
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
        options=options,
        entry_point=entry_point,
        visible_tests=tuple(visible) if visible is not None else None,
    )


def _tools(body: dict[str, Any], prefix: str) -> list[Any] | None:
    """The request's tools, for a family that takes them."""
    tools = body.get("tools") if METHODS[prefix].takes_tools else None
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
    ):
        raise RequestError("'tools' must be a list of tool objects", param="tools")
    return tools


def family_options(body: dict[str, Any], prefix: str, caps: Caps) -> dict[str, Any]:
    """The family's declared fields, each validated (its default where left out; None where
    a nullable one is sent as null). A field another family declares is refused, naming the
    families that take it: a method request never ignores a field."""
    family = METHODS[prefix]
    own = {f.name for f in family.request_fields}
    for name in declared_fields().keys() - own:
        if body.get(name) not in (None, False):
            takers = ", ".join(declared_fields()[name])
            raise RequestError(
                f"'{name}' is not an option of method '{prefix}' (methods that take it: {takers})",
                param=name,
            )
    return {f.name: field_value(body, f, caps) for f in family.request_fields}


@functools.cache
def declared_fields() -> dict[str, tuple[str, ...]]:
    """Every family's request fields, each with the families that declare it."""
    takers: dict[str, list[str]] = {}
    for name, family in METHODS.items():
        for f in family.request_fields:
            takers.setdefault(f.name, []).append(name)
    return {name: tuple(sorted(names)) for name, names in takers.items()}


def field_value(body: dict[str, Any], spec: RequestField, caps: Caps) -> Any:
    """One declared field's value from the request, or a ``RequestError`` naming it."""
    if spec.name not in body:
        return spec.default
    value = body[spec.name]
    if value is None and spec.nullable:
        return None
    if spec.choices:
        if value not in spec.choices:
            raise RequestError(
                f"'{spec.name}' must be {' or '.join(repr(c) for c in spec.choices)}, "
                f"got {value!r}",
                param=spec.name,
            )
        return value
    if spec.kind is bool:
        if not isinstance(value, bool):
            raise RequestError(
                f"'{spec.name}' must be true or false, got {value!r}", param=spec.name
            )
        return value
    lo = -math.inf if spec.lo is None else spec.lo
    hi, flag = math.inf if spec.hi is None else spec.hi, ""
    if spec.cap is not None:
        hi, flag = getattr(caps, spec.cap), "--" + spec.cap.replace("_", "-")
    return _number(body, spec.name, spec.kind, spec.default, lo, hi, flag)


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
    request = {"k": spec.k, **spec.options}
    options.update(family.request_options(request, encoder=encoder, progress=progress))
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
    return Outcome(completion, roles, method.run_report(res))
