"""The run report page: written by ``solve --report`` and by ``rse-fast report TRACE``, self-
contained (no scripts, no network), and rendered by a real browser (headless Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import threaded_server

from rse_fast import cli

from fakes.scripted_model import GOLD, PITFALL, PROBLEM, reply


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    with threaded_server(default_reply=reply) as srv:
        code = cli.main(["solve", PROBLEM, "--base-url", srv.base_url, "--rounds", "2", "--k", "3",
                         "--gold", GOLD, "--quiet", "--trace", str(d / "t.jsonl"),
                         "--report", str(d / "run.html"),
                         "--settle-margin", "off"])  # fmt: skip
    assert code == 0
    return d


def test_report_shows_rounds_rollouts_decisions_tokens_and_chart(run):
    page = parse(run / "run.html")
    text = " ".join(page.text)
    assert "Round 1 (K=3)" in text and "Round 2 (K=3)" in text
    assert text.count("wrong") >= 3 and text.count("right") >= 3  # round 1 wrong, round 2 right
    assert PITFALL in text and "accepted" in text and "rejected" in text
    assert "none (round 1 is plain sampling)" in text  # round 1's prompt had no experience
    assert "Tokens by role" in text and "distill" in text and "explore" in text
    assert "svg" in page.tags and "rect" in page.tags  # the accuracy chart
    assert "script" not in page.tags and not page.links  # self-contained


def test_report_command_rebuilds_the_page_from_the_trace(run, capsys):
    out = run / "again.html"
    assert cli.main(["report", str(run / "t.jsonl"), "--out", str(out)]) == 0
    assert f"report page: {out}" in capsys.readouterr().out
    assert " ".join(parse(out).text) == " ".join(parse(run / "run.html").text)


def test_report_of_a_trace_without_a_result_is_a_one_line_error(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"request": {}}\n')
    proc = subprocess.run([sys.executable, "-m", "rse_fast.cli", "report", str(trace)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "holds no RSE result record" in proc.stderr and len(proc.stderr.splitlines()) == 1


CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def test_report_renders_in_headless_chromium(run, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:  # CI must render the page; a developer's machine may lack a browser
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing: `apt-get install chromium` (.ci/run installs it)")
        pytest.skip("chromium is not installed: `apt-get install chromium` to run this test")
    url = (run / "run.html").as_uri()
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert "Round 1 (K=3)" in dom.stdout and "Round 2 (K=3)" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1200,1600", url],
                   capture_output=True, timeout=90)  # fmt: skip
    assert shot.exists() and shot.stat().st_size > 20_000


def test_a_prompt_without_experience_says_why():
    """Round 1, an empty bank, and a bank whose items were all held back read differently."""
    from rse_fast.rse.run_page import render_report

    def rnd(i: int, held: int, block: str = "") -> dict:
        sizes = {"negative": held, "positive": 0}
        return {"round": i, "k": 4, "experience_block": block, "rollouts": [], "decisions": [],
                "bank_sizes": sizes, "answer": "7", "votes": 2}  # fmt: skip

    rounds = [rnd(1, 0), rnd(2, 3), rnd(3, 3, "Pitfalls:\n- x"), rnd(4, 0)]
    result = {"problem": "p", "answer": "7", "votes": 8, "total_votes": 16, "rounds": rounds,
              "bank_sizes": {}, "ledger": {"roles": {}}, "wall_s": 1.0}  # fmt: skip
    page = Page()
    page.feed(render_report(result))
    notes = [t for t in page.text if t.startswith("none")]
    assert notes == [
        "none (round 1 is plain sampling)",
        "none (empty bank)",  # round 2: round 1 left nothing in the bank
        # round 3 was guided; round 4's prompt came after a bank of 3 that it did not show
        "none shown: the bank held 3 items, held back (not yet found by enough rollouts, or "
        "round 1's vote had settled)",
    ]
