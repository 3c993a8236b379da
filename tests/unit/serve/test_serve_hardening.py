"""The service as a hostile user meets it: streams that break in every way end with an error
event at once, answer checks that could run for hours cannot freeze a worker, bad bodies are
400s without tracebacks, and the defaults do not make an open relay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass

import aiohttp
import aiohttp.web
import pytest
from conftest import running_service, serving
from hypothesis import given
from hypothesis import strategies as st

from rse_fast.errors import InsecureServiceError, LLMConnectionError, LLMResponseError
from rse_fast.llm import LLMClient, RetryPolicy
from rse_fast.llm.sse import EventTail
from rse_fast.serve import ServeConfig
from rse_fast.serve.workers import check_exposure
from rse_fast.testing import Fault, ScriptedServer

MSG = [{"role": "user", "content": "What is 2 + 2?"}]
FAST = RetryPolicy(max_attempts=1, base_delay_s=0.001, max_delay_s=0.002)


@contextlib.asynccontextmanager
async def service(upstream: ScriptedServer, **cfg):
    async with running_service(upstream, **cfg) as (svc, url):
        yield svc, url + ""


async def read_stream(
    url: str, body: dict, limit_s: float = 10.0
) -> tuple[int, list[bytes], float]:
    """Status, the SSE data lines, and seconds until the stream ended (or the limit)."""
    t0 = time.perf_counter()
    lines: list[bytes] = []
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:

        async def collect() -> None:
            async for line in r.content:
                if line.startswith(b"data:"):
                    lines.append(line.strip())

        with contextlib.suppress(asyncio.TimeoutError, aiohttp.ClientPayloadError):
            await asyncio.wait_for(collect(), limit_s)
        return r.status, lines, time.perf_counter() - t0


def error_events(lines: list[bytes]) -> list[dict]:
    out = []
    for line in lines:
        payload = line[5:].strip()
        if payload != b"[DONE]":
            data = json.loads(payload)
            if "error" in data:
                out.append(data["error"])
    return out


# -- every stream ends --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rst_stream", "close_stream", "drop_stream"])
async def test_passthrough_stream_broken_midway_ends_with_an_error_event_within_a_second(kind):
    fault = Fault(kind, after_chunks=3)
    async with ScriptedServer(default_reply="a b c d e f g h", faults=[fault]) as up:
        async with service(up) as (_, url):
            status, lines, took = await read_stream(url, {"model": "m", "messages": MSG,
                                                          "stream": True})  # fmt: skip
    assert status == 200 and len(lines) >= 3  # the first chunks came through as sent
    errors = error_events(lines)
    assert len(errors) == 1 and errors[0]["type"] == "upstream_error", lines[-2:]
    assert lines[-1] != b"data: [DONE]" or errors  # the end is the error, not a clean finish
    assert took < 1.0, took


@dataclass
class RawUpstream:
    base_url: str


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.mark.parametrize("ends", ["cut", "done"])
async def test_a_model_that_writes_done_in_its_text_does_not_hide_a_cut(ends):
    """The end of a stream is read from the SSE framing: ``data: [DONE]`` inside a chunk's
    JSON string is text, so a stream cut after it still ends with an error event (the old
    pass-through found the substring in its last 4 KiB and called the stream finished)."""

    async def chat(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        delta = {"role": "assistant", "content": "the stream ends with\ndata: [DONE]\n\n"}
        await resp.write(sse({"choices": [{"index": 0, "delta": delta}]}))
        if ends == "done":
            usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
            await resp.write(sse({"choices": [], "usage": usage}) + b"data: [DONE]\n\n")
        await resp.write_eof()  # a clean close: before [DONE] when cut
        return resp

    app = aiohttp.web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as base, service(RawUpstream(base + "/v1")) as (_svc, url):
        body = {"model": "m", "messages": MSG, "stream": True}
        status, lines, _ = await read_stream(url, body)
    errors = error_events(lines)
    assert status == 200
    if ends == "cut":
        assert len(errors) == 1 and errors[0]["type"] == "upstream_error", lines
    else:
        assert not errors and lines[-1] == b"data: [DONE]"


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_the_event_tail_reads_the_same_however_the_bytes_are_chunked(cuts):
    stream = (
        b": comment\n\n"
        + sse({"choices": [{"delta": {"content": "data: [DONE]"}}]})
        + b'data: {"choices": [], "usage": {"total_tokens": 9}}\r\n\r\n'
        + b"data: [DONE]\n\n"
    )
    for whole in (stream, stream[: -len(b"data: [DONE]\n\n")]):
        tail, at = EventTail(), 0
        for cut in [*cuts, len(whole)]:
            tail.feed(whole[at : at + cut])
            at += cut
        tail.feed(whole[at:])
        assert tail.done == (whole == stream)
        assert tail.last_usage is not None and b"9" in tail.last_usage


async def test_passthrough_stream_that_stalls_ends_within_the_read_timeout():
    stall = Fault("stall_stream", after_chunks=2, stall_s=30)
    async with ScriptedServer(default_reply="a b c d e f", faults=[stall]) as up:
        async with service(up, stream_idle_s=0.5) as (_, url):
            status, lines, took = await read_stream(url, {"model": "m", "messages": MSG,
                                                          "stream": True})  # fmt: skip
    errors = error_events(lines)
    assert status == 200 and len(errors) == 1 and errors[0]["code"] == "upstream_timeout"
    assert 0.5 <= took < 1.5, took


@pytest.mark.parametrize("model", ["m", "sc:m"], ids=["pass-through", "method"])
async def test_deadline_after_headers_ends_the_stream_with_a_timeout_event(model):
    """Headers are out (the first event came) when --timeout fires: the caller gets an error
    event and the end of the stream, not a partial stream that just stops."""
    body = {"model": model, "messages": MSG, "stream": True}
    if model.startswith("sc"):
        body["k"] = 2
    async with ScriptedServer(default_reply="one two three four five six seven eight",
                              stream_tokens_per_s=8) as up:  # fmt: skip
        async with service(up, request_timeout_s=0.6) as (_, url):
            status, lines, took = await read_stream(url, body)
    errors = error_events(lines)
    assert status == 200 and lines, lines
    assert len(errors) == 1 and errors[0]["type"] == "timeout", lines[-2:]
    assert took < 0.6 + 1.0, took


async def test_method_stream_failure_after_headers_is_an_error_event():
    def fail_late(i, body):  # the first wave answers, everything after fails
        return Fault("status", status=500) if i >= 2 else None

    body = {"model": "sc:m", "messages": MSG, "stream": True, "k": 2, "budget": 3000}
    async with ScriptedServer(default_reply="\\boxed{4}", faults=fail_late,
                              latency=0.05) as up:  # fmt: skip
        async with service(up) as (_, url):
            status, lines, _ = await read_stream(url, body)
    # either the method finished from what it had, or it ended with one error event: never
    # a stream that stops without either
    assert status == 200
    assert error_events(lines) or lines[-1] == b"data: [DONE]"


# -- the client side of a stream ----------------------------------------------------------------
async def test_client_reads_a_json_body_sent_for_a_streamed_request_as_the_whole_reply():
    json_body = Fault("json_for_stream")
    async with ScriptedServer(default_reply="It is 4.", faults=[json_body]) as up:
        async with LLMClient(up.base_url, "m", retry=FAST) as client:
            events = [e async for e in client.stream(MSG)]
    assert "".join(e.delta for e in events) == "It is 4."
    assert events[-1].done and events[-1].usage is not None and events[-1].usage.total_tokens > 0


async def test_client_stream_with_no_event_or_no_done_is_an_error():
    from rse_fast.llm.sse import sse_payloads

    async def lines(*chunks: bytes):
        for c in chunks:
            yield c

    with pytest.raises(LLMResponseError, match="no event"):
        [x async for x in sse_payloads(lines(b": keep-alive\n", b"\n"), "u")]
    with pytest.raises(LLMConnectionError, match=r"before \[DONE\]"):
        [x async for x in sse_payloads(lines(b'data: {"choices": []}\n', b"\n"), "u")]
    close = Fault("close_stream", after_chunks=2)
    async with ScriptedServer(default_reply="a b c d", faults=[close]) as up:
        async with LLMClient(up.base_url, "m", retry=FAST) as client:
            with pytest.raises(LLMConnectionError):
                [e async for e in client.stream(MSG)]


# -- answer checks cannot freeze a worker --------------------------------------------------------
TOWERS = ("\\boxed{9^{9^{9^{9}}}}", "\\boxed{8^{8^{8^{8}}}}")


async def test_towers_in_an_sc_request_keep_health_fast_and_finish_in_time():
    def towers(body, index):
        return f"The value is {TOWERS[int(body.get('seed') or 0) % 2]}."

    async with ScriptedServer(default_reply=towers) as up:
        async with service(up, request_timeout_s=20) as (_, url), aiohttp.ClientSession() as s:
            body = {"model": "sc:m", "messages": MSG, "k": 4, "budget": 2000}
            work = asyncio.ensure_future(s.post(url + "/v1/chat/completions", json=body))
            slowest = 0.0
            while not work.done():
                t0 = time.perf_counter()
                async with s.get(url + "/health") as h:
                    assert h.status == 200
                slowest = max(slowest, time.perf_counter() - t0)
                await asyncio.sleep(0.02)
            resp = await work
            assert resp.status == 200
            data = await resp.json()
            resp.release()
    assert slowest < 0.05, slowest
    assert "boxed" in data["choices"][0]["message"]["content"]


# -- bad bodies are 400s --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [b"[" * 200_000, b'{"model": "m", "messages": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
     b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "x": '
     + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}",
     b"\xff\xfe not json", b"{"],
    ids=["200k-deep", "5k-deep messages", "100-deep field", "bytes", "cut"],
)  # fmt: skip
async def test_deep_or_broken_bodies_are_400_with_one_info_line(raw, caplog):
    async with ScriptedServer() as up, service(up) as (_, url), aiohttp.ClientSession() as s:
        with caplog.at_level(logging.INFO, logger="rse_fast"):
            async with s.post(url + "/v1/chat/completions", data=raw,
                              headers={"Content-Type": "application/json"}) as r:  # fmt: skip
                data = await r.json()
    assert r.status == 400 and data["error"]["type"] == "invalid_request_error"
    assert not any(rec.exc_info for rec in caplog.records)  # no traceback
    assert not up.requests  # nothing reached the upstream


async def test_huge_body_is_413_before_it_is_parsed():
    async with ScriptedServer() as up, service(up, max_body_bytes=10_000) as (_, url):
        async with aiohttp.ClientSession() as s:
            raw = b'{"model": "m", "messages": [' + b'{"role": "user", "content": "x"},' * 5000
            async with s.post(url + "/v1/chat/completions", data=raw) as r:
                assert r.status == 413 and "error" in await r.json()


# -- safe defaults --------------------------------------------------------------------------------
def test_no_keys_on_a_public_address_is_refused_unless_allowed():
    cfg = ServeConfig(["http://127.0.0.1:9/v1"])
    check_exposure(cfg, "127.0.0.1")
    check_exposure(cfg, "::1")
    check_exposure(cfg, "localhost")
    with pytest.raises(InsecureServiceError, match="--allow-no-auth"):
        check_exposure(cfg, "0.0.0.0")
    check_exposure(ServeConfig(["http://127.0.0.1:9/v1"], allow_no_auth=True), "0.0.0.0")
    check_exposure(ServeConfig(["http://127.0.0.1:9/v1"], api_keys=["k"]), "0.0.0.0")


def test_cli_refuses_public_bind_without_keys_and_never_takes_the_env_key(monkeypatch, capsys):
    from rse_fast.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator")
    monkeypatch.delenv("RSE_FAST_API_KEYS", raising=False)
    code = main(["serve", "--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"])
    assert code == 1 and "without API keys" in capsys.readouterr().err
    import argparse

    from rse_fast.cli.serve import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--upstream", "http://x/v1"])
    assert args.upstream_api_key is None  # $OPENAI_API_KEY is not taken silently


async def test_global_cap_refuses_before_the_body_is_read():
    cfg = dict(max_concurrency=2, per_key_concurrency=10, queue_timeout_s=0.0)  # no queue
    async with ScriptedServer(default_reply="ok", latency=0.5) as up:
        async with service(up, **cfg) as (_, url):
            async with aiohttp.ClientSession() as s:

                async def call(client_ip: str) -> int:
                    body = {"model": "m", "messages": MSG, "user": client_ip}
                    async with s.post(url + "/v1/chat/completions", json=body) as r:
                        await r.read()
                        return r.status

                statuses = await asyncio.gather(*(call(str(i)) for i in range(5)))
    assert sorted(statuses) == [200, 200, 429, 429, 429]
    assert len(up.requests) == 2


async def test_global_cap_queues_callers_of_every_bucket():
    async with ScriptedServer(default_reply="ok", latency=0.3) as up:
        async with service(up, max_concurrency=2, per_key_concurrency=10) as (svc, url):
            async with aiohttp.ClientSession() as s:

                async def call() -> int:
                    async with s.post(url + "/v1/chat/completions", json={
                        "model": "m", "messages": MSG
                    }) as r:  # fmt: skip
                        await r.read()
                        return r.status

                statuses = await asyncio.gather(*(call() for _ in range(5)))
            assert statuses == [200] * 5 and svc.metrics.queue.queued == 3


async def test_rse_against_a_server_that_ignores_stream_still_builds_its_bank():
    """A gateway that answers streamed requests with one JSON body: the streamed
    distillations are read as whole replies, so the bank is not silently empty; a reply
    that does not parse is counted as unparseable in progress."""
    from rse_fast.encoder import Encoder
    from rse_fast.rse.config import RSEConfig
    from rse_fast.rse.engine import RSE

    from fakes.scripted_model import MECHANISM, PROBLEM, reply

    seen = []
    json_always = lambda i, body: Fault("json_for_stream")  # noqa: E731
    async with ScriptedServer(default_reply=reply, faults=json_always) as up:
        client = LLMClient(up.base_url, "m", retry=FAST)
        cfg = RSEConfig(rounds=1, k=2, **MECHANISM)
        async with client:
            result = await RSE(client, Encoder(), cfg, progress=seen.append).solve(PROBLEM)
    assert any(b.get("stream") for b in up.requests)  # distillation asked for a stream
    assert result.bank_sizes["negative"] == 1 and result.rounds[0].unparseable == 0

    async with ScriptedServer(default_reply=lambda b, i: "no json at all") as up:
        client = LLMClient(up.base_url, "m", retry=FAST)
        cfg = RSEConfig(rounds=1, k=2, distill_retries=0, **MECHANISM)
        async with client:
            result = await RSE(client, Encoder(), cfg, progress=seen.append).solve(PROBLEM)
    assert result.rounds[0].unparseable == 2 and seen[-1].unparseable == 2
