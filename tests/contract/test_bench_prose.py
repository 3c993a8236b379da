"""The READMEs' numbers come from bench/results/*.json: none drifts, none is typed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import serve, summarize

BENCH = Path(__file__).resolve().parents[2] / "bench"


#: a number with a unit of measurement after it (what a measurement looks like in prose)
MEASURED = re.compile(
    r"(?<![≤≥<>~=±\-–\w.])(?<![≤≥<>~] )"
    r"(\d[\d,]*(?:\.\d+)?)\s?(×|ms\b|µs\b|s\b|%|GB/s|GFLOP/s|MiB\b|tokens/s|pts\b)"
)
#: stated settings and targets, not measurements: "1 s upstream latency", "200 ms latency"
SETTINGS = re.compile(
    r"(latency|at most|under|within|per call|timeout|every|each|bootstrap|interval)\b", re.I
)


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside code fences and generated blocks, inline values taken out."""
    out, in_code, in_block = [], False, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if re.match(r"<!-- [\w-]+:start -->", line):
            in_block = True
        if re.match(r"<!-- [\w-]+:end -->", line):
            in_block = False
            continue
        if not (in_code or in_block):
            out.append((i, summarize.VALUE.sub("", line)))
    return out


def typed_measurements(text: str) -> list[tuple[int, str, str]]:
    """(line number, the number, the line) of each measurement typed into the prose."""
    return [
        (i, m.group(0), line.strip())
        for i, line in prose_lines(text)
        for m in MEASURED.finditer(line)
        if not SETTINGS.search(line[m.end() : m.end() + 40])
    ]


def test_every_number_matches_its_json():
    assert summarize.drift() == []


@pytest.mark.parametrize("doc", summarize.DOCS, ids=lambda d: d.parent.name or d.name)
def test_no_measurement_is_typed_by_hand(doc):
    found = typed_measurements(doc.read_text())
    typed = [f"{doc.name}:{i}: {number!r} in {line!r}" for i, number, line in found]
    assert typed == []


def test_drift_is_caught(tmp_path, monkeypatch):
    """A value edited by hand, and a reference to a key the JSON lacks, are both reported."""
    doc = tmp_path / "README.md"
    doc.write_text(
        "Scan: <!--v dedup_quick.scan_fraction_of_bandwidth:.2f-->9.99<!--/v--> of bandwidth.\n"
    )
    monkeypatch.setattr(summarize, "DOCS", (doc,))
    monkeypatch.setattr(summarize, "HERE", tmp_path)  # no generated blocks in this copy
    monkeypatch.setattr(summarize, "ROOT", tmp_path)
    found = summarize.drift()
    assert len(found) == 1 and "9.99" in found[0]
    doc.write_text("<!--v dedup_quick.no_such_key-->1<!--/v-->\n")
    with pytest.raises(KeyError, match="no_such_key"):
        summarize.drift()


def test_serve_figures_recompute_from_the_raw_samples():
    """serve.json's request figures are what its committed samples give."""
    committed = json.loads((BENCH / "results" / "serve.json").read_text())
    samples = json.loads(serve.SAMPLES.read_text())
    again = serve.summarize(samples)
    for key, value in again.items():
        if (isinstance(value, list) and "inf" in value) or value == "inf":
            assert committed[key] == value, key
        else:
            assert committed[key] == pytest.approx(value, rel=1e-9), key
    low, high = committed["p99_added_minus_floor_ms_ci90"]
    assert low <= committed["p99_added_minus_floor_ms_median"] <= high


def test_the_serve_ratio_counts_every_bootstrap_draw():
    """A draw where the floor added nothing and ours did is +∞, kept (the old ratio left such
    draws out, 60 of 300, and its median fell from 0.87 to 0.47)."""
    assert serve.added_ratio(2.0, 0.0) == float("inf")
    assert serve.added_ratio(2.0, -1.0) == float("inf")
    assert serve.added_ratio(-0.5, -1.0) == 1.0  # neither added anything
    assert serve.added_ratio(1.0, 4.0) == 0.25
    samples = json.loads(serve.SAMPLES.read_text())
    draws = serve.bootstrap_added(samples["overhead_s"])
    assert len(draws["ratio"]) == len(draws["minus"]) == 300  # none left out
    committed = json.loads((BENCH / "results" / "serve.json").read_text())
    share = sum(r == float("inf") for r in draws["ratio"]) / 300
    assert committed["p99_added_vs_floor_infinite_share"] == pytest.approx(share)


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        ("the kernel is 7.9× FAISS", True),
        ("ours adds 2.50 ms at p99", True),
        ("the demo took 489 s", True),
        ("5,477 tokens/s on two cores", True),
        ("the target is ≤ 1.5×", False),
        ("200 concurrent at 1 s upstream latency", False),
        ("ours is <!--v serve.p50_added_ms:.2f-->0.91<!--/v--> ms", False),
    ],
)
def test_hand_typed_measurements_are_recognised(tmp_path, line, flagged):
    doc = tmp_path / "README.md"
    doc.write_text(f"Intro.\n\n{line}\n\n```bash\nsleep 5 s\n```\n")
    assert bool(typed_measurements(doc.read_text())) == flagged


def test_a_cell_is_named_not_counted(monkeypatch):
    """A reference names a cell; cells added before it do not move it to another cell."""
    cells = [{"cell": "a", "x": 1}, {"cell": "b-0.5b", "x": 2}]
    monkeypatch.setattr(summarize, "read_result", lambda name: {"cells": cells})
    assert summarize.lookup("r.cells.b-0.5b.x") == 2
    cells.insert(0, {"cell": "new", "x": 3})
    assert summarize.lookup("r.cells.b-0.5b.x") == 2
    assert summarize.lookup("r.cells.0.x") == 3
    with pytest.raises(KeyError, match="'c'"):
        summarize.lookup("r.cells.c.x")


def test_an_interval_is_shown_end_by_end():
    """A list value (an interval) takes the format spec on each end, not Python's repr."""
    assert summarize.fmt([-0.3480769230769231, 0.05], "+.2f") == "[-0.35, +0.05]"
    assert summarize.fmt([0.0, 0.375]) == "[0, 0.375]"
    assert summarize.fmt(0.5, ".0%") == "50%"


def test_a_marker_that_does_not_parse_is_an_error_not_an_unchecked_number():
    with pytest.raises(ValueError, match="line 2"):
        summarize.render_prose("fine\nthe share was <!--v frontier.pooled!x-->64%<!--/v-->\n")


def test_a_key_holding_a_colon_takes_the_spec_after_the_last_colon(monkeypatch):
    """Variants are named like ``rse:brief``; the marker's spec is what follows the last colon."""
    result = {"accuracy": {"rse": 0.75, "rse:brief": 0.5833}}
    monkeypatch.setattr(summarize, "read_result", lambda name: result)
    text = "<!--v r.accuracy.rse:brief:.0%-->1%<!--/v--> <!--v r.accuracy.rse:.0%-->1%<!--/v-->"
    assert summarize.render_prose(text) == (
        "<!--v r.accuracy.rse:brief:.0%-->58%<!--/v--> <!--v r.accuracy.rse:.0%-->75%<!--/v-->"
    )
