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
import random
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import aiohttp

from rse_fast.errors import LLMBadRequestError, LLMError, LLMHTTPError
from rse_fast.llm.booking import CallBooking, Reservation
from rse_fast.llm.cost import CostModel, ServerSpeed
from rse_fast.llm.ledger import Ledger, TokenCounter, approx_token_count, count_prompt_tokens
from rse_fast.llm.meter import BudgetCap, PromptMargin
from rse_fast.llm.parse import parse_choices
from rse_fast.llm.prompt_count import PromptCounter
from rse_fast.llm.replies import merge_results, reply_events, usage_of
from rse_fast.llm.retry import RetryPolicy
from rse_fast.llm.routing import Endpoint, EndpointPool, EndpointState
from rse_fast.llm.sample_pool import PooledReply, SamplePool
from rse_fast.llm.trace import TraceHook, failure_record, reply_record
from rse_fast.llm.transport import Timeouts, Transport, open_response, read_json
from rse_fast.llm.types import ChatResult, Message, StreamEvent, Usage
from rse_fast.util.tasks import gather_or_cancel

log = logging.getLogger(__name__)

_SOURCE_RANK = {"reported": 0, "estimated": 1, "corrected": 2}
#: Request fields a server names when it cannot do structured output.
SCHEMA_FIELDS = ("response_format", "json_schema", "guided_json", "grammar")
#: What a request asks for token probabilities with; a server may refuse them with a 400 (a
#: llama.cpp build did for tools + stream + logprobs; vLLM past its ``--max-logprobs``).
LOGPROB_FIELDS = ("logprobs", "top_logprobs")


def asks_logprobs(fields: dict[str, Any]) -> bool:
    return any(fields.get(f) for f in LOGPROB_FIELDS)


def without_logprobs(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in LOGPROB_FIELDS}


class _Keep:
    """The default of a view option: keep the client's own."""


KEEP = _Keep()


def _as_endpoints(
    endpoints: str | Endpoint | Sequence[str | Endpoint], api_key: str | None, limit: int
) -> list[Endpoint]:
    items = [endpoints] if isinstance(endpoints, (str, Endpoint)) else list(endpoints)
    return [e if isinstance(e, Endpoint) else Endpoint(e, api_key, limit) for e in items]


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
            _as_endpoints(endpoints, api_key, max_concurrency),
            failure_threshold=failure_threshold,
            cooldown_s=cooldown_s,
        )
        self.trace = trace
        self.transport = Transport(pool, timeouts, retry, on_failure=self._trace_failure)
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
        return view

    def with_ledger(self, ledger: Ledger) -> LLMClient:
        """A view that records into another ledger: how each method run gets its own count."""
        return self.with_options(ledger=ledger)

    def metered_like(self, run: LLMClient) -> LLMClient:
        """A view of this client that books into ``run``'s ledger and draws on ``run``'s cap:
        how a helper on another client (an external judge) stays inside a run's budget. Its
        calls keep this client's own ``price`` (a judge on another model is billed at its)."""
        return self.with_options(ledger=run.ledger, cap=run.cap)

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
        if self.cap is not None and self.prompt_counter.pending(self.prompt_margin):
            await self._calibrate(body, self.prompt_margin)
        booking = self.booking
        held = booking.reserve(body, n)
        try:
            try:
                result = await self._chat_n(body, n, held)
            except LLMBadRequestError as exc:
                if not self._refused_logprobs(body, exc):
                    raise
                self.ledger.record_error(
                    role, exc, time.perf_counter() - t0, exc.endpoint or "", task
                )
                result = await self._chat_n(without_logprobs(body), n, held)
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

    def _refused_logprobs(self, body: dict[str, Any], error: LLMBadRequestError) -> bool:
        """Whether ``error`` is the server refusing the logprobs ``body`` asked for; if so,
        its endpoint is remembered and asked without them from now on (its choices then
        carry no logprobs: a confidence rule falls back to the plain vote and says so)."""
        if not asks_logprobs(body) or not error.concerns(*LOGPROB_FIELDS):
            return False
        state = self.pool.state_of(error.endpoint) or self.pool.pick()
        if state.supports_logprobs is not False:  # said once, not by every call in flight
            log.warning("%s refuses logprobs; asking it without them: %s", state.url, error)
        state.supports_logprobs = False
        return True

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
            await self._calibrate(self.build_body(messages), self.prompt_margin)

    async def _calibrate(self, body: dict[str, Any], margin: PromptMargin) -> None:
        """A client's first capped call (or run) asks the server how it counts the prompt, so
        the first wave's reservations already hold what its chat template adds."""
        estimate = self.booking.prompt_estimate(body)
        await self.prompt_counter.seed(self.transport, margin, body, estimate)

    def metered_outside(
        self, role: str, usage: Usage, endpoint: str, task: str | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """A call that is not a chat completion (a reward model's HTTP API), metered like
        one (see :meth:`CallBooking.outside`)."""
        return self.booking.outside(role, usage, endpoint, task)

    async def chat_json(
        self, messages: Sequence[Message], schema: dict[str, Any], **params: Any
    ) -> ChatResult:
        """``chat`` with JSON-schema constrained output where the server has it.

        An endpoint that rejects ``response_format`` is remembered and asked without it
        (callers parse the reply tolerantly); any other error is raised.
        """
        state = self.pool.pick()
        if state.supports_schema is not False:
            try:
                return await self.chat(messages, response_format=schema, **params)
            except LLMBadRequestError as exc:
                if not exc.concerns(*SCHEMA_FIELDS):
                    raise
                state.supports_schema = False
        return await self.chat(messages, **params)

    async def stream_json(
        self, messages: Sequence[Message], schema: dict[str, Any], **params: Any
    ) -> AsyncGenerator[StreamEvent, None]:
        """``stream`` with JSON-schema constrained output where the server has it, falling
        back as ``chat_json`` does (a rejection comes before the first event, so nothing
        has been yielded when it is asked again)."""
        state = self.pool.pick()
        if state.supports_schema is not False:
            try:
                async for event in self.stream(messages, response_format=schema, **params):
                    yield event
                return
            except LLMBadRequestError as exc:
                if not exc.concerns(*SCHEMA_FIELDS):
                    raise
                state.supports_schema = False
        async for event in self.stream(messages, **params):
            yield event

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
            async with contextlib.aclosing(self._stream_once(body, role, task, include_usage)) as e:
                async for event in e:
                    started = True
                    yield event
            return
        except LLMBadRequestError as exc:  # an HTTP status: before the first event
            if started or not self._refused_logprobs(body, exc):
                raise
        body = without_logprobs(body)
        async with contextlib.aclosing(self._stream_once(body, role, task, include_usage)) as e:
            async for event in e:
                yield event

    async def _stream_once(
        self, body: dict[str, Any], role: str, task: str | None, include_usage: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.cap is not None and self.prompt_counter.pending(self.prompt_margin):
            await self._calibrate(body, self.prompt_margin)
        booking = self.booking
        held = booking.reserve(body, 1)
        t0 = time.perf_counter()
        content: list[str] = []
        reasoning: list[str] = []
        usage: Usage | None = None
        endpoint = ""
        try:
            async with contextlib.AsyncExitStack() as keep:
                state, resp = await self.transport.post(
                    "/chat/completions", body, open_response, keep=keep
                )
                endpoint = state.url
                async for event in reply_events(state, resp):
                    if event.usage is not None:
                        usage = event.usage
                    content.append(event.delta)
                    reasoning.append(event.reasoning)
                    yield event
        except LLMError as exc:
            # an error status before any event: the server generated nothing; a stream that
            # broke, timed out or was cut: what it may have cost, as a bound
            answered = isinstance(exc, LLMHTTPError) and not (content or reasoning)
            bound = None if answered else booking.streamed_bound(body, content, reasoning)
            booking.failed(
                held, role, exc, time.perf_counter() - t0, exc.endpoint or "", task, bound
            )
            if endpoint:  # broke mid-stream (failures before the first byte are traced already)
                self._trace_failure(body, exc)
            raise
        except BaseException:  # cancelled or closed mid-stream: sent, so paid for, as a bound
            bound = booking.streamed_bound(body, content, reasoning)
            booking.cut_short(held, role, bound, time.perf_counter() - t0, endpoint, task)
            raise
        text, thought = "".join(content), "".join(reasoning)
        if usage is None:
            usage = Usage(
                count_prompt_tokens(body["messages"], self.count_tokens),
                self.count_tokens(text + thought),
                "estimated",
            )
        latency = time.perf_counter() - t0
        booking.answered(held, role, usage, latency, endpoint, task=task)
        self._trace_reply(body, endpoint, latency, [text], [thought or None], usage)
        yield StreamEvent(done=True, usage=usage)

    async def models(self) -> list[str]:
        """The model ids the (first healthy) endpoint serves, from ``GET /models``."""
        data = await self.transport.get("/models", read_json)
        return [str(m["id"]) for m in data.get("data", []) if isinstance(m, dict) and "id" in m]

    # -- n > 1 -----------------------------------------------------------------------------
    async def _chat_n(self, body: dict[str, Any], n: int, held: Reservation) -> ChatResult:
        if n == 1:
            return await self._request(body)
        state = self.pool.pick()
        if state.supports_n is False:
            return await self._fan_out(body, n, 0, held, reserved=1)
        try:
            first = await self._request({**body, "n": n}, state)
        except LLMBadRequestError as exc:
            if not exc.concerns("n"):
                raise  # the request itself is at fault (context too long, bad field, ...)
            state.supports_n = False  # rejected n > 1 by name: fall back to single requests
            return await self._fan_out(body, n, 0, held, reserved=1)
        if len(first.choices) >= n:
            state.supports_n = True
            return first
        state.supports_n = False  # ignored n: fetch the missing choices one by one
        rest = await self._fan_out(body, n - len(first.choices), len(first.choices), held)
        return merge_results([first, rest]) if rest.choices else first

    async def _fan_out(
        self,
        body: dict[str, Any],
        count: int,
        offset: int,
        held: Reservation,
        reserved: int = 0,
    ) -> ChatResult:
        """``count`` single requests, ``reserved`` of which the grant holds prompts for; on a
        cap, the others' prompts are reserved first, and the requests that do not fit are
        not sent (the call returns fewer choices)."""
        if count > reserved:
            count = reserved + self.booking.add_requests(held, count - reserved)
        base = body.get("seed")
        seeds = [
            (base + offset + i) if isinstance(base, int) else random.randrange(2**31)
            for i in range(count)
        ]
        if not seeds:
            return ChatResult(
                choices=(), usage=Usage(0, 0), latency_s=0.0, endpoint="", model=body["model"],
                requests=0,
            )  # fmt: skip
        parts = await gather_or_cancel([self._request({**body, "seed": s}) for s in seeds])
        return merge_results(parts)

    # -- one request -----------------------------------------------------------------------
    async def _request(
        self, body: dict[str, Any], first: EndpointState | None = None
    ) -> ChatResult:
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
        self._trace_reply(
            body,
            result.endpoint,
            result.latency_s,
            list(result.texts),
            [c.reasoning for c in result.choices],
            result.usage,
        )
        return result

    def _trace_reply(
        self,
        body: dict[str, Any],
        endpoint: str,
        latency_s: float,
        texts: list[str],
        reasoning: list[str | None],
        usage: Usage,
    ) -> None:
        if self.trace is not None:
            self.trace(reply_record(body, endpoint, latency_s, texts, reasoning, usage))

    def _trace_failure(self, body: dict[str, Any], error: LLMError) -> None:
        if self.trace is not None:
            self.trace(failure_record(body, error))
