"""LLMClient against the scripted server: every reliability rule, n > 1, usage, streaming."""

from __future__ import annotations

import asyncio
import time

import pytest

from rse_fast.errors import (
    LLMBadRequestError,
    LLMConnectionError,
    LLMDeadlineError,
    LLMError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
)
from rse_fast.llm.client import LLMClient, Timeouts
from rse_fast.llm.parse import parse_choices, parse_chunk, parse_usage
from rse_fast.llm.retry import RetryPolicy, parse_retry_after
from rse_fast.llm.routing import Endpoint
from rse_fast.testing import Fault, Rule, ScriptedServer

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.02)
MSG = [{"role": "user", "content": "What is six times seven?"}]


def seeded_reply(body, index):
    return f"reply seed={body.get('seed')} index={index}"


async def test_chat_returns_text_usage_and_ledger_entry():
    async with ScriptedServer(rules=[Rule("six times seven", "It is \\boxed{42}.")]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            res = await client.chat(MSG, role="explore", temperature=0.6, top_k=20, seed=3)
    assert res.text == "It is \\boxed{42}."
    assert res.usage.source == "reported"
    assert res.usage.completion_tokens == 3 and res.usage.prompt_tokens == 5
    assert srv.requests[0]["top_k"] == 20 and srv.requests[0]["seed"] == 3
    assert "top_p" not in srv.requests[0]  # None fields are not sent
    totals = client.ledger.by_role()["explore"]
    assert totals.calls == 1 and totals.total_tokens == 8


async def test_n_greater_than_one_in_one_request():
    async with ScriptedServer(default_reply=seeded_reply) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await client.chat(MSG, n=3, seed=10)
    assert len(res.choices) == 3 and len(srv.requests) == 1 and res.requests == 1


async def test_server_ignoring_n_falls_back_to_single_requests_and_remembers():
    async with ScriptedServer(default_reply=seeded_reply, ignore_n=True) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await client.chat(MSG, n=4, seed=100)
            assert len(res.choices) == 4
            # first request asked n=4, got one choice; three singles followed with new seeds
            assert [r.get("seed") for r in srv.requests] == [100, 101, 102, 103]
            assert len(set(res.texts)) == 4
            before = len(srv.requests)
            await client.chat(MSG, n=2, seed=7)
            assert len(srv.requests) - before == 2  # remembered: no n=2 request any more
            assert all("n" not in r for r in srv.requests[before:])


async def test_server_rejecting_n_falls_back():
    def reject_n(i, body):
        too_many = body.get("n", 1) > 1
        return Fault("status", status=400, message="n must be 1", param="n") if too_many else None

    async with ScriptedServer(default_reply=seeded_reply, faults=reject_n) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await client.chat(MSG, n=3, seed=0)
            again = await client.chat(MSG, n=2, seed=5)  # remembered: no second n > 1 try
    assert len(res.choices) == 3 and len(again.choices) == 2 and len(srv.requests) == 4 + 2


async def test_other_400_on_n_call_is_the_callers_error_raised_once():
    long = "This model's maximum context length is 2048 tokens; your request has 9000."

    def too_long(i, body):
        return Fault("status", status=400, message=long) if i == 0 else None

    async with ScriptedServer(default_reply=seeded_reply, faults=too_long) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            with pytest.raises(LLMBadRequestError, match="maximum context length"):
                await client.chat(MSG, n=3, seed=0)
            assert len(srv.requests) == 1  # no fan-out, no retry
            res = await client.chat(MSG, n=3, seed=0)  # n still used natively afterwards
    assert len(res.choices) == 3 and len(srv.requests) == 2


async def test_usage_counting_one_choice_is_corrected():
    async with ScriptedServer(
        default_reply="one two three four five six seven eight", usage_first_choice_only=True
    ) as srv:
        async with LLMClient(srv.base_url, "m", token_counter=lambda t: len(t.split())) as c:
            res = await c.chat(MSG, n=4)
    assert res.usage.source == "corrected" and res.usage.completion_tokens == 32


@pytest.mark.parametrize(
    ("usage", "read"),
    [
        ({"prompt_tokens": 5, "completion_tokens": 7}, (5, 7)),
        ({"prompt_tokens": 5.0, "completion_tokens": "7"}, (5, 7)),
        ({"prompt_tokens": -5, "completion_tokens": 7}, None),
        ({"prompt_tokens": 5, "completion_tokens": 7.5}, None),
        ({"prompt_tokens": float("nan"), "completion_tokens": 7}, None),
        ({"prompt_tokens": True, "completion_tokens": 7}, None),
        ({"prompt_tokens": 5}, None),
    ],
)
def test_reported_usage_is_trusted_only_when_it_is_a_count(usage, read):
    """A negative or fractional count would let a budget cap be overrun: it is not read, and
    the call is estimated from its text instead."""
    got = parse_usage(usage)
    if read is None:
        assert got is None
    else:
        assert got is not None and (got.prompt_tokens, got.completion_tokens) == read


async def test_missing_usage_is_estimated():
    async with ScriptedServer(faults=[Fault("no_usage")]) as srv:
        async with LLMClient(srv.base_url, "m") as client:
            res = await client.chat(MSG)
    assert res.usage.source == "estimated" and res.usage.completion_tokens > 0
    assert client.ledger.by_role()["explore"].estimated_calls == 1


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", status=500),
        Fault("status", status=503),
        Fault("status", status=408),
        Fault("status", status=409),
        Fault("status", status=429),
        Fault("truncate"),
        Fault("malformed"),
        Fault("reset"),
    ],
)
async def test_transient_faults_are_retried(fault):
    async with ScriptedServer(faults=[fault, fault]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            res = await client.chat(MSG)
    assert res.text and len(srv.requests) == 3


async def test_retry_after_is_honoured():
    async with ScriptedServer(faults=[Fault("status", status=429, retry_after=0.4)]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            t0 = time.perf_counter()
            await client.chat(MSG)
            assert time.perf_counter() - t0 >= 0.4


async def _status_and_body(state, resp):
    return resp.status, await resp.read()


async def test_a_deadline_bounds_the_attempt_and_the_retries():
    """``post_bytes(deadline=)``: a slow upstream ends in LLMDeadlineError at the deadline;
    a retry whose wait would outlast the deadline is not made (the upstream's error is
    raised at once); well inside the deadline the call is untouched."""
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    async with ScriptedServer(latency=1.5) as slow, LLMClient(slow.base_url, "m") as client:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(LLMDeadlineError):
            await client.transport.post_bytes(
                "/chat/completions", body, _status_and_body, deadline=t0 + 0.3
            )
        assert 0.3 <= loop.time() - t0 < 1.0
        # an attempt's own timeout well before the deadline stays a retried LLMTimeoutError
        short = Timeouts(total_s=0.2)
        retry = RetryPolicy(max_attempts=2, base_delay_s=0.01)
        async with LLMClient(slow.base_url, "m", timeouts=short, retry=retry) as impatient:
            with pytest.raises(LLMTimeoutError) as info:
                await impatient.transport.post_bytes(
                    "/chat/completions", body, _status_and_body, deadline=loop.time() + 60
                )
        assert not isinstance(info.value, LLMDeadlineError) and info.value.attempts == 2
    faults = [Fault("status", status=503, retry_after=0.6)] * 2
    async with ScriptedServer(faults=faults) as flaky:
        async with LLMClient(flaky.base_url, "m", retry=FAST_RETRY) as client:
            t0 = loop.time()
            with pytest.raises(LLMServerError):
                await client.transport.post_bytes(
                    "/chat/completions", body, _status_and_body, deadline=t0 + 0.4
                )
            assert loop.time() - t0 < 0.3 and len(flaky.requests) == 1
            t0 = loop.time()
            status, data = await client.transport.post_bytes(
                "/chat/completions", body, _status_and_body, deadline=t0 + 60
            )  # the second fault is retried after its Retry-After, then the reply comes
            assert loop.time() - t0 >= 0.6
            assert status == 200 and len(flaky.requests) == 3 and b"choices" in data


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_is_not_retried(status):
    async with ScriptedServer(faults=[Fault("status", status=status)]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            with pytest.raises(LLMBadRequestError) as info:
                await client.chat(MSG)
    assert len(srv.requests) == 1
    assert info.value.status == status and info.value.endpoint == srv.base_url
    assert "injected" in (info.value.body or "")
    assert client.ledger.by_role()["explore"].errors == 1


async def test_persistent_failure_ends_in_a_typed_error_after_max_attempts():
    async with ScriptedServer(faults=[Fault("status", status=502)] * 10) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            with pytest.raises(LLMServerError) as info:
                await client.chat(MSG)
    assert info.value.attempts == 4 and len(srv.requests) == 4 and info.value.status == 502


async def test_a_reply_nested_past_the_json_parser_is_a_typed_error():
    """Well-formed JSON nested deeper than the parser's stack raises RecursionError inside
    json.loads; the caller gets the retryable LLMResponseError, streamed or not."""
    deep = [Fault("deep_json")] * 10
    async with ScriptedServer(faults=deep) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            with pytest.raises(LLMResponseError) as info:
                await client.chat(MSG)
            assert info.value.attempts == 4 and len(srv.requests) == 4
            with pytest.raises(LLMResponseError):
                [e async for e in client.stream(MSG)]
    async with ScriptedServer(default_reply="x y", faults=[Fault("deep_json")]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            assert (await client.chat(MSG)).text == "x y"  # retried past it


async def test_total_timeout_raises_timeout_error():
    async with ScriptedServer(faults=[Fault("slow", delay_s=2.0)] * 5) as srv:
        timeouts = Timeouts(connect_s=1, total_s=0.2, stream_idle_s=0.2)
        retry = RetryPolicy(max_attempts=2, base_delay_s=0.01)
        async with LLMClient(srv.base_url, "m", timeouts=timeouts, retry=retry) as client:
            with pytest.raises(LLMTimeoutError):
                await client.chat(MSG)


async def test_connection_refused_is_a_connection_error():
    srv = ScriptedServer()
    await srv.start()
    url = srv.base_url
    await srv.stop()
    async with LLMClient(url, "m", retry=RetryPolicy(max_attempts=2, base_delay_s=0.01)) as c:
        with pytest.raises(LLMConnectionError) as info:
            await c.chat(MSG)
    assert info.value.endpoint == url


async def test_stream_yields_deltas_and_survives_connection_close():
    async with ScriptedServer(default_reply="alpha beta gamma", close_after_stream=True) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            for _ in range(3):  # the server closes after each stream; the client reconnects
                events = [e async for e in client.stream(MSG)]
                assert "".join(e.delta for e in events) == "alpha beta gamma"
                assert events[-1].done and events[-1].usage.completion_tokens == 3
                assert (await client.chat(MSG)).text == "alpha beta gamma"
    assert client.ledger.by_role()["explore"].calls == 6


async def test_stream_retries_before_first_byte():
    async with ScriptedServer(default_reply="x y", faults=[Fault("status", status=503)]) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY) as client:
            text = "".join([e.delta async for e in client.stream(MSG)])
    assert text == "x y" and len(srv.requests) == 2


async def test_streamed_calls_reach_the_trace_replies_and_breaks_alike():
    records: list[dict] = []
    faults = [None, Fault("drop_stream", after_chunks=2)]
    async with ScriptedServer(default_reply="alpha beta gamma", faults=faults) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST_RETRY, trace=records.append) as c:
            assert "".join([e.delta async for e in c.stream(MSG)]) == "alpha beta gamma"
            with pytest.raises(LLMConnectionError):
                _ = [e async for e in c.stream(MSG)]
    reply, broken = records
    assert reply["texts"] == ["alpha beta gamma"] and reply["request"]["stream"] is True
    assert reply["usage"]["completion_tokens"] == 3
    assert broken["error"].startswith("LLMConnectionError") and "texts" not in broken


async def test_per_endpoint_concurrency_limit():
    async with ScriptedServer(latency=0.05) as srv:
        async with LLMClient(Endpoint(srv.base_url, max_concurrency=3), "m") as client:
            await asyncio.gather(*(client.chat(MSG) for _ in range(12)))
    assert srv.max_in_flight == 3


async def test_least_outstanding_routing_and_cooldown():
    async with ScriptedServer(latency=0.02) as a, ScriptedServer(latency=0.02) as b:
        async with LLMClient([a.base_url, b.base_url], "m") as client:
            await asyncio.gather(*(client.chat(MSG) for _ in range(40)))
        assert abs(len(a.requests) - len(b.requests)) <= 4

    bad = ScriptedServer(faults=[Fault("status", status=500)] * 1000)
    async with bad, ScriptedServer() as good:
        async with LLMClient(
            [bad.base_url, good.base_url], "m", retry=FAST_RETRY, failure_threshold=2, cooldown_s=30
        ) as client:
            for _ in range(20):
                assert (await client.chat(MSG)).text
        assert len(bad.requests) <= 3  # cooled down after two failures in a row
        assert len(good.requests) == 20


async def test_cancellation_leaks_no_connection_or_slot():
    async with ScriptedServer(latency=5.0) as srv:
        client = LLMClient(Endpoint(srv.base_url, max_concurrency=4), "m")
        tasks = [asyncio.create_task(client.chat(MSG)) for _ in range(6)]
        await asyncio.sleep(0.2)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        state = client.pool.states[0]
        assert state.outstanding == 0 and state.semaphore._value == 4
        assert len(client.transport.session().connector._acquired) == 0
        await client.close()


def test_retry_after_parsing():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("garbage") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="http"):
        LLMClient("localhost:8000", "m")
    with pytest.raises(ValueError, match="at least one endpoint"):
        LLMClient([], "m")
    client = LLMClient("http://127.0.0.1:1", "m")
    with pytest.raises(ValueError, match="messages"):
        asyncio.run(client.chat([]))
    with pytest.raises(ValueError, match="n must be"):
        asyncio.run(client.chat(MSG, n=0))


def test_every_error_is_an_llm_error():
    for cls in (
        LLMBadRequestError,
        LLMConnectionError,
        LLMResponseError,
        LLMServerError,
        LLMTimeoutError,
    ):
        assert issubclass(cls, LLMError)


@pytest.mark.parametrize(
    "chunk",
    [
        {"choices": 1},
        {"choices": {"index": 0}},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": ["a"]}]},
        {"choices": [{"index": 0, "delta": {"content": 7}}]},
        {"choices": [{"index": "first", "delta": {"content": "x"}}]},
    ],
)
def test_a_chunk_that_is_not_one_is_a_typed_error(chunk):
    """What a broken gateway can send mid-stream ends the stream in LLMResponseError (which
    names the endpoint), never in an AttributeError from deep inside the client."""
    with pytest.raises(LLMResponseError) as info:
        parse_chunk(chunk, "http://gw/v1")
    assert info.value.endpoint == "http://gw/v1"


def test_content_parts_are_read_as_text_whole_or_streamed():
    parts = [{"type": "text", "text": "six "}, {"type": "image_url"}, {"type": "text", "text": "7"}]
    whole = parse_choices({"choices": [{"message": {"role": "assistant", "content": parts}}]}, "u")
    assert whole[0].text == "six 7" and whole[0].message["content"] == parts  # raw kept
    (event,) = parse_chunk({"choices": [{"index": 0, "delta": {"content": parts}}]})
    assert event.delta == "six 7"
    with pytest.raises(LLMResponseError):
        parse_choices({"choices": [{"message": {"content": {"text": "x"}}}]}, "u")
    with pytest.raises(LLMResponseError):
        parse_choices({"choices": [{"message": "hello"}]}, "u")
