"""The queue of model runs: every entry names a cell its bench has, progress is read from the
records every method of a cell has, and a typo fails naming it."""

from __future__ import annotations

import json

import pytest

from bench import model_queue as queue


def test_every_queued_run_is_a_known_cell_once_and_says_why():
    runs = queue.entries()
    assert runs and len({(e.bench, e.cell) for e in runs}) == len(runs)
    assert all(e.why for e in runs)


def test_a_cell_is_done_only_for_problems_every_method_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(queue, "HERE", tmp_path)
    entry = queue.Entry("rse_grounded", "test-he-0.5b", "")
    folder = tmp_path / "results" / "rse_grounded" / "test-he-0.5b"
    folder.mkdir(parents=True)
    rows = {"sc": ["a", "b", "c"], "bon+filter": ["a", "b"], "reflexion": ["a", "b"],
            "rse+check": ["b", "a"]}  # fmt: skip
    for label, ids in rows.items():
        (folder / f"{label}.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    assert queue.progress(entry) == (2, 60)
    assert queue.written(entry) == 9  # a method's records count before the others catch up


def test_a_queue_naming_a_missing_cell_fails_naming_it(tmp_path):
    path = tmp_path / "queue.toml"
    path.write_text('[[run]]\nbench = "frontier"\ncell = "test-nowhere"\n')
    with pytest.raises(ValueError, match="frontier has no cell 'test-nowhere'"):
        queue.entries(path)
    path.write_text('[[run]]\nbench = "dedup"\ncell = "x"\n')
    with pytest.raises(ValueError, match="not dedup"):
        queue.entries(path)


def attempts(codes: list[int], done: list[int], retries: int = 1) -> int:
    """How many attempts ``run_until_done`` makes, given each attempt's exit code and the
    records written before the first and after each."""
    entry = queue.Entry("rse_grounded", "test-he-1.5b", "")
    code_iter, done_iter, made = iter(codes), iter(done), []
    queue.run_until_done(
        entry, lambda: made.append(1) or next(code_iter), retries, lambda: next(done_iter)
    )
    return len(made)


def test_a_failed_cell_is_resumed_until_it_fails_twice_without_progress():
    """One call timing out must not cost the queue its night: a failed attempt is resumed;
    one that wrote records resets the count; two in a row that wrote none stop it."""
    assert attempts([1, 0], [0, 0]) == 2
    assert attempts([1, 1, 1, 0], [0, 1, 2, 2]) == 4  # the first two each wrote a record
    with pytest.raises(SystemExit, match=r"test-he-1.5b failed \(exit 1\) 2 times in a row"):
        attempts([1, 1, 0], [0, 0, 0])
    with pytest.raises(SystemExit, match="1 times in a row"):
        attempts([1, 0], [0, 0], retries=0)
    assert attempts([0], [3]) == 1
