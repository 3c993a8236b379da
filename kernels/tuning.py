"""Per-CPU choice of how a batch insert tiles its GEMMs: the tile's rows and its layout.

The best tile differs between CPUs (cache sizes, the BLAS kernel the CPU gets; the numbers
are in docs/decisions.md). So the first insert of a batch bucket on a machine measures the candidate
plans on a synthetic bank (a second or two, once) and keeps the fastest, on disk per CPU
model, thread count, dimension and bucket. Every plan makes the same decisions; only speed
differs. ``RSE_FAST_KERNEL_TUNE=0`` skips the measurement and uses the default plan.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .threads import available_cores

#: Candidate tile heights; a tile holds at most ``MAX_TILE_BYTES`` of similarities (so the
#: kernel's extra memory stays a small fraction of one whole N x B GEMM's).
TILE_ROWS = (1024, 2048, 4096, 8192, 16384, 32768)
MAX_TILE_BYTES = 8 << 20
#: Bytes of the synthetic bank the plans are timed on (32,768 rows at d=384), within row
#: bounds; a candidate tile fits in it at least twice.
TUNE_BYTES = 48 << 20
LAYOUTS = ("rows", "cols")


def tune_rows(d: int) -> int:
    return max(8192, min(65536, TUNE_BYTES // (4 * d)))


@dataclass(frozen=True)
class TilePlan:
    """``rows``: ``rows[s:e] @ batch.T`` into a (T, B) tile; ``cols``: ``batch @ rows[s:e].T``
    into a (B, T) tile, whose per-candidate maxima are contiguous."""

    layout: str = "rows"
    tile_rows: int = 4096

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS or self.tile_rows < 1:
            raise ValueError(f"not a tile plan: {self.layout!r}, {self.tile_rows} rows")


DEFAULT = TilePlan()


def bucket(b: int) -> int:
    """The batch size a plan is measured at for batches of ``b`` rows (b > 1)."""
    return 16 if b <= 16 else 64 if b <= 96 else 256


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_path() -> Path:
    override = os.environ.get("RSE_FAST_KERNEL_PLANS")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "rse_fast" / "kernel_plans.json"


def plan_key(d: int, b: int) -> str:
    return f"{cpu_model()}|cores={available_cores()}|d={d}|b={bucket(b)}"


def candidates(d: int, b: int) -> list[TilePlan]:
    rows = [t for t in TILE_ROWS if t * b * 4 <= MAX_TILE_BYTES and 2 * t <= tune_rows(d)]
    return [TilePlan(layout, t) for t in rows or [TILE_ROWS[0]] for layout in LAYOUTS]


def measure(
    d: int, b: int, bank_max: Callable[..., Any], rounds: int = 3
) -> tuple[TilePlan, dict[str, float]]:
    """Time every candidate plan for (d, b) on a synthetic bank, in turns (so all see the
    same noise), best of ``rounds``; the fastest and every plan's seconds."""
    rng = np.random.default_rng(0)
    n = tune_rows(d)
    bank = rng.standard_normal((n, d), dtype=np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    batch = np.ascontiguousarray(bank[rng.choice(n, b, replace=False)])
    plans = candidates(d, b)
    best = {p: float("inf") for p in plans}
    for _ in range(rounds):
        for p in plans:
            t0 = time.perf_counter()
            bank_max(bank, n, batch, p)
            best[p] = min(best[p], time.perf_counter() - t0)
    chosen = min(plans, key=best.__getitem__)
    return chosen, {f"{p.layout}:{p.tile_rows}": s for p, s in best.items()}


_PLANS: dict[tuple[int, int], TilePlan] = {}


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, plan: TilePlan, seconds: dict[str, float]) -> None:
    data = _read_cache(path)
    data[key] = {"plan": asdict(plan), "seconds": seconds, "measured_at": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)  # whole or not at all, even with two processes tuning at once
    except OSError:
        pass  # a read-only home: the plan holds for this process


def plan_for(d: int, b: int, bank_max: Callable[..., Any]) -> TilePlan:
    """The plan for batches of ``b`` rows of dimension ``d`` on this CPU: from this process,
    else the disk cache, else measured now (``bank_max`` is the kernel being tuned)."""
    key = (d, bucket(b))
    known = _PLANS.get(key)
    if known is not None:
        return known
    if os.environ.get("RSE_FAST_KERNEL_TUNE", "1") == "0":
        return DEFAULT
    path, name = cache_path(), plan_key(d, b)
    stored = _read_cache(path).get(name)
    plan: TilePlan | None = None
    if isinstance(stored, dict) and isinstance(stored.get("plan"), dict):
        try:
            plan = TilePlan(**stored["plan"])
        except (TypeError, ValueError):
            plan = None  # a cache from another version: measure again
    if plan is None:
        plan, seconds = measure(d, bucket(b), bank_max)
        _write_cache(path, name, plan, seconds)
    _PLANS[key] = plan
    return plan


def tune(d: int, batches: Iterable[int], bank_max: Callable[..., Any]) -> dict[int, TilePlan]:
    """Measure (or load) the plans for ``batches`` now, off the critical path."""
    return {b: plan_for(d, b, bank_max) for b in batches if b > 1}


def forget() -> None:
    """Drop this process's plans (the disk cache stays): for tests and benchmarks."""
    _PLANS.clear()
