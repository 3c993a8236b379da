"""Token ledger: every LLM call, tagged by role, so methods can be compared at equal budgets.

Roles are free-form tags; the usual ones are ``explore`` (growing the candidate pool) and
``distill``, ``judge``, ``refine``, ``fuse`` (turning the pool into one output). Which roles
count as exploration is configurable per ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rse_fast.llm.types import Message, Usage

TokenCounter = Callable[[str], int]

EXPLORATION_ROLES = frozenset({"explore"})


def approx_token_count(text: str) -> int:
    """~4 characters per token: the fallback when neither the server nor a tokenizer counts."""
    return (len(text) + 3) // 4


def count_prompt_tokens(messages: Iterable[Message], counter: TokenCounter) -> int:
    """Tokens of a chat prompt: the content of each message plus ~4 tokens of template each."""
    total = 0
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # multi-part content: count the text parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += counter(str(content)) + 4
    return total


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    role: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    endpoint: str
    n: int = 1
    usage_source: str = "reported"
    ok: bool = True
    error: str | None = None
    task: str | None = None
    #: the part of ``prompt_tokens`` the server's prefix cache served (None: not reported)
    cached_tokens: int | None = None
    #: the part of ``completion_tokens`` spent thinking (None: not reported)
    reasoning_tokens: int | None = None
    #: the server's own prefill and decode seconds (None: it sends no timings)
    prefill_s: float | None = None
    decode_s: float | None = None
    #: what the call cost outside tokens, in seconds (a checker's run, a sandbox)
    work_s: float = 0.0
    #: the prices of the model that served it, where they are not the run's (a judge on
    #: another model): a ``CostModel`` spec; None: the run's own prices
    priced_as: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RoleTotals:
    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_calls: int = 0
    latency_s: float = 0.0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Ledger:
    """Thread- and task-safe list of call records with per-role totals."""

    exploration_roles: frozenset[str] = EXPLORATION_ROLES
    records: list[CallRecord] = field(default_factory=list)
    #: a capped run's budget as settled when it ended (``settle_budget``): amount, unit,
    #: spent, and the unspent rest the run handed back (a stop once settled, a cap's room)
    budget: dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def settle_budget(self, amount: float, spent: float, unit: str = "tokens") -> None:
        """Book what a capped run was given and what it handed back unspent."""
        self.budget = {"amount": amount, "unit": unit, "spent": spent,
                       "unspent": max(0.0, amount - spent)}  # fmt: skip

    def record(self, rec: CallRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def restore(self, records: list[CallRecord]) -> None:
        """Put earlier records (e.g. from a checkpoint) in front of this ledger's own."""
        with self._lock:
            self.records[:0] = records

    def record_usage(
        self,
        role: str,
        usage: Usage,
        latency_s: float,
        endpoint: str,
        n: int = 1,
        task: str | None = None,
        priced_as: str | None = None,
    ) -> None:
        self.record(
            CallRecord(
                role=role,
                priced_as=priced_as,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                latency_s=latency_s,
                endpoint=endpoint,
                n=n,
                usage_source=usage.source,
                task=task,
                cached_tokens=usage.cached_tokens,
                reasoning_tokens=usage.reasoning_tokens,
                prefill_s=usage.timings.prompt_ms / 1e3 if usage.timings else None,
                decode_s=usage.timings.predicted_ms / 1e3 if usage.timings else None,
            )
        )

    def record_error(
        self,
        role: str,
        error: BaseException,
        latency_s: float,
        endpoint: str,
        task: str | None = None,
        bound: Usage | None = None,
        priced_as: str | None = None,
    ) -> None:
        """A call that ended in ``error``; ``bound``: what it may have cost although no usage
        came (a call cancelled or cut off after it was sent), booked as its tokens."""
        self.record(
            CallRecord(
                role=role,
                prompt_tokens=bound.prompt_tokens if bound else 0,
                completion_tokens=bound.completion_tokens if bound else 0,
                latency_s=latency_s,
                endpoint=endpoint,
                n=0,
                ok=False,
                error=f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
                task=task,
                usage_source=bound.source if bound else "reported",
                priced_as=priced_as,
            )
        )

    def by_role(self) -> dict[str, RoleTotals]:
        out: dict[str, RoleTotals] = {}
        with self._lock:
            recs = list(self.records)
        for r in recs:
            t = out.setdefault(r.role, RoleTotals())
            t.calls += 1
            t.errors += 0 if r.ok else 1
            t.prompt_tokens += r.prompt_tokens
            t.completion_tokens += r.completion_tokens
            t.estimated_calls += r.usage_source != "reported"
            t.latency_s += r.latency_s
            t.cached_tokens += r.cached_tokens or 0
        return out

    @property
    def total_tokens(self) -> int:
        with self._lock:
            return sum(r.total_tokens for r in self.records)

    @property
    def prompt_tokens(self) -> int:
        with self._lock:
            return sum(r.prompt_tokens for r in self.records)

    @property
    def completion_tokens(self) -> int:
        with self._lock:
            return sum(r.completion_tokens for r in self.records)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the servers said their prefix caches served."""
        with self._lock:
            return sum(r.cached_tokens or 0 for r in self.records)

    def usage_details(self) -> dict[str, dict[str, int]]:
        """The parts of the usage the servers reported, as OpenAI's usage nests them:
        ``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens``,
        each summed over the calls that reported it and absent where none did (a server that
        says nothing of its cache has not served 0 tokens from it)."""
        with self._lock:
            recs = list(self.records)
        out: dict[str, dict[str, int]] = {}
        for key, inner, values in (
            ("prompt_tokens_details", "cached_tokens", [r.cached_tokens for r in recs]),
            ("completion_tokens_details", "reasoning_tokens", [r.reasoning_tokens for r in recs]),
        ):
            reported = [v for v in values if v is not None]
            if reported:
                out[key] = {inner: sum(reported)}
        return out

    @property
    def exploration_tokens(self) -> int:
        with self._lock:
            return sum(r.total_tokens for r in self.records if r.role in self.exploration_roles)

    @property
    def exploitation_tokens(self) -> int:
        return self.total_tokens - self.exploration_tokens

    def tokens_of(self, *, role: str | None = None, task: str | None = None) -> int:
        """Tokens booked to calls of ``role`` and/or ``task`` (either alone narrows)."""
        return sum(
            r.total_tokens
            for r in self.records
            if (role is None or r.role == role) and (task is None or r.task == task)
        )

    def mean_call(
        self, role: str, *, completion: bool = False, answered: bool = False, measured: bool = False
    ) -> float | None:
        """A ``role`` call's mean tokens (``completion``: its completion alone) over the calls
        booked so far; ``answered``: calls that returned; ``measured``: not answered from an
        earlier reply (a reuse costs nothing). None before any."""
        done = [
            r.completion_tokens if completion else r.total_tokens
            for r in self.records
            if r.role == role
            and (not answered or r.ok)
            and (not measured or r.usage_source != "reused")
        ]
        return sum(done) / len(done) if done else None

    def cost_by_task(self, cost: Callable[[CallRecord], float]) -> dict[str | None, float]:
        """Each task's calls summed by ``cost`` (a price, server seconds, tokens)."""
        out: dict[str | None, float] = {}
        for rec in self.records:
            out[rec.task] = out.get(rec.task, 0.0) + cost(rec)
        return out

    def of_tasks(self, tasks: set[str]) -> Ledger:
        """A ledger of the calls booked to ``tasks`` only."""
        out = Ledger(self.exploration_roles)
        for rec in self.records:
            if rec.task in tasks:
                out.record(rec)
        return out

    def merge(self, *others: Ledger) -> Ledger:
        """A new ledger holding this one's records and the others' (e.g. across tasks)."""
        merged = Ledger(self.exploration_roles, list(self.records))
        for o in others:
            merged.records.extend(o.records)
        return merged

    def summary(self) -> dict[str, Any]:
        roles = {
            k: {**asdict(v), "total_tokens": v.total_tokens} for k, v in self.by_role().items()
        }
        with self._lock:
            recs = list(self.records)
        details = self.usage_details()
        timed = [r for r in recs if r.prefill_s is not None and r.decode_s is not None]
        return {
            "total_tokens": self.total_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            # None where no server said anything of its cache (not "0 served")
            "cached_prompt_tokens": details.get("prompt_tokens_details", {}).get("cached_tokens"),
            "reasoning_tokens": details.get("completion_tokens_details", {}).get(
                "reasoning_tokens"
            ),
            # the servers' own seconds, over the calls that reported them (llama.cpp's timings)
            "server_time_s": {
                "prefill": sum(r.prefill_s or 0.0 for r in timed),
                "decode": sum(r.decode_s or 0.0 for r in timed),
                "calls": len(timed),
            }
            if timed
            else None,
            "exploration_tokens": self.exploration_tokens,
            "exploitation_tokens": self.exploitation_tokens,
            "calls": len(self.records),
            "roles": roles,
            **({"budget": dict(self.budget)} if self.budget is not None else {}),
        }
