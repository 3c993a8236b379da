"""The ablation's analysis: the numbers a claim about RSE rests on, from records we write here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import rse_ablation

BENCH = Path(__file__).resolve().parents[2] / "bench"


class Dataset:
    """Grades a sample right when it ends in the problem's gold answer."""

    def grade(self, problem: Any, text: str) -> bool:
        return text.endswith(f"={problem.gold}")


def record(texts: list[str], rounds: list[int], guided: list[int] | None) -> dict[str, Any]:
    return {"pool_texts": texts, "pool_rounds": rounds, "guided_rounds": guided}


def test_guided_samples_are_compared_with_sc_at_the_same_positions_only() -> None:
    problem = SimpleNamespace(gold="5")
    right, wrong = "x=5", "x=4"
    # round 1 (positions 0-1) shared; round 2 guided; round 3 a plain round after settling
    rse = {"p": record([right, wrong, right, right, wrong, wrong], [1, 1, 2, 2, 3, 3], [2])}
    sc = {"p": record([right, wrong, wrong, wrong, right, right], [1, 1, 1, 1, 1, 1], None)}
    got = rse_ablation.guided_vs_sc_samples(Dataset(), {"p": problem}, rse, sc, ["p"], k=2)
    assert got["problems"] == 1
    assert got["diff"] == pytest.approx(1.0)  # positions 2-3: RSE right twice, SC never
    assert got["by_round1_right"] == {"1": {"diff": pytest.approx(1.0), "problems": 1}}


def test_a_problem_no_bank_reached_is_left_out() -> None:
    problem = SimpleNamespace(gold="5")
    rse = {"p": record(["x=5", "x=4", "x=4"], [1, 1, 2], [])}
    sc = {"p": record(["x=5", "x=4", "x=5"], [1, 1, 1], None)}
    got = rse_ablation.guided_vs_sc_samples(Dataset(), {"p": problem}, rse, sc, ["p"], k=2)
    assert got["problems"] == 0 and got["diff"] is None


def test_old_records_count_every_later_round_only_when_a_block_was_shown() -> None:
    shown = {"pool_rounds": [1, 1, 2, 3], "bank_prompt_tokens": 40}
    assert rse_ablation.guided_rounds(shown) == {2, 3}
    assert rse_ablation.guided_rounds({**shown, "bank_prompt_tokens": 0}) == set()
    assert rse_ablation.guided_rounds({**shown, "guided_rounds": [3]}) == {3}


def test_experience_share_counts_distillation_and_the_bank_block() -> None:
    rows = [
        {"tokens": 1000, "roles": {"rollout": 600, "distill": 300}, "bank_prompt_tokens": 100},
        {"tokens": 1000, "roles": {"rollout": 1000}, "bank_prompt_tokens": 0},
    ]
    assert rse_ablation.overhead_share(rows) == pytest.approx(0.2)


def test_variants_are_reported_against_the_defaults_and_each_has_its_bank_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problems = [SimpleNamespace(id=f"p{i}", gold=str(i)) for i in range(4)]
    dataset = SimpleNamespace(problems=problems, grade=Dataset().grade)
    monkeypatch.setattr(rse_ablation, "load_dataset", lambda *_: dataset)
    monkeypatch.setattr(rse_ablation, "WORK", tmp_path)
    cell = rse_ablation.Cell("m", "t", 4, 1, 100, ("rse", "rse:votes", "sc"), "dev")
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cell.json").write_text('{"commit": "abc", "machine": {}}')

    def rows(right: list[bool], later: list[bool], guided: list[int] | None) -> str:
        out = []
        for p, ok in zip(problems, right, strict=True):
            texts = [f"={p.gold}", "=x"] + [f"={p.gold}" if x else "=x" for x in later]
            rec = {
                "id": p.id, "tokens": 100, "final_text": f"={p.gold}" if ok else "=x",
                "pool_texts": texts, "pool_rounds": [1, 1, 2, 2], "guided_rounds": guided,
                "roles": {"distill": 25}, "bank_prompt_tokens": 0,
                "cost": {"unit": "price", "spent": 40.0 + len(out)},
            }  # fmt: skip
            out.append(json.dumps(rec))
        return "\n".join(out)

    (folder / "rse.jsonl").write_text(rows([True, True, False, False], [False, False], [2]))
    (folder / "rse_votes.jsonl").write_text(rows([True, True, True, False], [True, True], [2]))
    (folder / "sc.jsonl").write_text(rows([True, False, False, False], [True, False], None))
    got = rse_ablation.summarize_cell("c", cell)
    assert got is not None
    assert got["rse_vs_sc"]["diff"] == pytest.approx(0.25)
    assert got["rse_votes_vs_rse"]["diff"] == pytest.approx(0.25)
    by = got["experience_by_method"]
    assert by["rse"]["guided_vs_sc_sample"]["diff"] == pytest.approx(-0.5)
    assert by["rse_votes"]["guided_vs_sc_sample"]["diff"] == pytest.approx(0.5)
    assert got["guided_vs_sc_sample"] == by["rse"]["guided_vs_sc_sample"]
    assert by["rse_votes"]["overhead_share"] == pytest.approx(0.25)
    assert got["tokens_per_sample"]["sc"] == pytest.approx(25.0)  # 100 tokens, 4 samples
    # a cell of RSE and a variant only: the variant against the default, guided samples too
    alone = rse_ablation.Cell("m", "t", 4, 1, 100, ("rse", "rse:votes"), "dev")
    (folder / "sc.jsonl").unlink()
    got = rse_ablation.summarize_cell("c", alone)
    assert got is not None and "rse_vs_sc" not in got
    assert got["rse_votes_vs_rse"]["diff"] == pytest.approx(0.25)
    assert got["variants_vs_rse"]["rse_votes"]["guided_vs_rse_sample"]["diff"] == pytest.approx(1.0)
    assert "| c | 4 | 100 | rse:votes | 75% |" in rse_ablation.table(
        {"cells": [got], "pooled": rse_ablation.pooled([got])}
    )
    assert got["budget_tokens"] == 100 and got["mean_cost"] is None  # a tokens cell
    # a cell whose budget is in another unit says so, and what each method spent in it
    priced = dataclasses.replace(alone, options={"budget_unit": "price:input=1,output=4"})
    got = rse_ablation.summarize_cell("c", priced)
    assert got is not None and got["budget_tokens"] is None
    assert got["budget"] == 100 and got["budget_unit"] == "price:input=1,output=4"
    assert got["mean_cost"] == {"rse": pytest.approx(41.5), "rse:votes": pytest.approx(41.5)}
    assert "| c | 4 | 100 price | rse:votes | 75% |" in rse_ablation.table(
        {"cells": [got], "pooled": rse_ablation.pooled([got])}
    )


def test_bank_reach_splits_the_difference_by_whether_a_bank_was_shown() -> None:
    records = {
        "a": {"guided_rounds": [2], "distilled_rounds": 1},  # shown: RSE right, SC wrong
        "b": {"guided_rounds": [], "distilled_rounds": 2},  # paid for, never shown
        "c": {"guided_rounds": [], "distilled_rounds": 0},  # nothing distilled
    }
    rse = {"a": 1.0, "b": 0.0, "c": 1.0}
    sc = {"a": 0.0, "b": 1.0, "c": 1.0}
    got = rse_ablation.bank_reach(records, rse, sc, ["a", "b", "c"])
    assert got["shown"] == {"diff": pytest.approx(1.0), "problems": 1}
    assert got["not_shown"] == {"diff": pytest.approx(-0.5), "problems": 2}
    assert got["distilled_never_shown_share"] == pytest.approx(1 / 3)


def test_pooled_bank_reach_weights_each_cell_by_its_problems() -> None:
    def cell(split: str, shown: tuple[float, int], not_shown: tuple[float, int]) -> dict[str, Any]:
        n = shown[1] + not_shown[1]
        return {
            "split": split,
            "per_problem": {"rse": {f"{split}{i}": 1.0 for i in range(n)},
                            "sc": {f"{split}{i}": 0.0 for i in range(n)}},
            "bank_reach": {"shown": {"diff": shown[0], "problems": shown[1]},
                           "not_shown": {"diff": not_shown[0], "problems": not_shown[1]}},
        }  # fmt: skip

    cells = [cell("test", (1.0, 1), (0.0, 3)), cell("test", (0.0, 3), (0.5, 1)),
             cell("dev", (1.0, 10), (1.0, 10))]  # fmt: skip
    got = rse_ablation.pooled(cells)
    assert got["problems"] == 8  # the dev cell is not pooled
    assert got["bank_reach"]["shown"] == {"diff": pytest.approx(0.25), "problems": 4}
    assert got["bank_reach"]["not_shown"] == {"diff": pytest.approx(0.125), "problems": 4}


def test_a_record_torn_by_a_killed_writer_is_dropped_and_the_file_mended(tmp_path):
    """A worker killed mid-write leaves half a line; resuming skips it (the problem reruns)
    instead of failing on it, and the next record starts on a line of its own."""
    from bench.common import read_jsonl

    path = tmp_path / "rse.jsonl"
    path.write_text('{"id": "a", "tokens": 1}\n{"id": "b", "tok')
    assert [r["id"] for r in read_jsonl(path)] == ["a"]
    assert path.read_text().endswith('"tok')  # a reader alone changes nothing
    assert [r["id"] for r in read_jsonl(path, repair=True)] == ["a"]
    assert path.read_text() == '{"id": "a", "tokens": 1}\n'
    path.write_text('{"id": "a"}\n{"id": "b", "tok\n{"id": "c"}\n')
    with pytest.raises(ValueError):
        read_jsonl(path)  # damage before the last line is not a torn write: it is reported


def test_cells_are_data_each_saying_why_and_a_bad_one_is_named(tmp_path, monkeypatch):
    """Every bench's cells load from bench/cells/*.toml with their task resolved and a
    reason; a field no cell has, or a task no one named, fails naming the cell."""
    from bench import common, frontier, rse_grounded

    for cells in (rse_ablation.CELLS, rse_grounded.CELLS, frontier.CELLS):
        assert cells and all(c.why and (":" in c.task or c.task == "humaneval")
                             for c in cells.values())  # fmt: skip
    assert rse_ablation.CELLS["test-mid-1.5b"].methods == ("rse", "sc")
    (tmp_path / "tasks.toml").write_text('[tasks]\neasy = "gym:x"\n')
    monkeypatch.setattr(common, "CELLS_DIR", tmp_path)
    (tmp_path / "b.toml").write_text('[cells."c-0.5b"]\ntask = "easy"\nbudgte = 1\n')
    with pytest.raises(ValueError, match=r"cell 'c-0\.5b' of b: .*budgte"):
        common.load_cells("b", rse_ablation.Cell)
    (tmp_path / "b.toml").write_text('[cells."c-0.5b"]\ntask = "hard"\n')
    with pytest.raises(ValueError, match=r"cell 'c-0\.5b' of b: unknown task 'hard'"):
        common.load_cells("b", rse_ablation.Cell)


def test_cells_run_with_the_confidence_rule_are_pooled_apart() -> None:
    """RSE − SC over plain test cells stays what it was when a confidence cell lands; the
    confidence cells answer rse_conf_vs_sc_conf on their own."""
    from bench.rse_ablation import pooled

    def cell(rse: list[float], sc: list[float], options: dict) -> dict:
        ids = [f"p{i}" for i in range(len(rse))]
        scores = {"rse": dict(zip(ids, rse, strict=True)), "sc": dict(zip(ids, sc, strict=True))}
        return {"split": "test", "options": options, "per_problem": scores,
                "planned_problems": 5, "partial": len(rse) < 5}  # fmt: skip

    plain = cell([1, 0, 1, 1], [1, 0, 0, 1], {})
    conf = cell([0, 0, 0], [1, 1, 1], {"confidence": True})
    alone, together = pooled([plain]), pooled([plain, conf])
    assert together["rse_vs_sc"] == alone["rse_vs_sc"] and together["problems"] == 4
    assert together["rse_conf_vs_sc_conf"]["diff"] == -1.0
    assert together["rse_conf_vs_sc_conf"]["problems"] == 3
    # a confidence cell still running says so: 3 of its 5 planned problems are in
    assert together["rse_conf_vs_sc_conf"]["planned_problems"] == 5
    assert together["rse_conf_vs_sc_conf"]["partial"] is True
    assert alone["rse_conf_vs_sc_conf"]["problems"] == 0


def test_a_summary_names_the_machine_its_cells_ran_on_not_the_one_summarizing() -> None:
    from bench.common import measured_on

    intel = {"cpu": "Intel", "cores": 2, "load_avg_1m": 1.0}
    amd = {"cpu": "AMD", "cores": 2, "load_avg_1m": 2.5}
    found = measured_on([{"machine": intel}, {"machine": amd}, {"machine": intel}])
    assert found == {"cpu": "Intel", "cores": 2, "load_avg_1m": 2.5, "also_on": ["AMD"]}
    assert measured_on([]) is None


#: cells that shared problems before the rule (issue 40: reasoning-gym draws problem i of
#: seed s from Random(s + i), so nearby seeds share problems shifted by one); they ran, and
#: their records stay as they are. No cell defined since may share a problem with another.
SHARED_BEFORE_THE_RULE = {
    frozenset({"rse_ablation/test-easy-0.5b", "rse_ablation/test-three-0.5b"}),
    frozenset({"rse_ablation/test-mid-1.5b", "rse_ablation/test-three-0.5b"}),
    frozenset({"rse_ablation/dev-easy-0.5b", "rse_ablation/dev-easy8k-0.5b"}),
    frozenset({"rse_ablation/dev-easy-0.5b", "rse_ablation/dev-three-ablate-0.5b"}),
    frozenset({"rse_ablation/dev-easy8k-0.5b", "rse_ablation/dev-three-ablate-0.5b"}),
    frozenset({"frontier/dev-easy-0.5b", "frontier/test-easy-0.5b"}),
}


def test_no_cell_shares_a_problem_with_another_but_those_that_ran_before_the_rule() -> None:
    from collections import defaultdict
    from itertools import combinations

    from bench import eval_local, frontier, rse_grounded
    from rse_fast.eval.datasets import load_dataset

    benches = {"rse_ablation": rse_ablation.CELLS, "frontier": frontier.CELLS,
               "rse_grounded": rse_grounded.CELLS}  # fmt: skip
    cells = [(f"{bench}/{name}", c.task, c.problems, c.seed)
             for bench, found in benches.items() for name, c in found.items()
             if c.task != "humaneval" and c.split not in ("probe", "retired")]  # fmt: skip
    cells += [(f"eval_local/{name}", p["dataset"], p["limit"], p["seed"])
              for name, p in eval_local.PARTS.items() if p["dataset"] != "healthbench"]  # fmt: skip
    holders: dict[str, set[str]] = defaultdict(set)
    for name, task, problems, seed in cells:
        for p in load_dataset(task, problems, seed).problems:
            holders[p.prompt].add(name)
    shared = {frozenset(pair) for names in holders.values() if len(names) > 1
              for pair in combinations(sorted(names), 2)}  # fmt: skip
    assert shared <= SHARED_BEFORE_THE_RULE, sorted(map(sorted, shared - SHARED_BEFORE_THE_RULE))
