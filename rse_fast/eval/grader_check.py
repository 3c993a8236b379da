"""How far to trust a rubric grader: its verdicts on criteria a person can check by reading.

Each item (``rse_fast/data/grader_hand_checked.json``, written for this project) is a short
health question, a response and one criterion whose verdict is plain from the text, with why
(half met, half not; one penalised behaviour). The grader reads each ``readings`` times, as it
reads candidates in an evaluation (sampled, a seed per reading); agreement is the share of
readings that match the hand verdict, with a bootstrap interval over items (an item's readings
are not independent). A reading with no verdict is garbage, counted apart, never a match.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

from rse_fast.eval.grading import Criterion, RubricGrader
from rse_fast.eval.metrics import bootstrap_mean_ci
from rse_fast.methods.types import Problem
from rse_fast.util.tasks import gather_or_cancel

#: where ``rse-fast eval`` keeps a run's grader check, beside its results
GRADER_CHECK_FILE = "grader_check.json"


@dataclass(frozen=True, kw_only=True)
class HandChecked:
    id: str
    prompt: str
    response: str
    criterion: str
    met: bool
    why: str


def hand_checked_items() -> list[HandChecked]:
    """The bundled items (fields as :class:`HandChecked`)."""
    path = importlib.resources.files("rse_fast") / "data" / "grader_hand_checked.json"
    return [HandChecked(**row) for row in json.loads(path.read_text(encoding="utf-8"))]


async def grader_agreement(
    grader: RubricGrader, items: list[HandChecked] | None = None, readings: int = 2
) -> dict[str, Any]:
    """The grader's agreement with the hand verdicts: ``agreement`` (share of readings with a
    verdict that match), ``ci95`` (over items), ``garbage`` (readings without a verdict),
    ``on_met`` / ``on_not_met`` (agreement where the criterion is met, and where it is not: a
    grader that says "met" to everything scores 1.0 on one and 0.0 on the other), and each
    item's readings."""
    chosen = hand_checked_items() if items is None else items
    if not chosen or readings < 1:
        raise ValueError("a grader check needs at least one item and one reading")

    async def read(item: HandChecked, k: int) -> bool | None:
        problem = Problem(item.id, item.prompt, open_ended=True)
        return await grader.criterion_met(problem, item.response, Criterion(text=item.criterion),
                                          seed=31 * k + 7)  # fmt: skip

    said = await gather_or_cancel(read(item, k) for item in chosen for k in range(readings))
    per_item: list[dict[str, Any]] = []
    for i, item in enumerate(chosen):
        verdicts = said[i * readings : (i + 1) * readings]
        answered = [v for v in verdicts if v is not None]
        share = sum(v == item.met for v in answered) / len(answered) if answered else None
        per_item.append({"id": item.id, "met": item.met, "readings": verdicts, "agreement": share})

    def share_where(met: bool | None) -> float | None:
        scores = [r["agreement"] for r in per_item
                  if r["agreement"] is not None and (met is None or r["met"] == met)]  # fmt: skip
        return sum(scores) / len(scores) if scores else None

    scores = [float(r["agreement"]) for r in per_item if r["agreement"] is not None]
    lo, hi = bootstrap_mean_ci(scores) if scores else (float("nan"), float("nan"))
    return {
        "grader": grader.identity,
        "items": len(chosen),
        "readings": readings * len(chosen),
        "garbage": sum(v is None for v in said),
        "agreement": share_where(None),
        "ci95": None if lo != lo else [lo, hi],
        "on_met": share_where(True),
        "on_not_met": share_where(False),
        "per_item": per_item,
    }


def reads_agreement(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How often a whole-rubric reading gave the verdict the criterion-by-criterion reading of
    the same text and seed gave (the runner's ``reads_check``, one μ sample a problem):
    ``agreement`` over verdicts both gave, ``ci95`` over responses, and each reading's share
    of "met" (a reading that drifts towards "met" shows here). None when the run has none."""
    checks = [r["reads_check"] for r in records if r.get("reads_check")]
    per_response: list[float] = []
    pairs: list[tuple[bool, bool]] = []
    garbage = 0
    for check in checks:
        both = [(a, b) for a, b in zip(check["rubric"], check["criterion"], strict=True)
                if a is not None and b is not None]  # fmt: skip
        garbage += len(check["rubric"]) - len(both)
        if both:
            per_response.append(sum(a == b for a, b in both) / len(both))
            pairs += both
    if not pairs:
        return None
    lo, hi = bootstrap_mean_ci(per_response)
    return {
        "responses": len(checks),
        "verdicts": len(pairs),
        "agreement": sum(a == b for a, b in pairs) / len(pairs),
        "ci95": [lo, hi],
        "met_share_rubric": sum(a for a, _ in pairs) / len(pairs),
        "met_share_criterion": sum(b for _, b in pairs) / len(pairs),
        "without_verdict": garbage,
    }
