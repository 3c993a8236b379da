"""The README's demo as a new user runs it: wall time, tokens, the distillation's share, and
the answer and bank as printed (a change in what the demo shows is seen in review).

    python -m bench demo              # ~2 min on 2 cores; needs `rse-fast local setup` done
    python -m bench demo --first-run  # the README's first command on a fresh clone, HOME,
                                      # venv and pip cache: the newcomer's wait (minutes)

Runs ``rse-fast solve --demo --json --quiet`` in a fresh process (its llama-server start and
model load included, as the user waits for them) and writes results/demo.json, whose numbers
the README quotes, with the run's report page (results/demo_report.html) and, where chromium
is installed, its screenshot (results/demo_report.png): the README links both, so they show
the run that was measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, ROOT, read_result, write_result

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


#: the README's target for its first command, fresh machine to a right answer
FIRST_RUN_TARGET_S = 300


def first_command() -> str:
    """The README's first command: the first bash block under "Two commands"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0].strip()


def first_run() -> dict[str, object]:
    """The first command as a newcomer meets it: a fresh clone of this commit, a fresh HOME
    (so no cached server, model or kernel plans) and an empty pip cache, with no local wheel
    folder; timed to the end of the demo's answer."""
    command = first_command()
    with tempfile.TemporaryDirectory() as tmp:
        clone, home = Path(tmp) / "rse_fast", Path(tmp) / "home"
        home.mkdir()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PIP_FIND_LINKS", "RSE_FAST_", "VIRTUAL_ENV"))}  # fmt: skip
        env.update(HOME=str(home), PIP_CACHE_DIR=str(Path(tmp) / "pip-cache"))
        t0 = time.perf_counter()
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                              text=True)  # fmt: skip
        wall = time.perf_counter() - t0
    tail = done.stdout.strip().splitlines()
    answer_line = next((x for x in tail if x.startswith("answer: ")), None)
    return {
        "first_run_command": command,
        "first_run_s": wall,
        "first_run_exit": done.returncode,
        "first_run_answer_line": answer_line,
        "first_run_correct": answer_line is not None and "correct: True" in answer_line,
        "first_run_target_s": FIRST_RUN_TARGET_S,
        "first_run_stderr_tail": done.stderr.strip().splitlines()[-5:],
    }


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--first-run",
        action="store_true",
        help="time the README's first command on a fresh clone, HOME and caches",
    )
    if parser.parse_args().first_run:
        found = first_run()
        payload = {**read_result("demo"), **found}
        payload.pop("machine", None)
        payload.pop("measured_at", None)
        path = write_result("demo", payload)
        print(json.dumps({k: found[k] for k in ("first_run_s", "first_run_correct")}))
        print(f"wrote {path}")
        return
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
        "votes": f"{result['votes']}/{result['total_votes']}",
        "checks": result.get("checks"),
        # the bank as the summary prints it: the best-ranked of each kind with its support
        "bank_printed": [
            f"{name} [support {item['support']}]: {item['text']}"
            for kind, name in (("negative", "pitfall"), ("positive", "proposition"))
            for item in (result.get("bank_top") or {}).get(kind, [])
        ],
        # what `--first-run` measured last (it keeps its own fields; this run keeps them)
        **{k: v for k, v in read_result("demo").items() if k.startswith("first_run")},
    }
    path = write_result("demo", payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "tokens_by_role"}))
    print(f"wrote {path} and {page}" + (" and its screenshot" if shot else " (no chromium)"))


if __name__ == "__main__":
    main()
