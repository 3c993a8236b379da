"""The frontier's replay: each offline rule is charged for the samples it drew, the stop is
the library's, and the pooled targets pair problems; from pools we write here."""

from __future__ import annotations

from pathlib import Path

from bench import frontier

BENCH = Path(__file__).resolve().parents[2] / "bench"


def sample(answer: str, correct: float, conf: float, tokens: int = 100) -> dict:
    return {"text": f"\\boxed{{{answer}}}", "answer": answer, "correct": correct,
            "prompt_tokens": 50, "cached_tokens": 40, "completion_tokens": tokens - 50,
            "prefill_s": 0.1, "decode_s": 1.0, "confidence": [conf] * 40}  # fmt: skip


def test_a_stop_pays_only_for_what_it_drew_and_a_filter_keeps_the_sure():
    unanimous = [sample("4", 1.0, 3.0) for _ in range(16)]
    grade, paid = frontier.play(frontier.Rule("s", 16, stop_epsilon=0.05), unanimous)
    assert grade == 1.0 and len(paid) == 4  # Beta(4 + 1, 1): 1 - 2^-5 > 0.95; at 3: 0.94
    grade, paid = frontier.play(frontier.Rule("sc", 16), unanimous)
    assert len(paid) == 16
    split = [sample("5", 0.0, 0.5) for _ in range(10)] + [sample("4", 1.0, 4.0) for _ in range(6)]
    assert frontier.play(frontier.Rule("sc", 16), split)[0] == 0.0
    assert frontier.play(frontier.Rule("f", 16, keep=0.25), split)[0] == 1.0


def test_a_weighted_stop_counts_an_unsure_dissent_for_less():
    """sc with a confidence rule weighs its stop's votes (``beta_settled(weighted=True)``):
    one unsure dissent among sure agreeing samples delays the plain stop, not the weighted."""
    order = [sample("4", 1.0, 4.0), sample("5", 0.0, 0.3)] + [sample("4", 1.0, 4.0)] * 14
    plain = frontier.Rule("s", 16, stop_epsilon=0.05, schedule="sequential")
    weighted = frontier.Rule("s", 16, stop_epsilon=0.05, weighted=True, measure="mean",
                             schedule="sequential")  # fmt: skip
    assert [len(frontier.play(r, order)[1]) for r in (plain, weighted)] == [7, 4]
    assert "sc+stop+conf-weight" in frontier.rules_for(
        16, {"epsilon": 0.1, "weighted_epsilon": 0.2, "keep": 0.5, "measure": "mean",
             "weight_measure": "tail", "online_keep": 0.9, "online_stop_keep": 0.75,
             "online_stop_epsilon": 0.05}
    )  # fmt: skip


def test_the_stop_is_replayed_on_the_librarys_schedule_and_charges_what_it_cancelled():
    """Waves of four, the stop asked as each sample finishes: a long sample in the first
    wave holds the next wave back. Sliding refills a slot at once, so the stop finds samples
    running and cancels them: each charged its prompt and what it had generated (time
    follows completion length). One at a time nothing is ever in flight."""
    short, long_ = sample("4", 1.0, 3.0, tokens=100), sample("4", 1.0, 3.0, tokens=300)
    order = [short, short, short, long_, *[short] * 12]  # 50 and 250 completion tokens

    def paid(schedule: str) -> list[dict]:
        rule = frontier.Rule("s", 16, stop_epsilon=0.05, schedule=schedule)
        grade, drawn = frontier.play(rule, order)
        assert grade == 1.0
        return drawn

    waves, sliding, sequential = paid("waves"), paid("sliding"), paid("sequential")
    assert len(waves) == 4 and not any(s.get("cancelled") for s in waves)  # settled at the 4th
    assert [s["completion_tokens"] for s in sequential] == [50, 50, 50, 250]
    # sliding: 3 short ones end at t=50, three more start; at t=100 the 4th vote settles it,
    # the long one had run 100 of its 250, the other two new ones all of their 50
    cut = [s for s in sliding if s.get("cancelled")]
    assert len(sliding) == 7 and len(cut) == 3
    assert sorted(s["completion_tokens"] for s in cut) == [50, 50, 100]
    assert all(s["answer"] is None for s in cut)
    tokens = {n: sum(frontier.cost(s, "tokens") for s in d)
              for n, d in (("waves", waves), ("sliding", sliding))}  # fmt: skip
    assert tokens == {"waves": 4 * 50 + 400, "sliding": 7 * 50 + 400}


def test_replay_charges_tokens_and_server_time_per_problem():
    pools = [{"id": "p", "samples": [sample("4", 1.0, 3.0, tokens=120) for _ in range(16)]}]
    out = frontier.replay(frontier.Rule("sc", 4), pools, draws=3)
    assert out["accuracy"] == 1.0 and out["cost_tokens"] == 4 * 120
    assert out["cost_time"] == 4 * 1.1 and out["per_problem_tokens"] == [480.0]


def test_the_online_rule_replays_by_cutting_samples_where_the_gate_stops_them():
    """The warm-up (the first four) sets the threshold; a later sample whose window of 32
    tokens falls below it is cut there: charged its prompt, the tokens before the stop and
    that share of its decode time, and it does not vote. A sure sample runs to the end."""
    sure = [sample("4", 1.0, 3.0) for _ in range(4)]
    lost = {**sample("5", 0.0, 3.0, tokens=250), "confidence": [3.0] * 40 + [0.5] * 160}
    rule = frontier.Rule("o", 6, keep=0.75, online=True)
    grade, paid = frontier.play(rule, [*sure, lost, sample("4", 1.0, 3.0)])
    assert grade == 1.0 and len(paid) == 6
    cut = paid[4]
    assert cut["stopped"] and cut["answer"] is None
    # the last 32 tokens' mean first falls below the threshold (3.0) at the 41st token
    assert cut["completion_tokens"] == 41 and frontier.cost(cut, "tokens") == 50 + 41
    assert cut["decode_s"] == 1.0 * 41 / 200
    assert "stopped" not in paid[5]  # as sure as the warm-up: never stopped
    plain = frontier.play(frontier.Rule("sc", 6), [*sure, lost, sample("4", 1.0, 3.0)])[1]
    assert sum(frontier.cost(s, "tokens") for s in paid) < sum(
        frontier.cost(s, "tokens") for s in plain)  # fmt: skip


def test_the_online_rule_with_the_stop_cuts_the_unsure_and_stops_once_settled():
    """DeepConf's online rule in full: the cut and the stop together. A cut sample casts no
    vote, so it does not move the stop; sure agreeing samples settle it before ``k``."""
    sure = [sample("4", 1.0, 3.0) for _ in range(4)]
    lost = {**sample("5", 0.0, 3.0, tokens=250), "confidence": [3.0] * 40 + [0.5] * 160}
    order = [*sure[:2], lost, *sure[2:], *[sample("4", 1.0, 3.0)] * 11]
    # the cut sample is the third: inside the warm-up it runs whole and votes "5"
    whole = frontier.Rule("o", 16, keep=0.9, online=True, stop_epsilon=0.05,
                          schedule="sequential")  # fmt: skip
    grade, paid = frontier.play(whole, order)
    assert grade == 1.0 and len(paid) == 7 and "stopped" not in paid[2]
    late = [*sure, lost, *[sample("4", 1.0, 3.0)] * 11]  # the unsure one after the warm-up
    grade, paid = frontier.play(whole, late)
    assert grade == 1.0 and len(paid) == 4  # settled by the warm-up's four before it is drawn
    unsettled = [sample("4", 1.0, 3.0), sample("5", 0.0, 3.0), *sure[:2], lost, lost,
                 *[sample("4", 1.0, 3.0)] * 10]  # fmt: skip
    grade, paid = frontier.play(whole, unsettled)
    assert [bool(s.get("stopped")) for s in paid[4:6]] == [True, True]
    assert len(paid) == 9  # the two cut samples count for nothing: 6 to 1 settles at ninth
    never = frontier.play(frontier.Rule("o", 16, keep=0.9, online=True), unsettled)[1]
    assert len(never) == 16
    assert "sc+stop+conf-online" in frontier.rules_for(
        16, {"epsilon": 0.1, "weighted_epsilon": 0.2, "keep": 0.5, "measure": "mean",
             "weight_measure": "tail", "online_keep": 0.9, "online_stop_keep": 0.75,
             "online_stop_epsilon": 0.05}
    )  # fmt: skip


def test_the_replayed_stop_is_the_gates_own_test_token_by_token():
    import random

    from rse_fast.methods.voting import ConfidenceRule, OnlineGate

    rng = random.Random(7)
    for _ in range(200):
        gate = OnlineGate(ConfidenceRule(window=8, online=True), threshold=rng.uniform(1, 3))
        conf = [rng.uniform(0.5, 4.0) for _ in range(rng.randrange(0, 60))]
        by_gate = next((t for t in range(1, len(conf) + 1) if gate.unsure(conf[:t])), None)
        assert frontier.stopped_where(conf, gate) == by_gate


def pooled_cell(split: str, grades: dict[str, list[float]], secs: dict[str, float]) -> dict:
    """A summarized cell: every method at every budget k costs k * 100 tokens per problem and
    k * secs[method] seconds, with the same grades at every budget."""
    methods = {
        m: {str(k): {"per_problem": g, "per_problem_tokens": [k * 100.0] * len(g),
                     "per_problem_time": [k * secs[m]] * len(g)} for k in frontier.BUDGETS}
        for m, g in grades.items()
    }  # fmt: skip
    return {"cell": f"{split}-cell", "split": split, "methods": methods}


def test_the_best_rule_picked_on_dev_is_read_once_on_test_in_each_unit():
    """The dev cells favour rule x, which is worse on test: the rule picked on the test pools
    ties sc there, the rule picked on dev loses; in time, x (twice as slow) only fits from
    the second budget on."""
    secs = {"sc": 1.0, "sc+stop": 1.0, "x": 2.0}
    dev = pooled_cell("dev", {"sc": [0, 1], "sc+stop": [0, 1], "x": [1, 1]}, secs)
    test = pooled_cell("test", {"sc": [1, 1], "sc+stop": [1, 1], "x": [0, 1]}, secs)
    partial = {**pooled_cell("test", {"sc": [0], "sc+stop": [0], "x": [1]}, secs), "partial": True}
    tokens = frontier.pooled_targets([dev, test, partial])
    assert tokens["problems"] == 2 and tokens["unit"] == "tokens"  # the partial cell waits
    assert tokens["cells"] == ["test-cell"]
    assert tokens["best_vs_sc_equal_cost"]["diff"] == 0.0
    on_dev = tokens["best_picked_on_dev_vs_sc_equal_cost"]
    assert {b["method"] for b in on_dev["by_budget"].values()} == {"x"}
    assert on_dev["diff"] == -0.5 and on_dev["dev_cells"] == ["dev-cell"]
    savings = tokens["savings_at_sc_accuracy"]
    assert savings["budget_samples"] == 2 and savings["ratio"] == 2 / 16
    time = frontier.pooled_targets([dev, test], "time")["best_picked_on_dev_vs_sc_equal_cost"]
    assert [time["by_budget"][str(k)]["diff"] for k in frontier.BUDGETS] == [0, -0.5, -0.5, -0.5]
    assert time["by_budget"]["2"]["method"] != "x"
