"""What ``rse-fast solve`` prints: the answer, each round, the bank's top statements, what
the run cost and why a run ran unguided."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rse_fast.cli.progress import bank_words

if TYPE_CHECKING:
    from rse_fast.llm.cost import CostModel
    from rse_fast.rse.results import RSEResult


def top_experiences(bank: Any, per_kind: int = 3) -> dict[str, list[dict[str, Any]]]:
    """The best-ranked experiences of each type (support, then recency) with their support."""
    return {
        kind: [
            {"text": bank.texts(kind)[i], "support": bank.support(kind)[i]}
            for i in bank.ranked(kind)[:per_kind]
        ]
        for kind in ("negative", "positive")
    }


def format_summary(result: RSEResult, bank: Any = None, price: CostModel | None = None) -> str:
    lines = [f"answer: {result.answer}  ({result.votes}/{result.total_votes} votes)"]
    if result.correct is not None:
        lines[0] += f"  correct: {result.correct}"
    for r in result.rounds:
        acc = f", accuracy {r.accuracy:.0%}" if r.accuracy is not None else ""
        shown = "guided by the bank" if r.experience_block else "unguided"
        lines.append(
            f"  round {r.round}: K={r.k}, {shown}, majority {r.answer!r} ({r.votes}){acc}, "
            f"bank: {bank_words(r.bank_sizes)}, {r.tokens:,} tokens, "
            f"{r.wall_s:.1f}s, unparseable {r.unparseable}, failed {r.failed_rollouts}"
        )
    lines.extend(unguided_note(result))
    if result.checks is not None:
        said = ", ".join(f"{n} {v}" for v, n in sorted(result.checks.items()) if n) or "none"
        why = " (a refuted proposition reached no prompt: a pitfall states its right value)"
        lines.append(f"checked statements: {said}" + (why if result.checks.get("refuted") else ""))
    if bank is not None and len(bank):
        lines.append("what the bank learned (best first; support = rollouts that derived it):")
        for kind, name in (("negative", "pitfall"), ("positive", "proposition")):
            for item in top_experiences(bank)[kind]:
                lines.append(f"  {name} [support {item['support']}]: {item['text']}")
    roles = ", ".join(f"{k} {v['total_tokens']:,}" for k, v in result.ledger["roles"].items())
    lines.append(f"tokens: {result.ledger['total_tokens']:,} ({roles}); time {result.wall_s:.1f}s")
    budget = result.ledger.get("budget")
    if budget is not None:
        from rse_fast.llm.cost import amount_text

        label = budget["unit"]
        lines.append(
            f"  budget: spent {amount_text(budget['spent'], label)} of "
            f"{amount_text(budget['amount'], label)} {'' if label == '$' else label}".rstrip()
            + f"; {amount_text(budget['unspent'], label)} left unspent"
        )
    from rse_fast.llm.cost import paid_lines

    lines.extend(f"  {label}: {text}" for label, text in paid_lines(result.ledger, price))
    return "\n".join(lines)


def unguided_note(result: RSEResult) -> list[str]:
    """Why a run was plain sampling (its budget bought no distillation, or what it paid for
    reached no prompt): a user reading the summary should not credit (or blame) experience
    that no prompt showed."""
    short = result.distillation_unaffordable
    if short is not None:
        return [
            f"no distillation was bought: round {short['round']:.0f}, its distillations and a "
            f"guided round needed ~{short['needed']:,.0f} tokens and {short['left']:,.0f} were "
            "left (under a cap each guided call holds its max_tokens until it ends), so every "
            "round sampled as majority vote does; raise --budget or lower --max-tokens"
        ]
    distill = result.ledger.get("roles", {}).get("distill", {}).get("total_tokens", 0)
    if distill == 0 or len(result.rounds) < 2 or any(r.experience_block for r in result.rounds):
        return []
    return [
        "no bank item reached a prompt (round 1's vote settled, or no item was found by enough "
        "rollouts to be shown): every round sampled as majority vote does, and distillation "
        f"cost {distill:,} tokens"
    ]
