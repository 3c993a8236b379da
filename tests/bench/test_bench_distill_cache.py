"""The distillation-cache bench's arithmetic: shares from the server's own counts, and the part
of what a cache could hold (the prompt before the ask) that it served."""

from __future__ import annotations

import pytest

from bench.distill_cache import common_prefix, distill_share, run_totals


def call(prompt: int, cached: int | None, prefix: int | None, prompt_ms: float = 100.0) -> dict:
    usage = {
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "timings": {"prompt_ms": prompt_ms, "predicted_ms": 0.0},
    }
    return {"usage": usage, "prefix_tokens": prefix}


def test_common_prefix_counts_leading_ids_only():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5], [1]) == 0


def test_shares_separate_the_ask_from_a_cache_miss():
    """Two calls of 400 prompt tokens, 250 before the ask: one served its whole prefix, one
    missed 50 of it. The raw share counts the asks (new text) against the cache; the prefix
    share does not, and a report of more cached than the prefix (template tokens) caps at it."""
    share = distill_share([call(400, 250, 250), call(400, 200, 250), call(400, 260, 250)])
    assert share["cached_share"] == pytest.approx(710 / 1200)
    assert share["prefix_served_share"] == pytest.approx(700 / 750)
    assert share["ask_tokens_per_call"] == pytest.approx(150)
    assert share["prefill_s_per_call"] == pytest.approx(0.1)


def test_a_form_without_prefix_counts_reports_none_for_them():
    share = distill_share([call(300, 10, None), call(300, None, None)])
    assert share["cached_share"] == pytest.approx(10 / 600)
    assert share["prefix_served_share"] is None and share["ask_tokens_per_call"] is None


def test_the_headline_is_the_shortest_rollouts_task_and_names_each_tasks_share():
    """A task measured with the default form alone (the long rollouts) joins the lowest share
    and the per-task shares; the brief ask's headline reads only the tasks that ran it."""
    from bench.distill_cache import headline

    def form(share: float) -> dict:
        return {"cached_share": share, "prefix_served_share": 1.0}

    tasks = {
        "three-term sums": {"continuing": form(0.64), "continuing-brief": form(0.78)},
        "long rollouts": {"continuing": form(0.85)},
    }
    got = headline(tasks)
    assert got["distill_cached_share"] == 0.64 and got["distill_cached_share_brief"] == 0.78
    assert got["distill_cached_share_by_task"] == {"three-term sums": 0.64, "long rollouts": 0.85}
    assert headline({"long rollouts": tasks["long rollouts"]})["distill_cached_share_brief"] is None


def test_run_totals_count_every_call_and_what_no_cache_served():
    def used(prompt: int, cached: int | None, completion: int) -> dict:
        timings = {"prompt_ms": (prompt - (cached or 0)) * 10.0}
        return {"usage": {"prompt_tokens": prompt, "cached_tokens": cached,
                          "completion_tokens": completion, "timings": timings}}  # fmt: skip

    got = run_totals([used(300, 0, 100), used(300, 280, 100), used(450, 420, 60)])
    assert got["calls"] == 3 and got["prompt_tokens"] == 1050 and got["cached_tokens"] == 700
    assert got["uncached_prompt_tokens"] == 350 and got["completion_tokens"] == 260
    assert got["prefill_s"] == pytest.approx(3.5)


def test_the_primed_form_is_judged_by_the_whole_runs_uncached_prompt_tokens():
    """Its distillations' share can rise while its rollouts read more: the headline keeps the
    share and the run's uncached prompt tokens against the default's, per task that ran it."""
    from bench.distill_cache import headline

    def form(share: float, uncached: int) -> dict:
        return {"cached_share": share, "prefix_served_share": 1.0,
                "run": {"uncached_prompt_tokens": uncached}}  # fmt: skip

    tasks = {
        "three-term sums": {"continuing": form(0.64, 2000), "continuing-primed": form(0.9, 2500)},
        "long rollouts": {"continuing": form(0.85, 4000)},
    }
    got = headline(tasks)
    assert got["distill_cached_share_primed"] == 0.9
    assert got["primed_run_uncached_ratio"] == {"three-term sums": 1.25}


def test_a_task_kept_from_an_earlier_run_keeps_its_machine_and_time():
    from bench.distill_cache import stamped

    earlier = {"machine": {"cpu": "A"}, "measured_at": "T0",
               "tasks": {"old": {"continuing": {}}, "new": {"measured_at": "T1"}}}  # fmt: skip
    got = stamped(earlier)
    assert got["old"]["machine"] == {"cpu": "A"} and got["old"]["measured_at"] == "T0"
    assert got["new"]["measured_at"] == "T1"  # its own stamp wins
