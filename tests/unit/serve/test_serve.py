"""The OpenAI-compatible service, driven by the official openai SDK and by raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request

import aiohttp
import openai
import pytest
from conftest import running_service
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rse_fast.llm import RetryPolicy
from rse_fast.serve import Metrics, ServeConfig, Service
from rse_fast.testing import Fault, Reply, ScriptedServer

from fakes.scripted_model import GOLD, PROBLEM, reply


@contextlib.asynccontextmanager
async def service(upstream: ScriptedServer, **cfg):
    async with running_service(upstream, **cfg) as (svc, url):
        yield svc, url + "/v1"


MSG = [{"role": "user", "content": PROBLEM}]


async def test_openai_sdk_pass_through_and_models():
    async with ScriptedServer(default_reply=reply, model="tiny") as up, service(up) as (_, url):
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        res = await client.chat.completions.create(model="tiny", messages=MSG, max_tokens=50)
        assert "boxed{32}" in res.choices[0].message.content and res.usage.total_tokens > 0
        models = [m.id for m in (await client.models.list()).data]
        assert "tiny" in models and "rse:tiny" in models
        await client.close()
    assert up.requests[0]["max_tokens"] == 50  # fields pass straight through


async def test_openai_sdk_rse_with_details_and_full_usage():
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        res = await client.chat.completions.create(
            model="rse:scripted",
            messages=MSG,
            # the fake's round 1 is unanimous (and wrong): recycling must not settle on it
            extra_body={"rounds": 3, "k": 2, "rse_details": True, "settle_margin": None},
        )
        await client.close()
    assert "boxed{42}" in res.choices[0].message.content
    details = res.model_extra["rse_fast"]
    assert details["answer"] == GOLD and len(details["rounds"]) == 3
    assert details["rounds"][0]["bank_sizes"]["negative"] == 1
    # usage counts every internal call: 3 rounds × 2 rollouts, rounds 1-2 distilled (the
    # last round's bank is read by nothing)
    assert len(up.requests) == 10
    words = sum(len(" ".join(m["content"] for m in b["messages"]).split()) for b in up.requests)
    assert res.usage.prompt_tokens == words


async def test_rse_details_say_when_the_budget_bought_no_distillation():
    """A budget whose guided round's worst case (``max_tokens`` per call, under the cap)
    leaves no room for round 1's distillations runs rse as a vote in rounds: the details
    say so, with the tokens needed and left; a budget that fits one says nothing."""
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:
            found = []
            for max_tokens in (1024, 96):
                body = {
                    "model": "rse:scripted",
                    "messages": MSG,
                    "k": 3,
                    "budget": 3000,
                    "max_tokens": max_tokens,
                    "rse_details": True,
                    "settle_margin": None,
                }
                res = await (await s.post(url + "/chat/completions", json=body)).json()
                found.append(res["rse_fast"].get("distillation_unaffordable"))
    short, fits = found
    assert short is not None and short["round"] == 1 and short["needed"] > short["left"] > 0
    assert fits is None


async def test_sc_stops_once_its_vote_is_settled_by_default_and_says_so():
    """The service's sc carries the measured default (the Beta stop at the dev-chosen ε);
    usage says which rule ran and what it left; ``stop_epsilon: null`` spends the budget."""
    from rse_fast.methods.defaults import STOP_EPSILON

    body = {"model": "sc:scripted", "messages": MSG, "k": 4, "budget": 6000, "max_tokens": 64}
    async with ScriptedServer(default_reply=reply) as up:
        async with service(up) as (_, url), aiohttp.ClientSession() as s:
            stopped = await (await s.post(url + "/chat/completions", json=body)).json()
            calls_stopped = len(up.requests)
            whole = {**body, "stop_epsilon": None}
            spent = await (await s.post(url + "/chat/completions", json=whole)).json()
            calls_whole = len(up.requests) - calls_stopped
    usage = stopped["usage"]
    assert usage["stop_rule"] == f"beta, epsilon {STOP_EPSILON}" and usage["stopped"] is True
    assert usage["budget_unspent"] > 0 and usage["total_tokens"] + usage["budget_unspent"] == 6000
    assert "stop_rule" not in spent["usage"] and calls_whole > calls_stopped
    assert spent["usage"]["total_tokens"] > usage["total_tokens"]


@pytest.mark.parametrize("cache", ["llama.cpp", "vllm", None])
async def test_method_reply_carries_the_cache_and_thinking_the_upstream_reported(cache):
    """What a caller pays: a method's usage sums the upstream's own details (the prompt its
    cache served, the completion spent thinking) over every call, in the reply and in the
    stream's usage chunk; an upstream that reports no cache gets no cache field, not 0. The
    chosen answer's reasoning trace is its message's ``reasoning_content``."""
    thinking = Reply("It is \\boxed{4}.", reasoning="two and two make four here")
    body = {"model": "sc:scripted", "messages": MSG, "k": 2, "budget": 2000}
    async with ScriptedServer(default_reply=thinking, prefix_cache=cache) as up:
        async with service(up) as (_, url), aiohttp.ClientSession() as s:
            whole = await (await s.post(url + "/chat/completions", json=body)).json()
            sent_whole = list(up.usages)
            streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
            async with s.post(url + "/chat/completions", json=streamed) as r:
                events = [line async for line in r.content if line.startswith(b"data: {")]
            sent_stream = up.usages[len(sent_whole) :]
    # the chosen answer keeps the trace behind it, whole and streamed (before its content)
    assert whole["choices"][0]["message"]["reasoning_content"] == thinking.reasoning
    deltas = [json.loads(e.removeprefix(b"data: "))["choices"] for e in events]
    deltas = [c[0]["delta"] for c in deltas if c]
    said = [(k, d[k]) for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    assert said == [("reasoning_content", thinking.reasoning), ("content", thinking.content)]
    for usage, sent in (
        (whole["usage"], sent_whole),
        (json.loads(events[-1].removeprefix(b"data: "))["usage"], sent_stream),
    ):
        assert len(sent) >= 2 and usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in sent)
        thought = sum(u["completion_tokens_details"]["reasoning_tokens"] for u in sent)
        assert usage["completion_tokens_details"] == {"reasoning_tokens": thought} and thought
        if cache is None:
            assert "prompt_tokens_details" not in usage
        else:
            served = sum(u["prompt_tokens_details"]["cached_tokens"] for u in sent)
            assert usage["prompt_tokens_details"] == {"cached_tokens": served} and served > 0


async def test_streaming_progress_then_answer():
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model="rse:scripted",
            messages=MSG,
            stream=True,
            extra_body={"rounds": 3, "k": 2, "settle_margin": None},
        )
        chunks = [c async for c in stream]
        passthrough = await client.chat.completions.create(
            model="scripted", messages=MSG, stream=True
        )
        plain = "".join([c.choices[0].delta.content or "" async for c in passthrough if c.choices])
        await client.close()
    progress = [c for c in chunks if c.model_extra.get("rse_fast_progress")]
    assert progress and progress[-1].model_extra["rse_fast_progress"]["round_done"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "boxed{42}" in text and chunks[-1].choices[0].finish_reason == "stop"
    assert "boxed{32}" in plain


async def test_client_disconnect_cancels_the_work():
    async with ScriptedServer(default_reply=reply, latency=0.3) as up, service(up) as (svc, url):
        async with aiohttp.ClientSession() as s:
            body = {"model": "rse:scripted", "messages": MSG, "stream": True, "rounds": 8, "k": 2}
            async with s.post(url + "/chat/completions", json=body) as resp:
                await resp.content.readline()
        await asyncio.sleep(1.0)
        seen = len(up.requests)
        await asyncio.sleep(1.0)
        assert len(up.requests) == seen < 32  # nothing new once the client left
        assert svc.metrics.in_flight == 0


async def test_auth_size_and_concurrency_limits(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# keys\nsecret-1\n")
    async with ScriptedServer(default_reply=reply, latency=0.4) as up:
        cfg = dict(
            api_keys=ServeConfig.keys_from(path=str(keys)),
            max_body_bytes=2000,
            per_key_concurrency=1,
            queue_timeout_s=0.0,  # refuse at once: the queue is tested below
        )
        async with service(up, **cfg) as (_, url), aiohttp.ClientSession() as s:
            body = {"model": "scripted", "messages": MSG}
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                async with s.post(url + "/chat/completions", json=body, headers=headers) as r:
                    assert r.status == 401
                    assert (await r.json())["error"]["type"] == "authentication_error"
            ok = {"Authorization": "Bearer secret-1"}
            big = {"model": "scripted", "messages": [{"role": "user", "content": "x" * 5000}]}
            async with s.post(url + "/chat/completions", json=big, headers=ok) as r:
                assert r.status == 413 and "error" in await r.json()

            async def call() -> aiohttp.ClientResponse:
                async with s.post(url + "/chat/completions", json=body, headers=ok) as r:
                    await r.read()
                    return r

            a, b = await asyncio.gather(call(), call())
            assert sorted([a.status, b.status]) == [200, 429]
            limited = a if a.status == 429 else b
            assert limited.headers["Retry-After"] == "1"
            async with s.get(url.removesuffix("/v1") + "/health") as r:
                assert r.status == 200  # health needs no key


async def test_a_caller_over_its_limit_waits_in_the_queue_before_a_429():
    async with ScriptedServer(default_reply=reply, latency=0.3) as up:
        async with (
            service(up, per_key_concurrency=16) as (svc, url),
            aiohttp.ClientSession() as s,
        ):
            body = {"model": "scripted", "messages": MSG}

            async def call() -> int:
                async with s.post(url + "/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

            statuses = await asyncio.gather(*(call() for _ in range(32)))
            assert statuses == [200] * 32  # 16 served, 16 waited a little, none bounced
            assert svc.metrics.queue.queued == 16 and svc.metrics.queue.waiting == 0
            async with s.get(url.removesuffix("/v1") + "/metrics") as r:
                assert "rse_fast_queued_total 16" in await r.text()
    async with ScriptedServer(default_reply=reply, latency=1.5) as up:
        async with (
            service(up, per_key_concurrency=1, queue_timeout_s=0.2) as (svc, url),
            aiohttp.ClientSession() as s,
        ):

            async def timed() -> tuple[int, float, str]:
                t0 = asyncio.get_running_loop().time()
                async with s.post(url + "/chat/completions", json=body) as r:
                    text = await r.text()
                    return r.status, asyncio.get_running_loop().time() - t0, text

            (a, _, _), (b, waited, text) = await asyncio.gather(timed(), timed())
            assert (a, b) == (200, 429) and "after waiting in the queue" in text
            assert 0.2 <= waited < 1.4  # refused when the wait ran out, not when a slot freed
            assert svc.metrics.queue.timed_out == 1


async def test_the_gate_serves_waiters_in_order_and_a_cancelled_waiter_keeps_nothing():
    from rse_fast.serve.auth import Gate

    gate = Gate([], per_key=1, total=2, queue_s=5.0)
    await gate.enter("a")
    order: list[str] = []

    async def wait(bucket: str, name: str) -> None:
        await gate.enter(bucket)
        order.append(name)

    first = asyncio.ensure_future(wait("a", "a1"))
    second = asyncio.ensure_future(wait("a", "a2"))
    other = asyncio.ensure_future(wait("b", "b1"))  # its own bucket has room: not held back
    await asyncio.sleep(0.01)
    assert order == ["b1"] and gate.in_use == 2
    gate.leave("b")
    gate.leave("a")
    await asyncio.sleep(0.01)
    assert order == ["b1", "a1"] and gate.in_use == 1
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    gate.leave("a")
    assert gate.in_use == 0 and gate.stats.waiting == 0
    await asyncio.gather(first, other)


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [
        (Fault("status", status=500), 502, "upstream_error"),
        (Fault("status", status=429, retry_after=0), 429, "rate_limit_error"),
        (Fault("status", status=400), 400, "invalid_request_error"),
        (Fault("reset"), 502, "upstream_error"),
    ],
)
async def test_upstream_faults_become_typed_errors(fault, status, kind):
    async with ScriptedServer(faults=lambda i, b: fault) as up, service(up) as (svc, url):
        svc.client.transport.retry = RetryPolicy(max_attempts=2, base_delay_s=0.001)
        async with (
            aiohttp.ClientSession() as s,
            s.post(url + "/chat/completions", json={"model": "scripted", "messages": MSG}) as r,
        ):
            data = await r.json()
    assert r.status == status and data["error"]["type"] == kind


async def test_metrics_count_requests_tokens_and_errors():
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:
            plain = {"model": "scripted", "messages": MSG}
            first = await (await s.post(url + "/chat/completions", json=plain)).json()
            streamed = {**plain, "stream": True, "stream_options": {"include_usage": True}}
            async with s.post(url + "/chat/completions", json=streamed) as r:
                events = [line async for line in r.content if line.startswith(b"data: {")]
            await (await s.post(url + "/chat/completions", data=b"{bad")).read()
            text = await (await s.get(url.removesuffix("/v1") + "/metrics")).text()
    stream_usage = json.loads(events[-1].removeprefix(b"data: "))["usage"]
    tokens = first["usage"]["total_tokens"] + stream_usage["total_tokens"]
    assert 'rse_fast_requests_total{method="passthrough",status="200"} 2' in text
    assert f'rse_fast_tokens_total{{role="passthrough"}} {tokens}' in text
    assert 'rse_fast_errors_total{type="invalid_request_error"} 1' in text


async def test_metrics_say_whether_rse_showed_its_bank():
    """An RSE request whose bank guided a round counts as shown; one whose vote settled in
    round 1 (no distillation, no bank) as not shown, with no distillation tokens wasted."""
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:
            for settle in (None, 1.0):  # the fake's round 1 is unanimous: 1.0 settles it
                body = {"model": "rse:scripted", "messages": MSG, "rounds": 2, "k": 2,
                        "settle_margin": settle}  # fmt: skip
                assert (await s.post(url + "/chat/completions", json=body)).status == 200
            text = await (await s.get(url.removesuffix("/v1") + "/metrics")).text()
    assert 'rse_fast_rse_runs_total{bank_shown="true"} 1' in text
    assert 'rse_fast_rse_runs_total{bank_shown="false"} 1' in text
    assert "rse_fast_rse_unshown_distill_tokens_total 0" in text


def test_unshown_distillation_tokens_are_counted():
    from rse_fast.methods.request_fields import RunReport
    from rse_fast.methods.rse_method import BANK_SHOWN

    metrics = Metrics()
    metrics.add_outcome({"explore": 900, "distill": 300}, RunReport(BANK_SHOWN, False))
    metrics.add_outcome({"explore": 900, "distill": 200}, RunReport(BANK_SHOWN, True))
    metrics.add_outcome({"explore": 500}, None)  # not an RSE request
    text = metrics.render()
    assert "rse_fast_rse_unshown_distill_tokens_total 300" in text
    assert 'rse_fast_tokens_total{role="distill"} 500' in text
    assert 'rse_fast_rse_runs_total{bank_shown="false"} 1' in text
    assert 'rse_fast_rse_runs_total{bank_shown="true"} 1' in text


async def test_latency_histogram_buckets_are_cumulative():
    """Each request lands in one bucket; the rendered ``le`` buckets count every request at or
    below their bound, as Prometheus expects."""
    metrics = Metrics()
    for seconds in (0.004, 0.005, 0.3, 0.3, 7.0, 400.0):
        metrics.observe("passthrough", 200, seconds)
    text = metrics.render()
    expected = {"0.005": 2, "0.01": 2, "0.25": 2, "0.5": 4, "5": 4, "10": 5, "300": 5, "+Inf": 6}
    for bound, count in expected.items():
        assert f'rse_fast_request_seconds_bucket{{le="{bound}"}} {count}' in text, bound


async def test_unknown_paths_and_methods_are_json_errors():
    """No middleware wraps the routes: the catch-all still answers 404 and 405 (with Allow)
    as OpenAI-shaped JSON, and with keys configured a wrong key still gets a JSON 401."""
    async with ScriptedServer() as up, service(up, api_keys=["k"]) as (_, url):
        root = url.removesuffix("/v1")
        auth = {"Authorization": "Bearer k"}
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/chat/completions", headers=auth) as r:
                not_allowed = (r.status, r.headers.get("Allow"), await r.json())
            async with s.get(root + "/v1/nothing-here", headers=auth) as r:
                missing = (r.status, r.content_type, await r.json())
            async with s.get(root + "/v1/nothing-here") as r:
                unauthorized = (r.status, await r.json())
    assert not_allowed[0] == 405 and not_allowed[1] == "POST"
    assert not_allowed[2]["error"]["type"] == "invalid_request_error"
    assert missing[0] == 404 and missing[1] == "application/json"
    assert missing[2]["error"]["type"] == "not_found_error"
    assert unauthorized[0] == 401 and unauthorized[1]["error"]["code"] == "invalid_api_key"


# -- fuzzing: malformed requests always get a 4xx JSON error, never a 500 ----------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
#: Nesting as deep as an attacker likes, and bodies over the size limit.
deep_or_huge = st.one_of(
    st.integers(65, 200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(65, 5_000).map(
        lambda n: (
            b'{"model": "x", "messages": [{"role": "user", "content": "hi"}], "x": '
            + b'{"a":' * n
            + b"1"
            + b"}" * n
            + b"}"
        )
    ),
    st.integers(0, 2).map(lambda k: b'{"model": "x", "messages": "' + b"x" * (2 << 20) + b'"}'),
)
bodies = st.one_of(
    deep_or_huge,
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {
            "model": st.sampled_from(["rse:", "rse:x", "sc:x", "bogus:x", "", 3]),
            "messages": st.one_of(json_values, st.just([{"role": "user", "content": "hi"}])),
        },
        optional={
            "k": json_values,
            "rounds": json_values,
            "tau": json_values,
            "budget": json_values,
            "n": json_values,
        },
    ).map(lambda d: json.dumps(d).encode()),
)


@pytest.fixture(scope="module")
def threaded_service():
    from conftest import threaded_server

    with threaded_server(faults=lambda i, b: Fault("status", status=400)) as up:
        loop = asyncio.new_event_loop()
        svc = Service(ServeConfig([up.base_url]))
        runner = aiohttp.web.AppRunner(svc.app())
        loop.run_until_complete(runner.setup())
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        import threading

        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
def test_malformed_requests_get_4xx_json_never_500(threaded_service, body):
    req = urllib.request.Request(
        threaded_service + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    assert 400 <= status < 500, (status, payload[:200])
    assert "error" in json.loads(payload)


async def test_workers_share_one_port_and_stop_with_the_service():
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from rse_fast.local.server import free_port

    async with ScriptedServer(default_reply=reply) as up:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rse_fast.cli", "serve", "--upstream", up.base_url,
             "--port", str(port), "--workers", "2"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            line = await asyncio.to_thread(proc.stdout.readline)
            assert "2 workers" in line
            children = [
                int(p)
                for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            ]
            workers = [
                c for c in children if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()
            ]
            assert len(workers) == 2
            async with aiohttp.ClientSession() as s:
                for _ in range(4):
                    body = {"model": "scripted", "messages": MSG}
                    async with s.post(
                        f"http://127.0.0.1:{port}/v1/chat/completions", json=body
                    ) as r:
                        assert r.status == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 20)
        await asyncio.sleep(0.5)
        for pid in workers:
            assert (
                not os.path.exists(f"/proc/{pid}")
                or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
            )


@pytest.mark.parametrize(
    "extra",
    [{}, {"stream": True}, {"model": "sc:scripted", "n": 1}],
    ids=["pass-through", "streamed pass-through", "method"],
)
async def test_request_over_the_service_deadline_is_a_504_json_error(extra):
    """An upstream slower than --timeout: the caller gets a 504 JSON error at the deadline,
    not a hang until the upstream answers."""
    async with (
        ScriptedServer(default_reply=reply, latency=1.5) as up,
        service(up, request_timeout_s=0.2) as (svc, url),
    ):
        body = {"model": "scripted", "messages": MSG, **extra}
        t0 = asyncio.get_running_loop().time()
        async with aiohttp.ClientSession() as s, s.post(url + "/chat/completions", json=body) as r:
            data = await r.json()
        waited = asyncio.get_running_loop().time() - t0
    assert r.status == 504 and r.content_type == "application/json"
    assert data["error"]["type"] == "timeout" and data["error"]["code"] == "timeout"
    assert 0.2 <= waited < 1.0, waited
    assert (
        svc.metrics.in_flight == 0
        and svc.metrics.requests[("sc" if extra.get("model") else "passthrough", 504)] == 1
    )


async def test_scripted_upstream_reports_each_tagged_requests_time_in_its_handler():
    """What bench/serve.py subtracts from a caller's latency: per ``user`` tag, the time the
    request spent in the upstream's handler (its injected latency and the timers' lateness)."""
    async with ScriptedServer(latency=0.05) as up, aiohttp.ClientSession() as s:
        for user in ("a-0", "a-1"):
            body = {"model": "scripted", "messages": MSG, "user": user}
            async with s.post(up.base_url + "/chat/completions", json=body) as r:
                assert r.status == 200
        async with s.get(up.base_url.removesuffix("/v1") + "/debug/requests") as r:
            rows = await r.json()
    assert [row["user"] for row in rows] == ["a-0", "a-1"]
    assert all(0.05 <= row["held_s"] < 0.5 for row in rows), rows


async def test_a_fresh_service_shows_each_declared_family_counter_at_zero():
    """The counters families declare are on /metrics from the start, before any run, so a
    dashboard's rate() has a zero to start from."""
    async with ScriptedServer(default_reply=reply) as up, service(up) as (_, url):
        async with aiohttp.ClientSession() as s:
            text = await (await s.get(url.removesuffix("/v1") + "/metrics")).text()
    assert "# TYPE rse_fast_rse_runs_total counter" in text
    assert "rse_fast_rse_unshown_distill_tokens_total 0" in text
    assert "rse_fast_rse_runs_total{" not in text  # no run has reported yet
