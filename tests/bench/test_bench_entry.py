"""Every bench starts from a clean checkout: ``python -m bench NAME --help`` for each, and each
worker module started both ways a bench starts one (as a module, and as a script from bench/,
where a module named like a standard-library one would shadow it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHES

ROOT = Path(__file__).resolve().parents[2]
#: worker module → whether a bench starts it as a script too (peers runs its_hub's side with
#: that venv's interpreter, on the file)
WORKERS = {"peers_worker": True, "rse_worker": False}


def started(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_says_what_it_takes(name):
    done = started([sys.executable, "-m", "bench", name, "--help"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout.lower(), done.stdout[:500]


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_every_worker_starts_as_a_bench_starts_it(worker):
    ways = [[sys.executable, "-m", f"bench.{worker}", "--help"]]
    if WORKERS[worker]:
        ways.append([sys.executable, str(ROOT / "bench" / f"{worker}.py"), "--help"])
    for cmd in ways:
        done = started(cmd)
        assert done.returncode == 0 and "usage:" in done.stdout.lower(), done.stderr[-2000:]


def test_no_bench_module_shadows_the_standard_library():
    shadowing = sorted(
        p.stem for p in (ROOT / "bench").glob("*.py") if p.stem in sys.stdlib_module_names
    )
    assert shadowing == []
