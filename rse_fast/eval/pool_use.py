"""What the shared sample pool saved a run: the model time the families were charged against
what was generated for the pool once.

Records written since the runner kept the pool's counters carry ``sample_pool`` (calls
answered, and what they had cost when first made): the saving is then counted. For older
records it is bounded from the files: the pool's replies were generated once; every charged
token beyond them was either answered from the pool or spent on calls the pool never holds
(streamed distillations), so ``1 - pooled / charged`` is an upper bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rse_fast.llm.sample_pool import SamplePool


def pool_use(records: list[dict[str, Any]], pool_file: Path) -> dict[str, Any] | None:
    """Charged and pooled completion tokens and server seconds; the counted saving where
    every record carries it, else the bound. None without a pool file."""
    if not pool_file.exists():
        return None
    pool = SamplePool(pool_file)
    pooled_tokens, pooled_s = pool.generated()
    paid = [r for r in records if "spend" in r and not r.get("cut_from_larger")]
    charged_tokens = sum(int(r["spend"].get("completion_tokens", 0)) for r in paid)
    charged_s = sum(float(r["spend"].get("time_s", 0.0)) for r in paid)
    out: dict[str, Any] = {
        "pooled_replies": len(pool),
        "pooled_completion_tokens": pooled_tokens,
        "pooled_server_s": pooled_s,
        "charged_completion_tokens": charged_tokens,
        "charged_server_s": charged_s,
        "saved_share_at_most": 1 - pooled_tokens / charged_tokens if charged_tokens else None,
    }
    runs = [r for r in records if "spend" in r and r.get("method") != "single"]
    counted = [r["sample_pool"] for r in runs if r.get("sample_pool")]
    if runs and len(counted) == len(runs):  # summed over every record: each call once
        saved = sum(c["saved_completion_tokens"] for c in counted)
        out["saved_completion_tokens"] = saved
        out["saved_share"] = saved / charged_tokens if charged_tokens else None
        out["saved_server_s"] = sum(c["saved_server_s"] for c in counted)
    return out


def describe(use: dict[str, Any]) -> str:
    """One sentence for a table's notes."""
    head = (
        f"Shared sample pool: {use['pooled_replies']:,} replies generated once "
        f"({use['pooled_completion_tokens']:,} completion tokens) against "
        f"{use['charged_completion_tokens']:,} charged to the families"
    )
    if use.get("saved_share") is not None:
        return f"{head}; the pool answered {use['saved_share']:.0%} of the charged tokens."
    at_most = use["saved_share_at_most"]
    return head + ("" if at_most is None else f"; it saved at most {at_most:.0%} of them.")
