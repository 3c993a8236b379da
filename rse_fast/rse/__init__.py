"""RSE: the engine, its configuration and results, the experience bank, the similarity index
that deduplicates it, distillation parsing and per-round checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "RSE": "rse_fast.rse.engine",
    "RSEConfig": "rse_fast.rse.config",
    "RSEResult": "rse_fast.rse.results",
    "RoundResult": "rse_fast.rse.results",
    "RolloutRecord": "rse_fast.rse.results",
    "Progress": "rse_fast.rse.results",
    "ExperienceBank": "rse_fast.rse.bank",
    "Experience": "rse_fast.rse.bank",
    "Decision": "rse_fast.rse.bank",
    "SimilarityIndex": "rse_fast.rse.index",
    "InsertResult": "rse_fast.rse.index",
    "Checkpoint": "rse_fast.rse.checkpoint",
    "parse_distillation": "rse_fast.prompts.distill_format",
}
__all__ = [
    "RSE",
    "Checkpoint",
    "Decision",
    "Experience",
    "ExperienceBank",
    "InsertResult",
    "Progress",
    "RSEConfig",
    "RSEResult",
    "RolloutRecord",
    "RoundResult",
    "SimilarityIndex",
    "parse_distillation",
]

if TYPE_CHECKING:
    from rse_fast.prompts.distill_format import parse_distillation
    from rse_fast.rse.bank import Decision, Experience, ExperienceBank
    from rse_fast.rse.checkpoint import Checkpoint
    from rse_fast.rse.config import RSEConfig
    from rse_fast.rse.engine import RSE
    from rse_fast.rse.index import InsertResult, SimilarityIndex
    from rse_fast.rse.results import Progress, RolloutRecord, RoundResult, RSEResult

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
