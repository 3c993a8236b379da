"""The README's demo as a new user runs it: wall time, tokens and the distillation's share.

    python -m bench demo        # ~2.5 min on 2 cores; needs `rse-fast local setup` done

Runs ``rse-fast solve --demo --json --quiet`` in a fresh process (its llama-server start and
model load included, as the user waits for them) and writes results/demo.json, whose numbers
the README quotes, with the run's report page (results/demo_report.html) and, where chromium
is installed, its screenshot (results/demo_report.png): the README links both, so they show
the run that was measured.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, write_result

#: the README's target for the demo on 2 cores
TARGET_S = 240
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def screenshot(page: Path, png: Path, profile: Path) -> bool:
    """``page`` rendered by headless chromium into ``png``; False where there is no chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return False
    subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
         "--window-size=1200,1600", page.resolve().as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    return png.exists()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # the report page goes here, not the repo
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "rse_fast.cli", "solve", "--demo", "--json", "--quiet"],
            capture_output=True, text=True, check=True, cwd=tmp,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        page = RESULTS / "demo_report.html"
        shutil.copyfile(Path(tmp) / "rse-fast-demo-report.html", page)
        shot = screenshot(page, RESULTS / "demo_report.png", Path(tmp) / "profile")
    result = json.loads(done.stdout)
    ledger = result["ledger"]
    tokens = {role: int(v["total_tokens"]) for role, v in ledger["roles"].items()}
    total = int(ledger["total_tokens"])
    payload = {
        "command": "rse-fast solve --demo",
        "wall_s": wall,
        "within_target": wall <= TARGET_S,
        "target_s": TARGET_S,
        "tokens": total,
        "tokens_by_role": tokens,
        "distill_share": tokens.get("distill", 0) / total if total else None,
        "rounds": len(result["rounds"]),
        "answer": result["answer"],
        "correct": result["correct"],
    }
    path = write_result("demo", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "tokens_by_role"}))
    print(f"wrote {path} and {page}" + (" and its screenshot" if shot else " (no chromium)"))


if __name__ == "__main__":
    main()
