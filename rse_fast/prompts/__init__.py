"""Every prompt of the project, in this package: one module per family.

- ``common``: the solve and respond system turns, conversation history, task framing;
- ``rse``: the guided prompt's bank block and the distillation prompt;
- ``distill_format``: the distillation reply's format: schema, item rendering and parsing;
- ``judge``: the methods' judge and the benchmarks' rubric graders;
- ``search``: step-wise search (beam search, particle filtering);
- ``refine``: critique and revise, and fusion.

The names are re-exported here, so ``from rse_fast.prompts import solve_messages`` works.
"""

from __future__ import annotations

from rse_fast.prompts.common import (
    END_MARK,
    RESPOND_SYSTEM,
    SOLVE_SYSTEM,
    framing,
    so_far,
    solve_messages,
    system_for,
    turns,
    with_history,
)
from rse_fast.prompts.distill_format import (
    FIELD_CHARS,
    PITFALL_KINDS,
    distill_schema,
    render_pitfall,
    render_proposition,
)
from rse_fast.prompts.judge import (
    GRADER_SYSTEM,
    JUDGE_SCHEMA,
    JUDGE_SYSTEM,
    MET_SCHEMA,
    RUBRIC_GRADER_SYSTEM,
    criterion_met_messages,
    criterion_scale_messages,
    judge_messages,
    rubric_met_messages,
    rubric_met_schema,
)
from rse_fast.prompts.refine import critique_messages, fusion_messages, revise_messages
from rse_fast.prompts.rse import (
    CHECKED_RULES,
    DISTILL_SYSTEM,
    FRAMING,
    GUIDED_RULES,
    ORIGIN_RELATED,
    ORIGIN_SAME,
    PITFALLS_HEADER,
    PROPOSITIONS_HEADER,
    UNCHECKED,
    answer_split,
    distill_batch_messages,
    distill_messages,
    is_distillation,
    primed_preamble,
    render_experiences,
)
from rse_fast.prompts.search import finish_messages, next_step_messages

__all__ = [
    "CHECKED_RULES",
    "DISTILL_SYSTEM",
    "END_MARK",
    "FIELD_CHARS",
    "FRAMING",
    "GRADER_SYSTEM",
    "GUIDED_RULES",
    "JUDGE_SCHEMA",
    "JUDGE_SYSTEM",
    "MET_SCHEMA",
    "ORIGIN_RELATED",
    "ORIGIN_SAME",
    "PITFALLS_HEADER",
    "PITFALL_KINDS",
    "PROPOSITIONS_HEADER",
    "RESPOND_SYSTEM",
    "RUBRIC_GRADER_SYSTEM",
    "SOLVE_SYSTEM",
    "UNCHECKED",
    "answer_split",
    "criterion_met_messages",
    "criterion_scale_messages",
    "critique_messages",
    "distill_batch_messages",
    "distill_messages",
    "distill_schema",
    "finish_messages",
    "framing",
    "fusion_messages",
    "is_distillation",
    "judge_messages",
    "next_step_messages",
    "primed_preamble",
    "render_experiences",
    "render_pitfall",
    "render_proposition",
    "revise_messages",
    "rubric_met_messages",
    "rubric_met_schema",
    "so_far",
    "solve_messages",
    "system_for",
    "turns",
    "with_history",
]  # fmt: skip
