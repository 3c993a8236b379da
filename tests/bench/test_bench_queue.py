"""The queue of model runs: every entry names a cell its bench has, progress is read from the
records every method of a cell has, and a typo fails naming it."""

from __future__ import annotations

import json

import pytest

from bench import queue


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


def test_a_queue_naming_a_missing_cell_fails_naming_it(tmp_path):
    path = tmp_path / "queue.toml"
    path.write_text('[[run]]\nbench = "frontier"\ncell = "test-nowhere"\n')
    with pytest.raises(ValueError, match="frontier has no cell 'test-nowhere'"):
        queue.entries(path)
    path.write_text('[[run]]\nbench = "dedup"\ncell = "x"\n')
    with pytest.raises(ValueError, match="not dedup"):
        queue.entries(path)
