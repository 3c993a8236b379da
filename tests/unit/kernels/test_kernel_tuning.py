"""The kernel's per-CPU tile plan: measured once per machine and kept on disk, and whatever
plan a CPU picks, the decisions are the same (only the speed differs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rse_fast import kernels
from rse_fast.kernels import tuning
from rse_fast.rse.index import SimilarityIndex

from fakes.reference import reference_decisions
from fakes.vectors import adversarial


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Tuning switched on, an empty disk cache, and no plan kept by this process."""
    monkeypatch.setenv("RSE_FAST_KERNEL_TUNE", "1")
    monkeypatch.setenv("RSE_FAST_KERNEL_PLANS", str(tmp_path / "plans.json"))
    monkeypatch.setattr(tuning, "TUNE_BYTES", 1 << 20)  # a small bank: the test stays fast
    tuning.forget()
    yield tmp_path / "plans.json"
    tuning.forget()


def test_a_plan_is_measured_once_and_then_read_from_disk(fresh, monkeypatch):
    plans = kernels.tune(32, (16, 64))
    assert set(plans) == {16, 64} and all(isinstance(p, kernels.TilePlan) for p in plans.values())
    stored = json.loads(fresh.read_text())
    key = tuning.plan_key(32, 64)
    assert key in stored and tuning.cpu_model() in key
    assert stored[key]["plan"] == {"layout": plans[64].layout, "tile_rows": plans[64].tile_rows}
    assert len(stored[key]["seconds"]) == len(tuning.candidates(32, 64))
    tuning.forget()  # a new process: the disk answers, nothing is measured again

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(tuning, "measure", no_measuring)
    assert kernels.tune(32, (64,))[64] == plans[64]


def test_a_broken_cache_is_measured_again_not_fatal(fresh):
    fresh.write_text("{not json")
    assert kernels.tune(32, (64,))[64] in tuning.candidates(32, 64)
    fresh.write_text(json.dumps({tuning.plan_key(32, 16): {"plan": {"layout": "diagonal"}}}))
    tuning.forget()
    assert kernels.tune(32, (16,))[16] in tuning.candidates(32, 16)


def test_switched_off_it_uses_the_default_plan_without_measuring(monkeypatch):
    monkeypatch.setenv("RSE_FAST_KERNEL_TUNE", "0")
    tuning.forget()
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: pytest.fail("measured"))
    assert tuning.plan_for(384, 64, kernels.bank_max_tiled) == tuning.DEFAULT


@pytest.mark.parametrize("b", [2, 16, 64, 150])
def test_every_candidate_plan_makes_the_same_decisions(monkeypatch, b):
    """Each plan a CPU may pick, on adversarial batches (near-τ ties, chains, duplicates)
    over a bank several tiles long: the same decisions as the one-at-a-time reference."""
    bank, cands = adversarial(b, 3000, b, 24, 0.8)
    expected = reference_decisions(bank, cands, 0.8)
    for plan in tuning.candidates(24, b):
        small = kernels.TilePlan(plan.layout, max(1, plan.tile_rows // 16))  # several tiles
        monkeypatch.setattr(tuning, "plan_for", lambda d, bb, bank_max, p=small: p)
        index = SimilarityIndex(24)
        index.extend(bank)
        sims, _ = index.max_similarity(cands)
        exact = (cands.astype(np.float64) @ bank.astype(np.float64).T).max(axis=1)
        np.testing.assert_allclose(sims, exact, atol=1e-5)
        assert index.insert(cands, 0.8).accepted.tolist() == expected, plan


def test_a_plan_names_its_layout():
    with pytest.raises(ValueError, match="not a tile plan"):
        kernels.TilePlan("diagonal", 1024)
