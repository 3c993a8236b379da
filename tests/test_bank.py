"""ExperienceBank: atomic adds, rendering within a budget, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from rse_fast.prompts import PITFALLS_HEADER, PROPOSITIONS_HEADER
from rse_fast.rse.bank import Experience, ExperienceBank

TAU = {"positive": 0.9, "negative": 0.9}


def unit(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exp(text: str, kind: str, rollout: int = 0, position: int = 0) -> Experience:
    return Experience(text=text, kind=kind, round=1, rollout=rollout, position=position)


def test_add_dedups_per_kind_and_explains():
    bank = ExperienceBank(8)
    v = unit(3)
    cands = [exp("a", "negative"), exp("b", "positive"), exp("a again", "negative", 1)]
    vectors = np.stack([v[0], v[1], v[0]])
    decisions = bank.add(cands, vectors, TAU)
    assert [d.accepted for d in decisions] == [True, True, False]
    assert decisions[2].matched == "a" and decisions[2].similarity == pytest.approx(1.0)
    assert bank.sizes() == {"negative": 1, "positive": 1}
    # the same vector is fine in the other kind: kinds are deduplicated separately
    assert bank.add([exp("a", "positive")], v[:1], TAU)[0].accepted


def test_bad_input_leaves_the_bank_unchanged():
    bank = ExperienceBank(8)
    bank.add([exp("x", "positive")], unit(1), TAU)
    good_and_bad = np.stack([unit(1, seed=1)[0], np.full(8, np.nan, np.float32)])
    with pytest.raises(ValueError, match="NaN"):
        bank.add([exp("p", "positive"), exp("n", "negative")], good_and_bad, TAU)
    with pytest.raises(ValueError, match="kind"):
        bank.add([exp("z", "neutral")], unit(1, seed=2), TAU)
    with pytest.raises(ValueError, match="2 candidates but 1"):
        bank.add([exp("p", "positive"), exp("q", "positive")], unit(1), TAU)
    assert bank.sizes() == {"negative": 0, "positive": 1} and bank.texts("positive") == ["x"]


def test_render_empty_pitfalls_first_and_within_budget():
    bank = ExperienceBank(8)
    assert bank.render() == ""
    texts = [f"statement number {i} " + "pad " * 10 for i in range(6)]
    cands = [exp(t, "positive" if i % 2 else "negative", i) for i, t in enumerate(texts)]
    bank.add(cands, unit(6, seed=3), {"positive": 1.0, "negative": 1.0})
    full = bank.render(token_budget=10_000)
    assert full.index(PITFALLS_HEADER) < full.index(PROPOSITIONS_HEADER)
    assert all(t in full for t in texts)
    small = bank.render(token_budget=60)
    assert len(small) // 4 <= 60 and small  # oldest dropped first, newest kept
    assert texts[5] in small and texts[0] not in small
    assert texts[4] in bank.render(max_per_kind=1) and texts[0] not in bank.render(max_per_kind=1)


def test_save_load_round_trip(tmp_path):
    bank = ExperienceBank(8)
    bank.add([exp("n1", "negative"), exp("p1", "positive", 2, 1)], unit(2), TAU)
    bank.save(tmp_path / "bank")
    loaded = ExperienceBank.load(tmp_path / "bank")
    assert loaded.items == bank.items
    # the loaded index still rejects what the original would
    d = loaded.add([exp("p1", "positive")], unit(2)[1:], TAU)
    assert not d[0].accepted and d[0].matched == "p1"


def test_load_reports_a_broken_bank(tmp_path):
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(ValueError, match="not a saved experience bank"):
        ExperienceBank.load(tmp_path / "b")
