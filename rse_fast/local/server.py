"""Embedded local LLM: llama.cpp's HTTP server on loopback (the prebuilt wheel's, or a
``llama-server`` built from source), for the demo and integration tests. ``LocalServer`` starts
it on a free port with parallel slots, waits for its health endpoint, and always stops it: on
exit, on cancellation, and (via PDEATHSIG) if we die."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import aiohttp

from rse_fast.errors import BuildError, LocalServerError
from rse_fast.local import prebuilt
from rse_fast.local.build import build_server, server_path
from rse_fast.local.models import fetch_model, resolve_gguf
from rse_fast.registry import cache_dir, default_llm, llm_spec

_log = logging.getLogger(__name__)
LOG_ROTATE_BYTES = 10 * 2**20


BACKENDS = ("auto", "prebuilt", "build")


def setup_server(build: bool = False, log: Callable[[str], None] = _log.info) -> Path:
    """The prebuilt server (unpacked once) where it runs, else llama-server built from source;
    says which and why. A prebuilt wheel that fails to download or load falls back to the
    build, saying so."""
    choice = prebuilt.choose(build)
    if choice.backend == "prebuilt":
        log(f"llama.cpp server: prebuilt ({choice.reason})")
        try:
            return prebuilt.install(log=log)
        except BuildError as exc:
            log(f"the prebuilt server is not usable here ({exc}); building from source instead")
    else:
        log(f"llama.cpp server: built from source ({choice.reason})")
    binary = build_server(log=log)
    log(f"llama-server ready: {binary}")
    return binary


def setup(
    model: str | None = None, log: Callable[[str], None] = _log.info, build: bool = False
) -> tuple[Path, Path]:
    """Provide a llama.cpp server (:func:`setup_server`) and fetch (or reuse) a catalogue
    model. Idempotent."""
    name = model or default_llm()
    llm_spec(name)  # unknown names fail before any download or build
    server = setup_server(build, log)
    gguf = fetch_model(name, log=log)
    log(f"model ready: {gguf}")
    return server, gguf


def server_prefix(
    backend: str, llama_server: str | os.PathLike[str] | None
) -> tuple[str, list[str]]:
    """Which server runs ("prebuilt" or "build") and the command that starts it; llama-server's
    flags follow the command."""
    if llama_server is not None:
        binary = Path(llama_server)
        if not binary.is_file():
            raise LocalServerError(
                f"llama-server not found at {binary}: run `rse-fast local setup` "
                "(or pass --llama-server PATH)"
            )
        return "build", [str(binary)]
    if backend not in BACKENDS:
        raise LocalServerError(f"unknown local backend {backend!r}: one of {', '.join(BACKENDS)}")
    if backend in ("auto", "prebuilt") and prebuilt.is_installed():
        return "prebuilt", prebuilt.launcher_command(prebuilt.site_dir())
    if backend in ("auto", "build") and server_path().is_file():
        return "build", [str(server_path())]
    how = "rse-fast local setup --build" if backend == "build" else "rse-fast local setup"
    raise LocalServerError(
        f"no {'' if backend == 'auto' else backend + ' '}llama.cpp server is set up: run `{how}` "
        "(or pass --llama-server PATH)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


#: Runs in a fresh interpreter (no threads, so no fork hazards): asks Linux to SIGTERM the
#: server when its parent dies, then execs it. PDEATHSIG survives execve.
_EXEC_WITH_PDEATHSIG = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, 15)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


class LocalServer:
    """``async with LocalServer("smollm2-135m") as srv: srv.base_url`` → http://127.0.0.1:P/v1"""

    def __init__(
        self,
        model: str | None = None,
        *,
        gguf: str | os.PathLike[str] | None = None,
        llama_server: str | os.PathLike[str] | None = None,
        backend: str = "auto",
        parallel: int = 4,
        ctx_per_slot: int = 4096,
        threads: int | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 180.0,
        keep_log: bool = False,
    ) -> None:
        self.model = model or default_llm()
        self.gguf = resolve_gguf(self.model if gguf is None else None, gguf)
        self.backend, self.prefix = server_prefix(backend, llama_server)
        self.parallel, self.ctx_per_slot, self.threads = parallel, ctx_per_slot, threads
        self.host, self.port = host, port
        self.startup_timeout_s = startup_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        # one log per model, rotated past LOG_ROTATE_BYTES; removed when the server stops
        # cleanly unless ``keep_log``, kept when it failed (its errors name it)
        self.log_path = cache_dir() / "logs" / f"llama-server-{self.gguf.stem}.log"
        self.keep_log = keep_log
        self._failed = False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return self.gguf.stem

    def command(self) -> list[str]:
        cores = len(os.sched_getaffinity(0))
        return [
            *self.prefix,
            "-m",
            str(self.gguf),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "-np",
            str(self.parallel),
            "-c",
            str(self.parallel * self.ctx_per_slot),
            "-t",
            str(self.threads or cores),
            "--jinja",
            "--no-webui",
        ]

    async def start(self) -> LocalServer:
        self.port = self.port or free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        log.write(f"=== llama-server start {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
        log.flush()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _EXEC_WITH_PDEATHSIG,
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        try:
            await self._wait_healthy()
        except LocalServerError:
            self._failed = True
            await self.stop()
            raise
        except BaseException:
            await self.stop()
            raise
        return self

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{self.host}:{self.port}/health"
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.returncode is not None:
                    raise LocalServerError(
                        f"llama-server exited ({self.proc.returncode}); its log is "
                        f"{self.log_path}:\n" + self.log_tail()
                    )
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise LocalServerError(
            f"llama-server not healthy after {self.startup_timeout_s:.0f}s; its log is "
            f"{self.log_path}:\n" + self.log_tail()
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(deque(fh, maxlen=lines))
        except OSError:
            return "(no log)"

    async def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL after 10 s; safe to call twice. A
        cancellation while waiting still kills the server, then propagates."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), 10)
            except asyncio.TimeoutError:
                self._kill(proc)
                await proc.wait()
            except asyncio.CancelledError:
                self._kill(proc)
                raise
        if not (self.keep_log or self._failed):
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    @staticmethod
    def _kill(proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    async def __aenter__(self) -> LocalServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_forever(
    server: LocalServer, on_ready: Callable[[LocalServer], None] | None = None
) -> None:
    """``rse-fast local serve``: run until Ctrl-C, then stop the server cleanly."""
    async with server:
        _log.info("llama-server (%s) at %s", server.model_name, server.base_url)
        if on_ready is not None:
            on_ready(server)
        await asyncio.Event().wait()
