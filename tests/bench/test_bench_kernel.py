"""pytest-benchmark microbenchmarks of the dedup kernel at N=1e4 (B=1 scan, B=64 batch).

With the default ``--benchmark-disable`` these run once as plain correctness checks; run
``pytest tests/test_bench_kernel.py --benchmark-enable`` for timings.
"""

from __future__ import annotations

import numpy as np
import pytest

from rse_fast import kernels
from rse_fast.rse.index import normalize_rows

N, D = 10_000, 384


@pytest.fixture(scope="module")
def bank() -> np.ndarray:
    rng = np.random.default_rng(0)
    return normalize_rows(rng.standard_normal((N, D)), D)


@pytest.mark.parametrize("b", [1, 64])
def test_greedy_insert_speed(benchmark, bank, b):
    rng = np.random.default_rng(b)
    batch = bank[rng.integers(0, N, b)] + rng.normal(0, 0.03, (b, D)).astype(np.float32)
    batch = normalize_rows(batch, D)
    none = np.full(b, -1, np.int64)
    kernels.warmup()
    dec = benchmark(kernels.greedy_insert, bank, N, batch, 0.85, none, none)
    # near-duplicates of bank rows at noise 0.03 have similarity ≈ 0.85 ± 0.03: both outcomes occur
    expected = (batch.astype(np.float64) @ bank.astype(np.float64).T).max(axis=1) < 0.85
    if b == 1:
        assert dec.accepted.tolist() == expected.tolist()
    else:
        assert not dec.accepted[~expected].any()  # a bank hit is never accepted
