"""Speaking OpenAI as vLLM and SGLang do: a thinking-model upstream (separate reasoning field,
tool calls, streamed deltas, usage chunk, errors), through our client and through the service
with the official ``openai`` SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp
import openai
import pytest
from conftest import serving
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rse_fast.errors import LLMConnectionError, LLMServerError
from rse_fast.llm import LLMClient, RetryPolicy
from rse_fast.serve.app import ServeConfig, Service
from rse_fast.serve.requests import Caps
from rse_fast.testing import Fault, Reply, ScriptedServer

from fakes.scripted_model import reply as rse_reply

MSG = [{"role": "user", "content": "What is the weather in Paris?"}]
FAST = RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=0.002)
TRACE = "The user wants weather; I should call the tool with the city."
TOOL = {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}


def thinking(body: dict, index: int) -> Reply:
    if body.get("tools"):
        return Reply(reasoning=TRACE, tool_calls=(TOOL,))
    return Reply(content="It is sunny.", reasoning=TRACE, reasoning_field="reasoning")


# -- the client ------------------------------------------------------------------------------
async def test_client_keeps_reasoning_tool_calls_and_reasoning_tokens():
    async with ScriptedServer(default_reply=thinking) as srv, LLMClient(srv.base_url, "m") as c:
        plain = await c.chat(MSG)
        tools = await c.chat(MSG, tools=[{"type": "function", "function": {"name": "get_weather"}}])
    choice = plain.choices[0]
    assert choice.text == "It is sunny." and choice.reasoning == TRACE  # "reasoning" field
    assert choice.message["reasoning"] == TRACE and choice.finish_reason == "stop"
    assert plain.usage.reasoning_tokens == len(TRACE.split())
    call = tools.choices[0]
    assert call.text == "" and call.message["content"] is None  # content null while calling
    assert call.reasoning == TRACE  # "reasoning_content" field
    assert call.finish_reason == "tool_calls"
    assert call.tool_calls[0]["function"] == {"name": "get_weather", "arguments": TOOL["arguments"]}


async def test_client_keeps_refusal_and_logprobs():
    async def refusing(request):  # a server answering with fields the scripts do not use
        return aiohttp.web.json_response(
            {
                "id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "logprobs": {"content": [{"token": "No", "logprob": -0.1}]},
                             "message": {"role": "assistant", "content": None,
                                         "refusal": "I cannot help with that."}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )  # fmt: skip

    app = aiohttp.web.Application()
    app.router.add_post("/v1/chat/completions", refusing)
    async with serving(app) as base, LLMClient(base + "/v1", "m") as c:
        res = await c.chat(MSG, logprobs=True)
    choice = res.choices[0]
    assert choice.refusal == "I cannot help with that." and choice.text == ""
    assert choice.logprobs["content"][0]["token"] == "No"


async def test_client_stream_yields_every_delta_kind():
    async with ScriptedServer(default_reply=thinking) as srv, LLMClient(srv.base_url, "m") as c:
        events = [
            e
            async for e in c.stream(
                MSG, tools=[{"type": "function", "function": {"name": "get_weather"}}]
            )
        ]
    assert events[0].role == "assistant"
    assert "".join(e.reasoning for e in events) == TRACE
    fragments = [tc for e in events for tc in e.tool_calls]
    assert fragments[0]["function"]["name"] == "get_weather" and fragments[0]["id"]
    args = "".join(tc["function"].get("arguments", "") for tc in fragments)
    assert json.loads(args) == {"city": "Paris", "unit": "celsius"}
    assert any(e.finish_reason == "tool_calls" for e in events)
    usage_events = [e for e in events if e.usage is not None and not e.done]
    assert usage_events and events[-1].done and events[-1].usage.source == "reported"


async def test_client_stream_broken_midway_fails_fast_with_a_typed_error():
    async with ScriptedServer(
        default_reply="one two three four five six", faults=[Fault("drop_stream", after_chunks=3)]
    ) as srv:
        async with LLMClient(srv.base_url, "m", retry=FAST) as c:
            t0 = time.perf_counter()
            with pytest.raises(LLMConnectionError):
                async for _ in c.stream(MSG):
                    pass
            assert time.perf_counter() - t0 < 1.0


async def test_client_stream_error_event_raises():
    async def erroring(request):
        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
        await resp.write(b'data: {"error": {"message": "engine died", "type": "server_error"}}\n\n')
        await resp.write_eof()
        return resp

    app = aiohttp.web.Application()
    app.router.add_post("/v1/chat/completions", erroring)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with LLMClient(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", "m") as c:
            with pytest.raises(LLMServerError, match="engine died"):
                async for _ in c.stream(MSG):
                    pass
    finally:
        await runner.cleanup()


# -- the service -------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def service(upstream: ScriptedServer, **cfg):
    svc = Service(ServeConfig([upstream.base_url], **cfg))
    svc.client.transport.retry = FAST
    runner = aiohttp.web.AppRunner(svc.app(), handler_cancellation=True)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield svc, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def sdk(url: str, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=5)


async def test_passthrough_keeps_every_field_of_a_thinking_model():
    async with ScriptedServer(default_reply=thinking) as up, service(up) as (_, url):
        client = sdk(url)
        plain = await client.chat.completions.create(model="m", messages=MSG)
        tools = await client.chat.completions.create(
            model="m", messages=MSG,
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        )  # fmt: skip
        await client.close()
    msg = plain.choices[0].message
    assert msg.content == "It is sunny." and msg.model_extra["reasoning"] == TRACE
    assert plain.usage.completion_tokens_details.reasoning_tokens == len(TRACE.split())
    call = tools.choices[0]
    assert call.finish_reason == "tool_calls" and call.message.content is None
    assert call.message.model_extra["reasoning_content"] == TRACE
    assert call.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(call.message.tool_calls[0].function.arguments)["city"] == "Paris"


async def test_streamed_passthrough_forwards_every_event():
    async with ScriptedServer(default_reply=thinking) as up, service(up) as (_, url):
        client = sdk(url)
        stream = await client.chat.completions.create(
            model="m", messages=MSG, stream=True, stream_options={"include_usage": True},
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        )  # fmt: skip
        chunks = [c async for c in stream]
        quiet = await client.chat.completions.create(model="m", messages=MSG, stream=True)
        quiet_chunks = [c async for c in quiet]
        await client.close()
    assert chunks[0].choices[0].delta.role == "assistant"
    reasoning = "".join(
        c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert reasoning == TRACE
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls))["unit"] == "celsius"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0  # usage chunk last
    assert all(c.usage is None for c in quiet_chunks)  # no usage chunk unless asked
    assert "".join(c.choices[0].delta.content or "" for c in quiet_chunks) == "It is sunny."


@pytest.mark.parametrize(
    ("fault", "status", "kind", "words"),
    [
        (Fault("status", status=400, message="n must be 1", param="n"), 400,
         "invalid_request_error", "n must be 1"),
        (Fault("status", status=401, message="bad key"), 502, "upstream_error", "credentials"),
        (Fault("status", status=403), 502, "upstream_error", "credentials"),
        (Fault("status", status=503), 502, "upstream_error", "status 503"),
        (Fault("reset"), 502, "upstream_error", "unreachable"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_failures_are_proper_http_errors(fault, status, kind, words, stream):
    async with ScriptedServer(faults=lambda i, b: fault) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:
            body = {"model": "m", "messages": MSG, "stream": stream}
            t0 = time.perf_counter()
            async with s.post(url + "/chat/completions", json=body) as r:
                data = await r.json()
                assert r.status == status and r.content_type == "application/json"
            assert time.perf_counter() - t0 < 1.0
    err = data["error"]
    assert err["type"] == kind and words in err["message"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] is None or isinstance(err["code"], str)
    assert up.base_url.split("//")[1] not in json.dumps(data)  # no upstream address leaks


async def test_stream_dropped_midway_arrives_as_an_error_event_within_a_second():
    drop = Fault("drop_stream", after_chunks=3)
    async with ScriptedServer(default_reply="a b c d e f g", faults=[drop]) as up:
        async with service(up) as (_, url):
            client = sdk(url)
            t0 = time.perf_counter()
            stream = await client.chat.completions.create(model="m", messages=MSG, stream=True)
            with pytest.raises(openai.APIError, match="upstream"):
                async for _ in stream:
                    pass
            assert time.perf_counter() - t0 < 1.0
            await client.close()


async def test_auth_takes_only_bearer_keys_and_models_sends_the_upstream_key():
    async with ScriptedServer(api_key="up-key", model="tiny") as up:
        async with (
            service(up, api_keys=["k1"], upstream_api_key="up-key") as (_, url),
            aiohttp.ClientSession() as s,
        ):
            body = {"model": "tiny", "messages": MSG}
            for auth in ("k1", "Token k1", "Basic k1", "Bearer", "Bearer wrong", "Bearer k1\u00e9"):
                async with s.post(url + "/chat/completions", json=body,
                                  headers={"Authorization": auth}) as r:  # fmt: skip
                    assert r.status == 401, auth
                    assert (await r.json())["error"]["type"] == "authentication_error"
            raw_headers = {"Authorization": b"Bearer \xff\xfe".decode("latin-1")}
            async with s.post(url + "/chat/completions", json=body, headers=raw_headers) as r:
                assert r.status == 401 and "error" in await r.json()
            for scheme in ("Bearer", "bearer", "BEARER"):
                async with s.post(url + "/chat/completions", json=body,
                                  headers={"Authorization": f"{scheme} k1"}) as r:  # fmt: skip
                    assert r.status == 200
            async with s.get(url + "/models", headers={"Authorization": "Bearer k1"}) as r:
                ids = [m["id"] for m in (await r.json())["data"]]
    assert "tiny" in ids and "rse:tiny" in ids  # the upstream needed its key for /models


async def test_method_requests_are_capped_and_refuse_what_they_cannot_honour():
    async with ScriptedServer(default_reply=rse_reply) as up:
        caps = Caps(max_rounds=4, max_k=8, max_tokens=512, max_budget_tokens=20_000)
        async with service(up, caps=caps) as (_, url), aiohttp.ClientSession() as s:

            async def post(extra):
                body = {"model": "rse:m", "messages": MSG, **extra}
                async with s.post(url + "/chat/completions", json=body) as r:
                    return r.status, await r.json()

            for extra, cap in (({"k": 64}, "--max-k"), ({"rounds": 16}, "--max-rounds"),
                               ({"max_tokens": 4096}, "--max-tokens"),
                               ({"budget": 10**7}, "--max-budget-tokens")):  # fmt: skip
                status, data = await post(extra)
                assert status == 400 and cap in data["error"]["message"], extra
            refused = (
                ("n", 2),
                ("stop", ["\n"]),
                ("tools", [{"type": "function"}]),
                ("logprobs", True),
                ("response_format", {"type": "json_object"}),
                ("top_p", 0.9),  # the methods sample the whole distribution
                ("reasoning_effort", "high"),
            )
            for field, value in refused:
                status, data = await post({field: value})
                assert status == 400 and data["error"]["param"] == field
                assert (
                    f"'{field}'" in data["error"]["message"] and "'rse'" in data["error"]["message"]
                )
            status, data = await post({"n": 1, "top_p": 1, "budget": 3000, "rounds": 4, "k": 4})
    assert status == 200 and data["created"] > 0
    assert data["usage"]["total_tokens"] <= 3000 * 1.25  # rse honours the budget


async def test_health_answers_fast_while_rse_requests_run():
    async with ScriptedServer(default_reply=rse_reply, latency=0.05) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:

            async def rse_call():
                body = {"model": "rse:m", "messages": MSG, "rounds": 2, "k": 4}
                async with s.post(url + "/chat/completions", json=body) as r:
                    return r.status

            work = [asyncio.create_task(rse_call()) for _ in range(3)]
            await asyncio.sleep(0.3)
            worst = 0.0
            while not all(t.done() for t in work):
                t0 = time.perf_counter()
                async with s.get(url.removesuffix("/v1") + "/health") as r:
                    assert r.status == 200
                worst = max(worst, time.perf_counter() - t0)
                await asyncio.sleep(0.05)
            assert [await t for t in work] == [200, 200, 200]
    assert worst < 0.05


async def test_unexpected_exception_is_json_not_text(monkeypatch):
    async with ScriptedServer() as up, service(up) as (_, url):

        def boom(*a, **k):
            raise RuntimeError("bug")

        monkeypatch.setattr("rse_fast.serve.app.parse_method_request", boom)
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/chat/completions", json={"model": "m", "messages": MSG}) as r:
                assert r.status == 500 and r.content_type == "application/json"
                assert (await r.json())["error"]["type"] == "server_error"


async def test_passthrough_keeps_counters_not_records():
    async with ScriptedServer() as up, service(up) as (svc, url), aiohttp.ClientSession() as s:
        for _ in range(30):
            async with s.post(url + "/chat/completions", json={"model": "m", "messages": MSG}) as r:
                assert r.status == 200
    assert svc.client.ledger.records == [] and svc.metrics.tokens["passthrough"] > 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stream=st.booleans(),
    n=st.one_of(st.none(), st.integers(-2, 5), st.text(max_size=3)),
    seed=st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=4), st.floats(allow_nan=False)),
    schema=st.sampled_from([None, {"type": "json_object"}, {"type": "json_schema"}, "x"]),
    method=st.sampled_from(["m", "rse:m", "sc:m"]),
)
def test_fuzz_streamed_and_fallback_paths_never_500(stream, n, seed, schema, method):
    body: dict = {"model": method, "messages": MSG, "stream": stream, "rounds": 1, "k": 1}
    for name, value in (("n", n), ("seed", seed), ("response_format", schema)):
        if value is not None:
            body[name] = value

    async def go():
        async with ScriptedServer(default_reply=rse_reply) as up, service(up) as (_, url):
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/chat/completions", json=body) as r:
                    raw = await r.read()
                    return r.status, r.content_type, raw

    status, ctype, raw = asyncio.run(go())
    assert status < 500, raw
    if status >= 400:
        assert ctype == "application/json" and "error" in json.loads(raw)
