"""Async OpenAI-compatible chat client (aiohttp): n > 1, usage, streaming, structured output.

Every LLM call of the project goes through :class:`LLMClient`, and every call ends in a
:class:`~rse_fast.llm.types.ChatResult` or a typed :class:`~rse_fast.errors.LLMError`.
Connections, routing and retries live in the one :class:`~rse_fast.llm.transport.Transport`
that a client shares with its ledger views.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import aiohttp

from rse_fast.errors import LLMBadRequestError, LLMError, LLMHTTPError
from rse_fast.llm.booking import CallBooking
from rse_fast.llm.cost import CostModel, ServerSpeed
from rse_fast.llm.fan_out import chat_n
from rse_fast.llm.ledger import Ledger, TokenCounter, approx_token_count
from rse_fast.llm.meter import BudgetCap, PromptMargin
from rse_fast.llm.optional_fields import (
    asks_logprobs,
    chat_json,
    refused_logprobs,
    stream_json,
    without_logprobs,
)
from rse_fast.llm.parse import parse_choices
from rse_fast.llm.prompt_count import PromptCounter
from rse_fast.llm.replies import usage_of
from rse_fast.llm.retry import RetryPolicy
from rse_fast.llm.routing import Endpoint, EndpointPool, EndpointState, as_endpoints
from rse_fast.llm.sample_pool import PooledReply, SamplePool
from rse_fast.llm.streaming import stream_once
from rse_fast.llm.trace import TraceHook, failure_record, reply_record
from rse_fast.llm.transport import Timeouts, Transport, read_json
from rse_fast.llm.types import ChatResult, Message, StreamEvent, Usage

log = logging.getLogger(__name__)

_SOURCE_RANK = {"reported": 0, "estimated": 1, "corrected": 2}


class _Keep:
    """The default of a view option: keep the client's own."""


KEEP = _Keep()


class LLMClient:
    """An OpenAI-compatible chat client over one or many endpoints.

    Args:
        endpoints: a base URL (``http://host:8000/v1``; ``/v1`` is added when missing), an
            :class:`Endpoint`, or a list of them; requests go to the healthy endpoint with the
            fewest requests outstanding.
        model: the model name sent with every request (a call's ``model=`` overrides it).
        api_key: sent as ``Authorization: Bearer …`` to endpoints given as plain URLs.
        timeouts, retry: connect/total/stream-idle timeouts and the backoff policy.
        max_concurrency: requests in flight per endpoint.
        failure_threshold, cooldown_s: an endpoint failing this many times in a row gets no
            traffic for ``cooldown_s`` seconds.
        ledger: where every call's tokens are booked (a new one by default).
        token_counter: text → tokens, to estimate usage a server omits or under-reports;
            without one, ~4 characters per token is assumed and the figure marked estimated.
        trace: called with one dict per HTTP attempt (request, reply or error).

    Example::

        async with LLMClient("http://127.0.0.1:8000/v1", "qwen") as client:
            result = await client.chat([{"role": "user", "content": "2+2?"}], n=4)
            result.texts, result.usage.total_tokens, client.ledger.summary()
    """

    def __init__(
        self,
        endpoints: str | Endpoint | Sequence[str | Endpoint],
        model: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 64,
        failure_threshold: int = 3,
        cooldown_s: float = 5.0,
        ledger: Ledger | None = None,
        token_counter: TokenCounter | None = None,
        trace: TraceHook | None = None,
        price: CostModel | None = None,
    ) -> None:
        self.model = model
        #: what this client's model costs, where it is not the run's model (an external
        #: judge): its calls are reserved, settled and priced at it in a run counting dollars
        self.price = price
        pool = EndpointPool(
            as_endpoints(endpoints, api_key, max_concurrency),
            failure_threshold=failure_threshold,
            cooldown_s=cooldown_s,
        )
        self.trace = trace
        self.transport = Transport(pool, timeouts, retry, on_failure=self.trace_failure)
        self.ledger = ledger if ledger is not None else Ledger()
        self.cap: BudgetCap | None = None  # a cap-mode budget every call draws on
        #: how capped calls reserve their prompts, learned from every reply to any of them
        #: and shared by every view of this client (so by all its runs)
        self.prompt_margin = PromptMargin()
        #: the seconds per token its server has taken, over every run (views share it)
        self.speed = ServerSpeed()
        #: asks the server's tokenizer once, before the first capped call, to seed the margin
        self.prompt_counter = PromptCounter()
        self.count_tokens: TokenCounter = token_counter or approx_token_count
        #: replies shared by request body across the methods of an evaluation (None: every
        #: call goes to the server)
        self.samples: SamplePool | None = None
        #: added to every seed sent (an evaluation gives each problem its own, so sample i
        #: of two problems is not drawn from one random stream)
        self.seed_offset = 0

    @property
    def pool(self) -> EndpointPool:
        return self.transport.pool

    @property
    def identity(self) -> str:
        """Which model behind which servers answers: ``url[,url…]#model`` (no keys), so two
        roles (verifier and grader) can be told apart."""
        urls = ",".join(sorted(s.endpoint.base_url for s in self.pool.states))
        return f"{urls}#{self.model}"

    @property
    def timeouts(self) -> Timeouts:
        return self.transport.timeouts

    @property
    def retry(self) -> RetryPolicy:
        return self.transport.retry

    # -- lifecycle -------------------------------------------------------------------------
    def with_options(
        self,
        *,
        ledger: Ledger | None = None,
        cap: BudgetCap | _Keep | None = KEEP,
        model: str | None = None,
        samples: SamplePool | _Keep | None = KEEP,
        seed_offset: int | None = None,
    ) -> LLMClient:
        """A view of this client (same endpoints, routing state, connections and prompt
        margin) that records into ``ledger``, draws on ``cap`` (``None``: uncapped) and asks
        for ``model``; an option not given is kept. The one way views are made."""
        view = copy.copy(self)
        if ledger is not None:
            view.ledger = ledger
        if model is not None:
            view.model = model
        if not isinstance(cap, _Keep):
            view.cap = cap
        if not isinstance(samples, _Keep):
            view.samples = samples
        if seed_offset is not None:
            view.seed_offset = seed_offset
        return view

    def with_ledger(self, ledger: Ledger) -> LLMClient:
        """A view that records into another ledger: how each method run gets its own count."""
        return self.with_options(ledger=ledger)

    def metered_like(self, run: LLMClient) -> LLMClient:
        """A view of this client that books into ``run``'s ledger and draws on ``run``'s cap:
        how a helper on another client (an external judge) stays inside a run's budget. Its
        calls keep this client's own ``price`` (a judge on another model is billed at its)."""
        return self.with_options(ledger=run.ledger, cap=run.cap, seed_offset=run.seed_offset)

    @property
    def booking(self) -> CallBooking:
        """This view's accounting: its ledger, its cap, the shared prompt margin, its
        model's prices (the transport never touches the cap or the ledger itself)."""
        return CallBooking(self.ledger, self.cap, self.prompt_margin, self.count_tokens,
                           self.price)  # fmt: skip

    async def close(self) -> None:
        """Close the connections (shared with every ``with_ledger`` view)."""
        await self.transport.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public API ------------------------------------------------------------------------
    def build_body(self, messages: Sequence[Message], **params: Any) -> dict[str, Any]:
        """The request body: model, messages, and every sampling field that is not None."""
        if not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
        extra = params.pop("extra", None) or {}
        body: dict[str, Any] = {
            "model": params.pop("model", None) or self.model,
            "messages": list(messages),
        }
        body.update({k: v for k, v in params.items() if v is not None})
        if self.seed_offset and body.get("seed") is not None:
            body["seed"] = (body["seed"] + self.seed_offset) % 2**31
        body.update(extra)
        return body

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        role: str = "explore",
        task: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        response_format: dict[str, Any] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        model: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResult:
        """One chat completion with ``n`` choices, booked in the ledger under ``role``.

        Args:
            messages: OpenAI chat messages.
            n: choices wanted. A server that ignores ``n`` (returns fewer) or rejects it by
                name is remembered, and the missing choices are fetched as single requests
                with distinct seeds; any other rejection is raised once, as the caller's.
            role, task: ledger tags (``explore``, ``distill``, ``judge``, …) and a free label.
            extra: more body fields, sent as given (e.g. ``chat_template_kwargs``).
            The other arguments are the OpenAI fields of the same name (``top_k`` is the
            vLLM/llama.cpp extension); None leaves a field out.

        Returns:
            A :class:`ChatResult`; each choice keeps content, reasoning, tool calls, refusal,
            logprobs and the raw message.

        Raises:
            LLMError: a typed subclass, after retries where retrying can help.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        body = self.build_body(
            messages,
            model=model,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            response_format=response_format,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            tools=tools,
            tool_choice=tool_choice,
            extra=extra,
        )
        if asks_logprobs(body) and self.pool.pick().supports_logprobs is False:
            body = without_logprobs(body)
        return await self._booked(body, n, role, task)

    async def _booked(
        self, body: dict[str, Any], n: int, role: str, task: str | None
    ) -> ChatResult:
        """The call, its worst case reserved first and settled in the booking however it
        ends: answered, answered with an error, unanswered, or cancelled."""
        t0 = time.perf_counter()
        await self.calibrate_capped(body)
        booking = self.booking
        held = booking.reserve(body, n)
        try:
            try:
                result = await chat_n(self, body, n, held)
            except LLMBadRequestError as exc:
                if not refused_logprobs(self.pool, body, exc):
                    raise
                self.ledger.record_error(
                    role, exc, time.perf_counter() - t0, exc.endpoint or "", task
                )
                result = await chat_n(self, without_logprobs(body), n, held)
        except LLMHTTPError as exc:  # the server answered with an error: it generated nothing
            booking.failed(held, role, exc, time.perf_counter() - t0, exc.endpoint or "", task)
            raise
        except LLMError as exc:  # no reply came: what the server did is bounded, not known
            bound = booking.unanswered_bound(body, n, held.estimate)
            booking.failed(
                held, role, exc, time.perf_counter() - t0, exc.endpoint or "", task, bound
            )
            raise
        except BaseException as exc:  # cancelled (a stop no longer waits for it)
            bound = booking.unanswered_bound(body, n, held.estimate)
            booking.failed(held, role, exc, time.perf_counter() - t0, "", task, bound)
            raise
        booking.answered(held, role, result.usage, result.latency_s, result.endpoint, n=n,
                         task=task, requests=result.requests)  # fmt: skip
        return result

    def with_cap(self, cap: BudgetCap | None) -> LLMClient:
        """A view whose calls all draw on ``cap`` (a ``cap``-mode budget): each reserves its
        worst case first, its completion cap cut to the room left, or is refused. Prompts
        are reserved with this client's margin, which earlier runs have widened."""
        if cap is not None:
            cap.margin = self.prompt_margin  # the cap's own default, for callers without one
        return self.with_options(cap=cap)

    async def calibrate_prompt_margin(self, messages: Sequence[Message]) -> None:
        """Ask the server, once per client, how it counts ``messages`` (template included),
        so the first capped call's reservation and a refusal minimum already hold it. A
        no-op once any count has been seen, and where the server has no tokenizer endpoint
        (see :mod:`rse_fast.llm.prompt_count`)."""
        if self.prompt_counter.pending(self.prompt_margin):
            await self._calibrate(self.build_body(messages))

    async def calibrate_capped(self, body: dict[str, Any]) -> None:
        """Before a capped call while the margin still learns: ask the server how it counts
        this prompt, so the first wave's reservations already hold what its chat template
        adds."""
        if self.cap is not None and self.prompt_counter.pending(self.prompt_margin):
            await self._calibrate(body)

    async def _calibrate(self, body: dict[str, Any]) -> None:
        estimate = self.booking.prompt_estimate(body)
        await self.prompt_counter.seed(self.transport, self.prompt_margin, body, estimate)

    def metered_outside(
        self, role: str, usage: Usage, endpoint: str, task: str | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """A call that is not a chat completion (a reward model's HTTP API), metered like
        one (see :meth:`CallBooking.outside`)."""
        return self.booking.outside(role, usage, endpoint, task)

    async def chat_json(
        self, messages: Sequence[Message], schema: dict[str, Any], **params: Any
    ) -> ChatResult:
        """``chat`` with JSON-schema constrained output where the server has it
        (``llm.optional_fields.chat_json``)."""
        return await chat_json(self, messages, schema, **params)

    def stream_json(
        self, messages: Sequence[Message], schema: dict[str, Any], **params: Any
    ) -> AsyncGenerator[StreamEvent, None]:
        """``stream`` with JSON-schema constrained output where the server has it
        (``llm.optional_fields.stream_json``)."""
        return stream_json(self, messages, schema, **params)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        role: str = "explore",
        task: str | None = None,
        include_usage: bool = True,
        **params: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream one choice as :class:`StreamEvent` deltas; the last event has ``done=True``
        and the call's usage (reported, or estimated from the text when the server sent none).

        Every delta kind is yielded: the role chunk, content, reasoning, tool-call fragments,
        and the usage chunk. Retries happen only before the first byte; a stream that breaks
        midway raises :class:`LLMConnectionError`, goes idle :class:`LLMTimeoutError`, and an
        error event from the server :class:`LLMServerError`. A server that refuses the
        logprobs asked for (a 400 naming them, before any event) is asked again without them,
        as :meth:`chat` does.
        """
        body = self.build_body(messages, **params)
        if asks_logprobs(body) and self.pool.pick().supports_logprobs is False:
            body = without_logprobs(body)
        started = False
        try:  # closed with this generator: a caller that stops reading books what streamed
            async with contextlib.aclosing(stream_once(self, body, role, task, include_usage)) as e:
                async for event in e:
                    started = True
                    yield event
            return
        except LLMBadRequestError as exc:  # an HTTP status: before the first event
            if started or not refused_logprobs(self.pool, body, exc):
                raise
        body = without_logprobs(body)
        async with contextlib.aclosing(stream_once(self, body, role, task, include_usage)) as e:
            async for event in e:
                yield event

    async def models(self) -> list[str]:
        """The model ids the (first healthy) endpoint serves, from ``GET /models``."""
        data = await self.transport.get("/models", read_json)
        return [str(m["id"]) for m in data.get("data", []) if isinstance(m, dict) and "id" in m]

    # -- one request -----------------------------------------------------------------------
    async def request(self, body: dict[str, Any], first: EndpointState | None = None) -> ChatResult:
        pooled = self.samples.get(body) if self.samples is not None else None
        if pooled is not None:  # answered before: the same reply, at the usage reported then
            choices = parse_choices(pooled.raw, pooled.endpoint)
            return ChatResult(
                choices=choices,
                usage=usage_of(pooled.raw, body, choices, self.count_tokens),
                latency_s=pooled.latency_s,
                endpoint=pooled.endpoint,
                model=str(pooled.raw.get("model") or body["model"]),
                raw=pooled.raw,
            )
        result = await self._request_live(body, first)
        if self.samples is not None:
            self.samples.put(body, PooledReply(result.raw, result.latency_s, result.endpoint))
        return result

    async def _request_live(
        self, body: dict[str, Any], first: EndpointState | None = None
    ) -> ChatResult:
        t0 = time.perf_counter()

        async def read(state: EndpointState, resp: aiohttp.ClientResponse) -> ChatResult:
            data = await read_json(state, resp)
            choices = parse_choices(data, state.url)
            return ChatResult(
                choices=choices,
                usage=usage_of(data, body, choices, self.count_tokens),
                latency_s=time.perf_counter() - t0,
                endpoint=state.url,
                model=str(data.get("model") or body["model"]),
                raw=data,
            )

        result = await self.transport.post("/chat/completions", body, read, state=first)
        reasoning = [c.reasoning for c in result.choices]
        self.traced(
            reply_record(body, result.endpoint, result.latency_s, list(result.texts), reasoning,
                         result.usage)
        )  # fmt: skip
        return result

    def traced(self, record: dict[str, Any]) -> None:
        """Write one record to the trace, if there is one."""
        if self.trace is not None:
            self.trace(record)

    def trace_failure(self, body: dict[str, Any], error: LLMError) -> None:
        self.traced(failure_record(body, error))
