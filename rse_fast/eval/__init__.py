"""Compute-normalised evaluation of TTS methods: datasets, runner, metrics, summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "load_dataset": "rse_fast.eval.datasets",
    "Dataset": "rse_fast.eval.datasets",
    "EvalPlan": "rse_fast.eval.runner",
    "run_eval": "rse_fast.eval.runner",
    "write_report": "rse_fast.eval.summary",
}
__all__ = ["Dataset", "EvalPlan", "load_dataset", "run_eval", "write_report"]

if TYPE_CHECKING:
    from rse_fast.eval.datasets import Dataset, load_dataset
    from rse_fast.eval.runner import EvalPlan, run_eval
    from rse_fast.eval.summary import write_report

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
