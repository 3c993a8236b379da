"""What dedup should embed: a structured experience's statement alone, or its rendered line?

    python -m bench embed_text      # < 30 s, writes results/embed_text.json

A structured proposition renders as ``statement (holds if …; from …)`` and a pitfall as
``[kind] context: move -> consequence``; the compact format (the default) is the statement
alone, so there the two are the same text. On the committed banks that have structured lines
(``data/structured_banks.jsonl``: every experience an earlier release's RSE runs accepted in
the local evaluation, run by run, in the order they were filed) each run is deduplicated
twice with the engine's index and τ — once on the lines, once on the statements parsed back
out of them (a proposition's text before its ``(holds if …; from …)``; a pitfall's first part
after its context: its move, or its trigger where one was given) — and the decisions and the
tokens embedded are compared.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, write_result
from rse_fast.encoder import Encoder
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.index import SimilarityIndex

SOURCE = Path(__file__).parent / "data" / "structured_banks.jsonl"
_PROPOSITION = re.compile(r"^(?P<statement>.*?) \((?:holds if |from ).*\)$", re.S)
_PITFALL = re.compile(r"^\[(?P<kind>[^\]]+)\] (?P<rest>.*)$", re.S)


def statement_of(line: str) -> tuple[str, str]:
    """(kind, statement) of a rendered line: ``negative`` for a tagged pitfall."""
    pit = _PITFALL.match(line)
    if pit:
        rest = pit.group("rest")
        head, sep, tail = rest.partition(": ")
        parts = (tail if sep and "->" not in head else rest).split(" -> ")
        moves = parts[1:] if not sep and len(parts) > 1 else parts
        return "negative", moves[0].strip()
    prop = _PROPOSITION.match(line)
    return "positive", (prop.group("statement") if prop else line).strip()


def runs() -> list[list[str]]:
    """Each recorded RSE run's accepted lines, in the order they were filed."""
    return [json.loads(raw)["accepted"] for raw in SOURCE.read_text().splitlines() if raw]


def decisions(encoder: Encoder, texts: list[str], kinds: list[str], tau: float) -> list[bool]:
    """The engine's greedy dedup of ``texts`` in order, one index per kind."""
    vectors = encoder.encode(texts)
    indexes: dict[str, SimilarityIndex] = {}
    keep = []
    for text, kind, vec in zip(texts, kinds, vectors, strict=True):
        index = indexes.setdefault(kind, SimilarityIndex(vectors.shape[1]))
        res = index.insert(vec[None, :].astype(np.float32), tau, keys=[text])
        keep.append(bool(res.accepted[0]))
    return keep


def main() -> None:
    import argparse

    argparse.ArgumentParser(prog="python -m bench embed_text", description=__doc__).parse_args()
    t0 = time.perf_counter()
    cfg = RSEConfig()
    encoder = Encoder()
    per_run: list[dict[str, Any]] = []
    same = total = 0
    tokens_line = tokens_statement = 0
    examples = []
    for lines in runs():
        parsed = [statement_of(x) for x in lines]
        kinds = [k for k, _ in parsed]
        statements = [s for _, s in parsed]
        tau = cfg.tau_positive  # τ is the same for both kinds by default
        by_line = decisions(encoder, lines, kinds, tau)
        by_statement = decisions(encoder, statements, kinds, tau)
        agree = sum(a == b for a, b in zip(by_line, by_statement, strict=True))
        same, total = same + agree, total + len(lines)
        tokens_line += encoder.count_tokens(lines)
        tokens_statement += encoder.count_tokens(statements)
        for line, st, a, b in zip(lines, statements, by_line, by_statement, strict=True):
            if a != b and len(examples) < 8:
                examples.append(
                    {"line": line, "statement": st, "line_kept": a, "statement_kept": b}
                )
        per_run.append({"items": len(lines), "agree": agree, "kept_line": sum(by_line),
                        "kept_statement": sum(by_statement)})  # fmt: skip
    payload = {
        "source": str(SOURCE.relative_to(RESULTS.parent.parent)),
        "tau": cfg.tau_positive,
        "runs": len(per_run),
        "items": total,
        "decision_agreement": same / total if total else None,
        "kept_line": sum(r["kept_line"] for r in per_run),
        "kept_statement": sum(r["kept_statement"] for r in per_run),
        "tokens_line": tokens_line,
        "tokens_statement": tokens_statement,
        "statement_token_ratio": tokens_statement / tokens_line if tokens_line else None,
        "disagreements": examples,
        "per_run": per_run,
        "wall_s": time.perf_counter() - t0,
    }
    path = write_result("embed_text", payload)
    for k in ("items", "decision_agreement", "kept_line", "kept_statement",
              "statement_token_ratio"):  # fmt: skip
        print(f"{k}: {payload[k]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
