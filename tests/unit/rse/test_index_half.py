"""The float16 index decides, matches and reports exactly what the float32 index does, on inputs
built to fool a half-precision score: pairs within the float16 error of τ, ties in the maximum,
components below binary16's range, many rows near one candidate's maximum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rse_fast import kernels
from rse_fast.kernels import half
from rse_fast.rse.index import SimilarityIndex, normalize_rows

from fakes.reference import reference_decisions
from fakes.vectors import adversarial, at_similarity, unit

taus = st.one_of(
    st.sampled_from([0.8, 0.85, 0.5, 0.95, 0.999, 1.0, 0.0]),
    st.floats(-0.99, 1.0, allow_nan=False),
)


def half_adversarial(
    seed: int, n_bank: int, b: int, dim: int, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """``adversarial`` plus bank rows within the float16 score error of τ (and of each other)
    from candidates, exact copies of bank rows (ties in the maximum) and rows with components
    far below binary16's smallest normal."""
    rng = np.random.default_rng(seed + 1)
    bank, cands = adversarial(seed, n_bank, b, dim, tau)
    err = half.score_error(dim)
    extra = []
    for c in cands[: max(1, b // 3)]:
        for _ in range(int(rng.integers(1, 4))):
            s = float(np.clip(tau + rng.uniform(-2 * err, 2 * err), -1.0, 1.0))
            extra.append(at_similarity(c.astype(np.float64), s, rng))
    if bank.shape[0]:
        extra.extend(bank[rng.integers(0, bank.shape[0], size=2)].astype(np.float64))
    tiny = rng.standard_normal(dim) * np.where(rng.random(dim) < 0.5, 1e-12, 1.0)
    extra.append(tiny)
    rows = [bank, normalize_rows(np.array(extra), dim)] if extra else [bank]
    full = np.concatenate(rows).astype(np.float32)
    return full[rng.permutation(full.shape[0])], cands


def both(dim: int, bank: np.ndarray) -> tuple[SimilarityIndex, SimilarityIndex]:
    exact, approx = SimilarityIndex(dim, capacity=1), SimilarityIndex(dim, precision="float16")
    exact.extend(bank)
    approx.extend(bank)
    return exact, approx


def assert_same(a: object, b: object) -> None:
    for field in ("accepted", "similarity", "match", "rows", "from_batch"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bank=st.integers(0, 30),
    b=st.integers(0, 40),
    dim=st.sampled_from([2, 3, 8, 64, 384]),
    tau=taus,
)
def test_float16_batch_equals_float32_bit_for_bit(seed, n_bank, b, dim, tau):
    bank, cands = half_adversarial(seed, n_bank, b, dim, tau)
    exact, approx = both(dim, bank)
    want = exact.insert(cands, tau)
    got = approx.insert(cands, tau)
    assert_same(want, got)
    assert got.accepted.tolist() == reference_decisions(bank, cands, tau)
    np.testing.assert_array_equal(exact.vectors, approx.vectors)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bank=st.integers(0, 20),
    b=st.integers(1, 12),
    dim=st.sampled_from([3, 16, 384]),
    tau=taus,
)
def test_float16_one_at_a_time_equals_float32(seed, n_bank, b, dim, tau):
    bank, cands = half_adversarial(seed, n_bank, b, dim, tau)
    exact, approx = both(dim, bank)
    for c in cands:
        assert_same(exact.insert(c[None, :], tau), approx.insert(c[None, :], tau))
    for a, b_ in zip(exact.max_similarity(cands), approx.max_similarity(cands), strict=True):
        np.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("layout", kernels.tuning.LAYOUTS)
def test_many_tiles_chunks_and_overflowing_near_sets(monkeypatch, layout):
    """Tiles of 7 rows, scan chunks of 5, two near rows kept per candidate: maxima cross tile
    and chunk boundaries and crowded candidates take the re-scan path, in both precisions."""
    monkeypatch.setattr(kernels.tuning, "plan_for", lambda d, b, f: kernels.TilePlan(layout, 7))
    monkeypatch.setattr(kernels.greedy, "NEAR_ROWS", 2)
    monkeypatch.setattr(kernels.greedy, "SCAN_BYTES", 4 * 32 * 5)
    monkeypatch.setattr(kernels.greedy, "MIN_TILE_ROWS", 5)
    rng = np.random.default_rng(3)
    c = unit(rng, 1, 32)[0].astype(np.float64)
    crowd = [at_similarity(c, 0.8 + rng.uniform(-1e-4, 1e-4), rng) for _ in range(9)]
    bank = np.concatenate([unit(rng, 150, 32), normalize_rows(np.array(crowd), 32)])
    bank = bank[rng.permutation(bank.shape[0])]
    cands = np.concatenate([normalize_rows(c[None, :], 32), adversarial(5, 150, 40, 32, 0.8)[1]])
    for tau in (0.8, 0.9):
        exact, approx = both(32, bank)
        assert_same(exact.insert(cands, tau), approx.insert(cands, tau))
        exact, approx = both(32, bank)
        for v in cands[:10]:
            assert_same(exact.insert(v[None, :], tau), approx.insert(v[None, :], tau))
    sims = bank.astype(np.float64) @ cands[0].astype(np.float64)
    got_sim, got_row = SimilarityIndex.max_similarity(both(32, bank)[1], cands[:1])
    assert int(got_row[0]) == int(np.argmax(sims))
    assert float(got_sim[0]) == pytest.approx(float(sims.max()), abs=1e-6)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([2, 7, 64, 384, 1024]))
def test_half_scores_stay_within_the_derived_bound(seed, dim):
    rng = np.random.default_rng(seed)
    rows = unit(rng, 64, dim)
    scale = np.where(rng.random((64, dim)) < 0.3, 10.0 ** rng.uniform(-12, 0, (64, dim)), 1.0)
    rows = np.concatenate([rows, normalize_rows(rows * scale, dim), np.eye(dim)[:4]])
    rows = normalize_rows(rows, dim)
    q = rows[int(rng.integers(0, rows.shape[0]))]
    out = np.empty(rows.shape[0], np.float32)
    half.scores_into(half.encode(rows), 0, rows.shape[0], q * half.QUERY_SCALE, out)
    exact = np.array([kernels.exact_dot(r, q) for r in rows])
    assert np.abs(out - exact).max() <= half.score_error(dim)
    decoded = np.empty(rows.shape, np.float32)
    half.decode_into(half.encode(rows), 0, rows.shape[0], decoded)
    assert np.abs(decoded.astype(np.float64) * 2.0**97 - rows).max() <= 2.0**-11


def test_float16_bank_takes_about_half_the_memory():
    a, b = SimilarityIndex(384, capacity=4096), SimilarityIndex(384, 4096, "float16")
    assert b.memory_bytes <= 0.55 * a.memory_bytes
    assert b.precision == "float16" and a.precision == "float32"


def test_float16_replace_remove_save_load_keep_exact_rows(tmp_path):
    rng = np.random.default_rng(4)
    rows = unit(rng, 6, 16)
    exact, approx = both(16, rows)
    for index in (exact, approx):
        index.replace(2, rows[5] * 2)
        index.remove(0)
    np.testing.assert_array_equal(exact.vectors, approx.vectors)
    approx.save(tmp_path / "i.npz")
    loaded = SimilarityIndex.load(tmp_path / "i.npz", precision="float16")
    np.testing.assert_array_equal(loaded.vectors, exact.vectors)
    probe = unit(rng, 3, 16)
    assert_same(exact.insert(probe, 0.5), loaded.insert(probe, 0.5))


def test_unknown_precision_is_refused_by_name():
    with pytest.raises(ValueError, match="precision must be one of"):
        SimilarityIndex(8, precision="bfloat16")
