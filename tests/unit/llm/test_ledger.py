from __future__ import annotations

from rse_fast.llm.ledger import Ledger, approx_token_count, count_prompt_tokens
from rse_fast.llm.types import Usage


def test_totals_by_role_and_exploration_split():
    ledger = Ledger()
    ledger.record_usage("explore", Usage(10, 90), 0.5, "a")
    ledger.record_usage("explore", Usage(10, 40, "estimated"), 0.5, "a")
    ledger.record_usage("judge", Usage(100, 5), 0.1, "b")
    ledger.record_error("judge", RuntimeError("boom"), 0.2, "b")
    roles = ledger.by_role()
    assert roles["explore"].total_tokens == 150 and roles["explore"].estimated_calls == 1
    assert roles["judge"].calls == 2 and roles["judge"].errors == 1
    assert ledger.total_tokens == 255
    assert ledger.exploration_tokens == 150 and ledger.exploitation_tokens == 105
    summary = ledger.summary()
    assert summary["roles"]["judge"]["total_tokens"] == 105 and summary["calls"] == 4


def test_merge_across_tasks_keeps_every_record():
    a, b = Ledger(), Ledger()
    a.record_usage("explore", Usage(1, 2), 0.0, "x", task="p1")
    b.record_usage("fuse", Usage(3, 4), 0.0, "x", task="p2")
    merged = a.merge(b)
    assert merged.total_tokens == 10 and len(a.records) == 1
    assert {r.task for r in merged.records} == {"p1", "p2"}


def test_custom_exploration_roles():
    ledger = Ledger(exploration_roles=frozenset({"explore", "distill"}))
    ledger.record_usage("distill", Usage(5, 5), 0.0, "x")
    assert ledger.exploration_tokens == 10


def test_token_estimates():
    assert approx_token_count("") == 0 and approx_token_count("abcd") == 1
    msgs = [{"role": "user", "content": "abcdefgh"}, {"role": "system", "content": None}]
    assert count_prompt_tokens(msgs, approx_token_count) == 2 + 4 + 0 + 4
