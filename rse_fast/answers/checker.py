"""Equivalence checks that can be killed: math-verify (sympy) runs in worker *processes*.

Why processes: a symbolic check such as ``9^{9^{9^{9}}}`` against ``8^{8^{8^{8}}}`` can run for
hours inside mpmath while holding the GIL; a thread that is abandoned on timeout keeps running
and starves the event loop of the service or the eval runner. A worker process that overruns
its time is killed and replaced, so the caller gets an answer within the timeout: ``EQUAL``,
``DIFFERENT`` or ``UNDECIDED`` (a timed-out or refused check, counted, never a silent False).
A cheap guard refuses, before any worker sees them, expressions too long or with exponent
towers no check could evaluate in time.
"""

from __future__ import annotations

import enum
import logging
import multiprocessing
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

#: Characters of one answer a symbolic check accepts (longer ones are undecided).
MAX_CHARS = 200
#: Exponent towers deeper than this (``a^{b^{c}}`` is 2) are undecided.
MAX_TOWER = 1
#: Digits of a literal exponent beyond which a power is undecided (10^{1000} is not worth it).
MAX_EXPONENT_DIGITS = 4
_POWER = re.compile(r"\^\s*\{?\s*(-?\d+)")
_UNBRACED_CHAIN = re.compile(r"(?:\^\s*[\w.]+\s*)+")
_DEFAULT_TIMEOUT_S = 2.0


class Verdict(enum.Enum):
    EQUAL = "equal"
    DIFFERENT = "different"
    UNDECIDED = "undecided"


def tower_depth(text: str) -> int:
    """How many exponents nest in ``text`` (``2^{3^{4}}`` → 2; ``2^3 + 4^5`` → 1)."""
    depth = best = 0
    stack: list[bool] = []  # per open brace: does it open an exponent?
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "^":
            j = i + 1
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                stack.append(True)
                depth += 1
                best = max(best, depth)
                i = j + 1
                continue
            best = max(best, depth + 1)
            chain = _UNBRACED_CHAIN.match(text, i)  # a^b^c: a tower without braces
            if chain is not None:
                best = max(best, depth + chain.group(0).count("^"))
        elif ch == "{":
            stack.append(False)
        elif ch == "}" and stack and stack.pop():
            depth -= 1
        i += 1
    return best


def refuse(text: str) -> str | None:
    """Why ``text`` cannot be checked in time, or None when it can."""
    if len(text) > MAX_CHARS:
        return f"longer than {MAX_CHARS} characters"
    if tower_depth(text) > MAX_TOWER:
        return "an exponent tower"
    for m in _POWER.finditer(text):
        if len(m.group(1).lstrip("-")) > MAX_EXPONENT_DIGITS:
            return "an exponent too large to evaluate"
    return None


def serve_checks(conn: Connection) -> None:
    """A worker process: answer ``(a, b)`` requests with True/False until the pipe closes,
    or None for a check that cannot run (math-verify not installed, or it raised): that is
    undecided, never a claim that the answers differ."""
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    try:
        from math_verify import parse, verify
    except ImportError:  # the extra is not installed: no check can run
        parse = verify = None
    conn.send("ready")
    while True:
        try:
            a, b = conn.recv()
        except (EOFError, OSError):
            return
        equal: bool | None = None
        if parse is not None and verify is not None:
            try:
                ga = parse(f"${a}$", parsing_timeout=None)
                gb = parse(f"${b}$", parsing_timeout=None)
                equal = bool(ga and gb and verify(ga, gb, timeout_seconds=None))
            except Exception:
                equal = None
        conn.send(equal)


#: Seconds a new worker may take to start (import sympy) before it counts as broken.
START_TIMEOUT_S = 60.0


@dataclass
class _Worker:
    process: Any
    conn: Connection
    ready: bool = False

    def wait_ready(self) -> bool:
        """Block until the worker has imported its checker (its start is not check time)."""
        if not self.ready and self.conn.poll(START_TIMEOUT_S):
            self.ready = self.conn.recv() == "ready"
        return self.ready


@dataclass
class CheckerStats:
    checks: int = 0
    undecided: int = 0
    refused: int = 0
    killed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"checks": self.checks, "undecided": self.undecided, "refused": self.refused,
                "killed": self.killed}  # fmt: skip


@dataclass
class CheckerPool:
    """``size`` worker processes (started on first use). ``check`` blocks the calling thread
    (never the event loop: async code calls it through ``off_loop``) for at most
    ``timeout_s`` of checking, plus the wait for a free worker."""

    size: int = 2
    timeout_s: float = _DEFAULT_TIMEOUT_S
    #: what a worker process runs (importable by name: workers are spawned)
    target: Callable[[Connection], None] = serve_checks
    stats: CheckerStats = field(default_factory=CheckerStats)
    _idle: list[_Worker] = field(default_factory=list)
    _started: int = 0
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _cache: dict[tuple[str, str], bool] = field(default_factory=dict)

    def _spawn(self) -> _Worker:
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=self.target, args=(theirs,), daemon=True, name="answer-check")
        proc.start()
        theirs.close()
        return _Worker(proc, mine)

    def _take(self) -> _Worker:
        with self._cond:
            while not self._idle and self._started >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return self._spawn()
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _give(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                self._started -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def check(self, a: str, b: str, timeout_s: float | None = None) -> Verdict:
        """math-verify's verdict on two normalised answers, within the timeout."""
        key = (a, b) if a <= b else (b, a)
        with self._cond:
            self.stats.checks += 1
            known = self._cache.get(key)
        if known is not None:
            return Verdict.EQUAL if known else Verdict.DIFFERENT
        why = refuse(a) or refuse(b)
        if why is not None:
            with self._cond:
                self.stats.refused += 1
                self.stats.undecided += 1
            log.info("answer check refused (%s): %.60r vs %.60r", why, a, b)
            return Verdict.UNDECIDED
        worker: _Worker | None = self._take()
        assert worker is not None
        try:
            if not worker.wait_ready():
                raise OSError("checker worker did not start")
            worker.conn.send((a, b))
            if worker.conn.poll(self.timeout_s if timeout_s is None else timeout_s):
                reply = worker.conn.recv()
                self._give(worker)
                worker = None
                if reply is None:  # the check could not run
                    with self._cond:
                        self.stats.undecided += 1
                    return Verdict.UNDECIDED
                equal = bool(reply)
                with self._cond:
                    if len(self._cache) > 4096:
                        self._cache.clear()
                    self._cache[key] = equal
                return Verdict.EQUAL if equal else Verdict.DIFFERENT
        except (EOFError, OSError, BrokenPipeError):
            pass
        finally:
            if worker is not None:  # overran or died: kill it, a fresh one takes its place
                self._kill(worker)
                self._give(None)
        with self._cond:
            self.stats.undecided += 1
        return Verdict.UNDECIDED

    def _kill(self, worker: _Worker) -> None:
        with self._cond:
            self.stats.killed += 1
        worker.process.kill()
        worker.process.join(1.0)
        worker.conn.close()

    def warm(self) -> None:
        """Start the workers now, without waiting for them (a service does this before it
        serves, so a request rarely waits for a worker to import sympy)."""
        with self._cond:
            missing = self.size - self._started
            self._started += max(0, missing)
        for _ in range(max(0, missing)):
            self._give(self._spawn())

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for w in idle:
            w.conn.close()
            w.process.kill()
            w.process.join(1.0)


#: The process-wide pool every equivalence check uses.
POOL = CheckerPool()
