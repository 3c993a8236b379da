"""The GPU kernel in Numba's CUDA simulator (conftest turns it on): on small banks it makes the
CPU kernel's decisions and reports the same rows and similarities, through batches, single
candidates, scores chunked across passes, crowded candidates and a mirror kept in step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rse_fast.kernels import cuda as gpu
from rse_fast.rse.index import SimilarityIndex, normalize_rows

from fakes.reference import reference_decisions
from fakes.vectors import adversarial, at_similarity, unit


def pair(dim: int, bank: np.ndarray) -> tuple[SimilarityIndex, SimilarityIndex]:
    cpu, dev = SimilarityIndex(dim, device="cpu"), SimilarityIndex(dim, device="cuda")
    cpu.extend(bank)
    dev.extend(bank)
    return cpu, dev


def assert_same(a: object, b: object) -> None:
    for field in ("accepted", "similarity", "match", "rows", "from_batch"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_the_simulator_or_a_gpu_runs_the_kernel():
    assert gpu.available(), "numba-cuda's simulator did not start: is numba-cuda installed?"
    assert SimilarityIndex(4, device="cuda").device == "cuda"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bank=st.integers(0, 20),
    b=st.integers(1, 6),
    tau=st.sampled_from([0.8, 0.5, 0.999, 0.0]),
)
def test_gpu_batches_and_single_candidates_match_the_cpu(seed, n_bank, b, tau):
    bank, cands = adversarial(seed, n_bank, b, 8, tau)
    cpu, dev = pair(8, bank)
    got = dev.insert(cands, tau)
    assert_same(cpu.insert(cands, tau), got)
    assert got.accepted.tolist() == reference_decisions(bank, cands, tau)
    cpu, dev = pair(8, bank)
    for c in cands[:3]:
        assert_same(cpu.insert(c[None, :], tau), dev.insert(c[None, :], tau))


def test_chunked_passes_crowds_and_a_mirror_in_step(monkeypatch):
    """Scores in passes of 16 rows, three rows kept per candidate (a crowd of near-equal rows
    comes back whole), then a replace and a remove that the device mirror must follow."""
    monkeypatch.setattr(gpu, "SCORE_BYTES", 4 * 16 * 2)
    monkeypatch.setattr(gpu, "CAP", 3)
    rng = np.random.default_rng(0)
    c = unit(rng, 1, 8)[0].astype(np.float64)
    crowd = [at_similarity(c, 0.7 + rng.uniform(-1e-5, 1e-5), rng) for _ in range(5)]
    bank = np.concatenate([unit(rng, 30, 8), normalize_rows(np.array(crowd), 8)])
    bank = bank[rng.permutation(bank.shape[0])]
    cands = np.concatenate([normalize_rows(c[None, :], 8), unit(rng, 1, 8)])
    cpu, dev = pair(8, bank)
    for index in (cpu, dev):
        index.replace(3, cands[1])
        index.remove(0)
    for tau in (0.7, 0.95):
        assert_same(cpu.insert(cands[:1], tau), dev.insert(cands[:1], tau))
    for a, b in zip(cpu.max_similarity(cands), dev.max_similarity(cands), strict=True):
        np.testing.assert_array_equal(a, b)


def test_asking_for_cuda_without_a_device_names_the_problem(monkeypatch):
    monkeypatch.setattr(gpu, "available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        SimilarityIndex(4, device="cuda")
