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
    # the same statement under the other name is a conflict: the pitfall already filed has
    # as much support (one rollout) and is older, so the new proposition is not filed
    late = bank.add([exp("a", "positive", 2)], v[:1], TAU)[0]
    assert (late.accepted, late.conflict, late.matched) == (False, True, "a")
    assert bank.sizes() == {"negative": 1, "positive": 1}


def test_a_statement_under_both_names_keeps_the_side_with_more_support():
    """The demo's case: rollouts file one sentence as a pitfall (4 of them) and as a
    proposition (6 of them) in the same round; only the proposition stays."""
    bank = ExperienceBank(8)
    v = unit(2)
    cands = [exp("muffins: 4 at $3", "negative", r) for r in range(4)]
    cands += [exp("muffins: 4 at $3", "positive", r) for r in range(4, 10)]
    cands += [exp("other", "negative", 0, 1)]
    decisions = bank.add(cands, np.stack([v[0]] * 10 + [v[1]]), TAU)
    assert bank.texts("positive") == ["muffins: 4 at $3"] and bank.texts("negative") == ["other"]
    assert bank.support("positive") == [6]
    assert sum(d.accepted for d in decisions) == len(bank) == 2
    assert [d.conflict for d in decisions].count(True) == 1
    # a later round's single pitfall of the same statement loses to support 6
    again = bank.add([exp_r("muffins: 4 at $3", "negative", 2)], v[:1], TAU)[0]
    assert again.conflict and bank.sizes() == {"negative": 1, "positive": 1}


def test_a_checked_statement_beats_support_and_an_older_item_leaves_the_bank():
    bank = ExperienceBank(8)
    v = unit(1)
    bank.add([exp("step", "negative", r) for r in range(3)], np.repeat(v, 3, axis=0), TAU)
    verified = Experience(text="step", kind="positive", round=2, rollout=0, position=0,
                          verdict="verified", evidence="re-computed: 4 * 3 = 12")  # fmt: skip
    d = bank.add([verified], v, TAU)[0]
    assert d.accepted and not d.conflict
    assert bank.sizes() == {"negative": 0, "positive": 1}  # the unchecked pitfall is out
    assert bank.items["positive"][0].verdict == "verified"


def test_no_statement_is_ever_in_both_lists():
    rng = np.random.default_rng(7)
    base = unit(6, seed=3)
    for seed in range(10):  # random batches drawn from a few statements, both kinds
        bank = ExperienceBank(8)
        for r in range(1, 4):
            picks = rng.integers(0, len(base), size=8)
            kinds = rng.choice(["negative", "positive"], size=8)
            pairs = enumerate(zip(picks, kinds, strict=True))
            cands = [exp_r(f"s{p}", str(k), r, i) for i, (p, k) in pairs]
            bank.add(cands, base[picks], TAU)
            assert not set(bank.texts("negative")) & set(bank.texts("positive")), seed
            neg, pos = bank.indexes["negative"].vectors, bank.indexes["positive"].vectors
            if len(neg) and len(pos):
                assert float((neg @ pos.T).max()) < TAU["positive"]


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


def exp_r(text: str, kind: str, round_: int, rollout: int = 0, position: int = 0) -> Experience:
    return Experience(text=text, kind=kind, round=round_, rollout=rollout, position=position)


def rules_tokens() -> int:
    from rse_fast.llm.ledger import approx_token_count
    from rse_fast.prompts import render_experiences

    return approx_token_count(render_experiences(["x"], ["x"]))


def test_render_empty_pitfalls_first_and_within_budget():
    bank = ExperienceBank(8)
    assert bank.render() == ""
    texts = [f"statement number {i} " + "pad " * 10 for i in range(6)]
    cands = [exp(t, "positive" if i % 2 else "negative", i) for i, t in enumerate(texts)]
    bank.add(cands, unit(6, seed=3), {"positive": 1.0, "negative": 1.0})
    full = bank.render(token_budget=10_000, guidance="short")
    assert full.index("- avoid: ") < full.index("- found: ")  # pitfalls first
    assert all(t in full for t in texts)
    ruled = bank.render(token_budget=10_000)  # the default framing: the rules
    assert ruled.index(PITFALLS_HEADER) < ruled.index(PROPOSITIONS_HEADER)
    budget = rules_tokens() + 40  # room for about three of the six statements
    small = bank.render(token_budget=budget)
    assert 0 < len(small) // 4 <= budget
    shown = [t for t in texts if t in small]
    # equal support and round: the first found are kept, in rank order, both kinds mixed
    assert shown == texts[: len(shown)] and 2 <= len(shown) <= 4
    assert bank.render(token_budget=rules_tokens() // 2) == ""  # not even the rules fit
    one_each = bank.render(max_per_kind=1)
    assert texts[0] in one_each and texts[1] in one_each and texts[2] not in one_each


def test_support_counts_rollouts_that_rederive_and_ranks_rendering():
    bank = ExperienceBank(8)
    v = unit(3, seed=4)
    bank.add(
        [exp_r("first idea", "positive", 1, 0), exp_r("second idea", "positive", 1, 1)], v[:2], TAU
    )
    # round 2: three rollouts re-derive the second idea (one of them twice), one the first
    again = [
        exp_r("second idea, said again", "positive", 2, 0),
        exp_r("second idea once more", "positive", 2, 1),
        exp_r("second idea twice in one rollout", "positive", 2, 1, 1),
        exp_r("first idea again", "positive", 2, 2),
        exp_r("second idea, yes", "positive", 2, 3),
    ]
    decisions = bank.add(again, np.stack([v[1], v[1], v[1], v[0], v[1]]), TAU)
    assert not any(d.accepted for d in decisions)
    assert bank.support("positive") == [2, 4]  # distinct (round, rollout) pairs
    assert bank.derived_by("positive", 1) == [(1, 1), (2, 0), (2, 1), (2, 3)]
    assert bank.ranked("positive") == [1, 0]  # most support first
    text = bank.render()
    assert text.index("second idea") < text.index("first idea")
    # candidates matched to one accepted earlier in the same batch count too
    bank2 = ExperienceBank(8)
    bank2.add(
        [exp_r("x", "negative", 1, 0), exp_r("x'", "negative", 1, 1)], np.stack([v[2], v[2]]), TAU
    )
    assert bank2.support("negative") == [2]


def test_recency_breaks_support_ties():
    bank = ExperienceBank(8)
    v = unit(2, seed=5)
    bank.add([exp_r("old", "negative", 1)], v[:1], TAU)
    bank.add([exp_r("new", "negative", 3)], v[1:], TAU)
    assert bank.ranked("negative") == [1, 0]


def test_replace_longer_policy_keeps_support_and_exactness():
    v = unit(2, seed=6)
    near = v[0] + 0.01 * v[1]
    results = {}
    for policy in ("keep-first", "replace-longer"):
        bank = ExperienceBank(8, policy=policy)
        bank.add([exp_r("short claim", "positive", 1, 0)], v[:1], TAU)
        d = bank.add(
            [
                exp_r("a longer statement of the short claim", "positive", 2, 0),
                exp_r("the longest statement of that same short claim", "positive", 2, 1),
            ],
            np.stack([near, near]),
            TAU,
        )
        assert [x.accepted for x in d] == [False, False]  # decisions identical for both
        results[policy] = (
            bank.texts("positive"),
            bank.support("positive"),
            [x.replaced for x in d],
        )
        # the kept vector is the replacement's: an exact repeat of it is still caught
        again = bank.add([exp_r("again", "positive", 3)], near[None, :], TAU)[0]
        assert not again.accepted and again.similarity == pytest.approx(1.0, abs=1e-3)
    assert results["keep-first"] == (["short claim"], [3], [False, False])
    assert results["replace-longer"] == (
        ["the longest statement of that same short claim"],
        [3],
        [False, True],
    )


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


def test_support_and_policy_survive_save_load(tmp_path):
    bank = ExperienceBank(8, policy="replace-longer")
    v = unit(1, seed=7)
    bank.add([exp_r("a", "negative", 1, 0)], v, TAU)
    bank.add([exp_r("a!", "negative", 2, 5)], v, TAU)
    bank.problem_ids.add("p1")
    bank.save(tmp_path / "bank")
    loaded = ExperienceBank.load(tmp_path / "bank")
    assert loaded.policy == "replace-longer" and loaded.problem_ids == {"p1"}
    assert loaded.support("negative") == [2] and loaded.texts("negative") == ["a!"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.with_suffix(".json").write_text(
            '{"dim": 8, "items": {"negative": [{"text": 1}]'
        ),
        lambda p: p.with_suffix(".json").write_text(
            '{"dim": 8, "items": {"negative": [{"txt": "a"}], "positive": []}}'
        ),
        lambda p: p.with_suffix(".json").write_text('{"dim": "eight", "items": {}}'),
        lambda p: p.with_suffix(".npz").write_bytes(p.with_suffix(".npz").read_bytes()[:40]),
        lambda p: p.with_suffix(".npz").unlink(),
    ],
)
def test_damaged_bank_file_names_the_file(tmp_path, damage):
    bank = ExperienceBank(8)
    bank.add([exp("n1", "negative")], unit(1), TAU)
    bank.save(tmp_path / "bank")
    damage(tmp_path / "bank")
    with pytest.raises(ValueError, match=str(tmp_path / "bank")):
        ExperienceBank.load(tmp_path / "bank")


def test_a_single_sighting_waits_unless_a_checker_verified_it():
    """Support guards against one rollout's made-up belief; a fact the checker verified (a
    failure seen by running the code) reaches the prompt on its first sighting."""
    bank = ExperienceBank(8)
    v = unit(3, seed=7)
    seen = Experience(text="f(3) raised IndexError", kind="negative", round=1, rollout=0,
                      position=0, verdict="verified", evidence="ran f(3)")  # fmt: skip
    believed = exp("the loop must start at 1", "negative", rollout=1)
    guessed = Experience(text="sorting first helps", kind="positive", round=1, rollout=2,
                         position=0, verdict="unknown")  # fmt: skip
    bank.add([seen, believed, guessed], v, TAU)
    shown = bank.render(min_support=2)
    assert "f(3) raised IndexError" in shown
    assert "the loop must start at 1" not in shown and "sorting first helps" not in shown
    assert "the loop must start at 1" in bank.render(min_support=1)
