"""The README's demo as a new user runs it: wall time, tokens and the distillation's share.

    python bench/demo.py        # ~2.5 min on 2 cores; needs `rse-fast local setup` done

Runs ``rse-fast solve --demo --json --quiet`` in a fresh process (its llama-server start and
model load included, as the user waits for them) and writes results/demo.json, whose numbers
the README quotes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result

#: the README's target for the demo on 2 cores
TARGET_S = 240


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # the report page goes here, not the repo
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "rse_fast.cli", "solve", "--demo", "--json", "--quiet"],
            capture_output=True, text=True, check=True, cwd=tmp,
        )  # fmt: skip
        wall = time.perf_counter() - t0
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
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
