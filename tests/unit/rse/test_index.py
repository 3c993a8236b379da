"""SimilarityIndex: exactness against the naive reference, growth, persistence, bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rse_fast import kernels
from rse_fast.rse.index import SimilarityIndex, normalize_rows

from fakes.reference import reference_decisions
from fakes.vectors import adversarial, at_similarity, unit

taus = st.one_of(
    st.sampled_from([0.8, 0.85, 0.5, 0.95, 0.999, 1.0, -0.5, 0.0]),
    st.floats(-0.99, 1.0, allow_nan=False),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bank=st.integers(0, 30),
    b=st.integers(0, 40),
    dim=st.sampled_from([2, 3, 8, 64, 384]),
    tau=taus,
)
def test_batch_equals_sequential_reference(seed, n_bank, b, dim, tau):
    bank, cands = adversarial(seed, n_bank, b, dim, tau)
    index = SimilarityIndex(dim, capacity=1)
    index.extend(bank)
    result = index.insert(cands, tau)
    assert result.accepted.tolist() == reference_decisions(bank, cands, tau)
    assert len(index) == n_bank + result.n_accepted


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bank=st.integers(0, 20),
    b=st.integers(1, 25),
    dim=st.sampled_from([3, 16, 384]),
    tau=taus,
)
def test_one_at_a_time_equals_batch(seed, n_bank, b, dim, tau):
    bank, cands = adversarial(seed, n_bank, b, dim, tau)
    batch_index = SimilarityIndex(dim)
    batch_index.extend(bank)
    single_index = SimilarityIndex(dim)
    single_index.extend(bank)
    batch = batch_index.insert(cands, tau).accepted.tolist()
    single = [bool(single_index.insert(c[None, :], tau).accepted[0]) for c in cands]
    assert single == batch
    np.testing.assert_array_equal(batch_index.vectors, single_index.vectors)


@pytest.mark.parametrize("layout", kernels.tuning.LAYOUTS)
def test_multi_tile_scan_matches_reference(monkeypatch, layout):
    """Force many small GEMM tiles, in each layout a CPU's plan may choose, so the running
    max crosses tile boundaries (and a last tile shorter than the rest)."""
    small = kernels.TilePlan(layout, 7)
    monkeypatch.setattr(kernels.tuning, "plan_for", lambda d, b, bank_max: small)
    bank, cands = adversarial(7, 200, 64, 32, 0.8)
    index = SimilarityIndex(32)
    index.extend(bank)
    expected_max = (cands.astype(np.float64) @ bank.astype(np.float64).T).max(axis=1)
    sims, rows = index.max_similarity(cands)
    np.testing.assert_allclose(sims, expected_max, atol=1e-5)
    np.testing.assert_allclose(np.einsum("ij,ij->i", cands, bank[rows]), expected_max, atol=1e-5)
    assert index.insert(cands, 0.8).accepted.tolist() == reference_decisions(bank, cands, 0.8)


@pytest.mark.parametrize("seed", range(12))
def test_single_candidate_scan_across_chunks(monkeypatch, seed):
    """B=1 scans the bank in chunks of 5 rows: the hit is the lowest matching row whatever
    chunk it falls in (several hits, tie-band hits on τ), and a miss reports the first max."""
    monkeypatch.setattr(kernels.greedy, "SCAN_BYTES", 4 * 16 * 5)
    monkeypatch.setattr(kernels.greedy, "MIN_TILE_ROWS", 5)
    rng = np.random.default_rng(seed)
    tau = 0.9
    bank = unit(rng, 37, 16)
    probe = unit(rng, 1, 16)[0].astype(np.float64)
    for row in sorted(rng.choice(37, size=int(rng.integers(0, 4)), replace=False)):
        s = tau if rng.random() < 0.5 else rng.uniform(tau, 1.0)
        bank[row] = normalize_rows(at_similarity(probe, s, rng)[None, :], 16)[0]
    index = SimilarityIndex(16)
    index.extend(bank)
    cand = normalize_rows(probe[None, :], 16)
    exact = np.array([kernels.exact_dot(r, cand[0]) for r in bank])
    res = index.insert(cand, tau)
    hits = np.flatnonzero(exact >= tau)
    assert res.accepted.tolist() == [len(hits) == 0]
    assert int(res.match[0]) == (int(hits[0]) if len(hits) else int(exact.argmax()))


def test_explanations_name_the_cause():
    rng = np.random.default_rng(1)
    e = unit(rng, 1, 16)[0]
    far = at_similarity(e.astype(np.float64), 0.0, rng)
    near_far = at_similarity(far, 0.95, rng)
    index = SimilarityIndex(16)
    index.extend(e[None, :])
    res = index.insert(np.stack([e * 3, far, near_far]).astype(np.float32), 0.9)
    assert res.accepted.tolist() == [False, True, False]
    # e*3: bank row 0; far: its nearest compared row is row 0 (similarity ~0); near_far: `far`,
    # accepted in this batch as row 1.
    assert res.match.tolist() == [0, 0, 1]
    assert res.from_batch.tolist() == [False, False, True]
    assert res.similarity[0] == pytest.approx(1.0)
    assert res.similarity[1] == pytest.approx(0.0, abs=1e-5)
    assert res.similarity[2] == pytest.approx(0.95, abs=1e-5)
    assert res.rows.tolist() == [-1, 1, -1]


def test_text_keys_catch_exact_duplicates_before_math():
    rng = np.random.default_rng(2)
    v = unit(rng, 2, 8)
    index = SimilarityIndex(8)
    index.insert(v[:1], 0.9, keys=["same text"])
    # Same key, orthogonal-ish vector: rejected by the hash, not by similarity.
    res = index.insert(v[1:], 0.9, keys=["same text"])
    assert not res.accepted[0] and res.match[0] == 0


def test_growth_across_capacity_keeps_rows():
    rng = np.random.default_rng(3)
    index = SimilarityIndex(8, capacity=1)
    rows = unit(rng, 100, 8)
    for chunk in np.array_split(rows, 7):
        index.extend(chunk)
    assert len(index) == 100 and index.capacity >= 100
    assert index.capacity & (index.capacity - 1) == 0  # doubled from 1
    np.testing.assert_array_equal(index.vectors, rows)


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    index = SimilarityIndex(16, capacity=3)
    index.insert(unit(rng, 20, 16), 0.5, keys=[f"t{i}" for i in range(20)])
    path = tmp_path / "bank.npz"
    index.save(path)
    loaded = SimilarityIndex.load(path)
    np.testing.assert_array_equal(loaded.vectors, index.vectors)
    probe = unit(rng, 10, 16)
    keys = ["t3", *[f"new{i}" for i in range(9)]]
    a = index.insert(probe, 0.5, keys=keys)
    b = loaded.insert(probe, 0.5, keys=keys)
    assert a.accepted.tolist() == b.accepted.tolist()
    assert not b.accepted[0]  # key "t3" survived the round trip


def test_load_rejects_garbage(tmp_path):
    path = tmp_path / "x.npz"
    path.write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="not a SimilarityIndex"):
        SimilarityIndex.load(path)


def test_empty_batch_is_a_noop():
    index = SimilarityIndex(4)
    res = index.insert(np.zeros((0, 4), np.float32), 0.8)
    assert len(res) == 0 and len(index) == 0


@pytest.mark.parametrize(
    ("vectors", "tau", "message"),
    [
        (np.ones((2, 5), np.float32), 0.8, "dimension 5"),
        (np.ones(4, np.float32), 0.8, "2-D"),
        (np.ones((1, 2, 4), np.float32), 0.8, "2-D"),
        (np.ones((2, 4), np.int64), 0.8, "floating dtype"),
        (np.array([[1, 2, np.nan, 0]], np.float32), 0.8, "NaN or inf"),
        (np.array([[1, 2, np.inf, 0]], np.float32), 0.8, "NaN or inf"),
        (np.zeros((2, 4), np.float32), 0.8, "zero rows"),
        (np.ones((2, 4), np.float32), -1.0, "tau"),
        (np.ones((2, 4), np.float32), 1.5, "tau"),
        (np.ones((2, 4), np.float32), float("nan"), "tau"),
        (np.ones((2, 4), np.float32), "high", "tau"),
    ],
)
def test_bad_input_raises_and_leaves_index_unchanged(vectors, tau, message):
    rng = np.random.default_rng(5)
    index = SimilarityIndex(4, capacity=4)
    index.extend(unit(rng, 3, 4))
    before = index.vectors.copy()
    with pytest.raises(ValueError, match=message):
        index.insert(vectors, tau)
    np.testing.assert_array_equal(index.vectors, before)
    assert len(index) == 3


def test_bad_keys_raise():
    index = SimilarityIndex(4)
    with pytest.raises(ValueError, match="keys"):
        index.insert(np.ones((2, 4), np.float32), 0.8, keys=["only one"])
    assert len(index) == 0


def test_float64_input_is_accepted_as_float32():
    index = SimilarityIndex(4)
    index.insert(np.eye(4), 0.5)
    assert index.vectors.dtype == np.float32 and len(index) == 4


def test_float64_rows_beyond_float32_range_are_refused():
    index = SimilarityIndex(4)
    rows = np.array([[1e300, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=re.escape("beyond float32's range (rows [0])")):
        index.insert(rows, 0.9)
    assert len(index) == 0
    index.insert(np.array([[3e38, 1.0, 0.0, 0.0]]), 0.9)  # within float32 range: fine
    assert len(index) == 1


def test_max_similarity_of_an_empty_batch_is_empty():
    index = SimilarityIndex(4)
    index.insert(np.eye(4, dtype=np.float32), 0.9)
    for empty in ([], np.empty((0, 4), np.float32)):
        sims, rows = index.max_similarity(empty)
        assert sims.shape == (0,) and rows.shape == (0,)


@pytest.mark.parametrize("content", [b"", b"not an npz at all", b"PK\x03\x04truncated"])
def test_load_names_the_file_when_it_is_not_an_index(tmp_path, content):
    path = tmp_path / "index.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path}: not a SimilarityIndex file")):
        SimilarityIndex.load(path)


def test_replace_swaps_a_row_and_its_key():
    index = SimilarityIndex(3)
    index.insert(np.eye(3, dtype=np.float32), 0.9, keys=["a", "b", "c"])
    index.replace(0, np.array([0.0, 0.6, 0.8]), key="a2")
    res = index.insert(np.array([[1.0, 0.0, 0.0]]), 0.9, keys=["a"])  # old row and key gone
    assert res.accepted.tolist() == [True]
    dup = index.insert(np.array([[0.0, 0.6, 0.8]]), 0.99, keys=["zz"])
    assert not dup.accepted[0] and dup.match[0] == 0
    with pytest.raises(ValueError, match="not a stored row"):
        index.replace(99, np.ones(3))
