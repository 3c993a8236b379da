"""Code has no final answer to count; what its program does is one. The behaviour vote groups
programs by their outputs on probe inputs near the stated examples' and picks from the
largest group: tested here with a behaviour function standing in for the sandbox (the
sandbox's own run is in tests/integration/test_execution_filter.py)."""

from __future__ import annotations

import pytest

from rse_fast.eval.examples import Example, behaviour_tests, probe_calls
from rse_fast.llm.client import LLMClient
from rse_fast.methods import Candidate, Problem, VisibleResult, make_method
from rse_fast.methods.types import no_answer
from rse_fast.methods.voting import behaviour_vote, voted_behaviour
from rse_fast.testing import ScriptedServer


def counting(table: dict[str, str]) -> tuple[list[str], object]:
    runs: list[str] = []

    def behaviour(text: str) -> str:
        runs.append(text)
        return table[text]

    return runs, behaviour


async def test_the_largest_group_wins_and_its_earliest_is_the_pick():
    runs, behaviour = counting({"a1": "A", "b1": "B", "b2": "B", "c": "C"})
    pool = [Candidate(t) for t in ("a1", "b1", "a1", "b2", "c")]
    final, meta = await behaviour_vote(pool, behaviour)  # A: 2 (one text twice), B: 2
    assert final is pool[0] and meta["votes"] == 2 and meta["voters"] == 5
    assert meta["behaviour_groups"] == [2, 2, 1]
    assert sorted(runs) == ["a1", "b1", "b2", "c"]  # each distinct text run once
    assert [c.behaviour for c in pool] == ["A", "B", "A", "B", "C"]
    pool.append(Candidate("b3", behaviour="B"))  # a digest already there is not run again
    final, meta = await behaviour_vote(pool, behaviour)
    assert final is pool[1] and meta["votes"] == 3 and len(runs) == 4


def test_without_digests_each_candidate_counts_alone():
    pool = [Candidate("x"), Candidate("y", behaviour="B"), Candidate("z")]
    final, meta = voted_behaviour(pool)
    assert final is pool[0] and meta["behaviour_groups"] == [1, 1, 1]
    assert voted_behaviour([]) == (None, {"votes": 0, "voters": 0})


def test_probe_calls_change_one_stated_argument_at_a_time_and_never_repeat_a_stated_call():
    examples = [Example("f([1, 2], 3)", "[2]"), Example("f('ab', True)", "'b'")]
    calls = probe_calls(examples, "f", limit=6)
    assert calls == [
        "f([2, 1], 3)",  # turn 0 of each example in turn: the first argument reversed
        "f('ba', True)",
        "f([2], 3)",
        "f('b', True)",
        "f([1, 2, 1], 3)",
        "f('aba', True)",
    ]
    every = probe_calls(examples, "f", limit=100)
    assert "f([1, 2], 4)" in every and "f('ab', False)" in every and "f([], 3)" in every
    assert not {ex.call for ex in examples} & set(every) and len(set(every)) == len(every)
    # a palindrome reversed is the stated call itself: left out
    assert "f('aa')" not in probe_calls([Example("f('aa')", "1")], "f")
    assert probe_calls([Example("f(None)", "1")], "f") == []  # nothing near None to try


def test_the_behaviour_check_returns_outputs_and_what_was_raised():
    source = behaviour_tests(["f(2)", "f(0)", "f(0.1)"], "f")
    namespace: dict = {}
    exec(source, namespace)
    seen = namespace["check"](lambda x: [1 / x, (x, 0.1 + 0.2)])
    assert seen == ["[0.5, (2, 0.3)]", "raised ZeroDivisionError", "[10.0, (0.1, 0.3)]"]


def code_problem_with(groups: dict[str, str]) -> tuple[Problem, list[str]]:
    """``add(a, b)``: every reply passes the stated example; ``groups``: a reply's body →
    its behaviour on the probes."""
    problem = Problem("c", "Complete add(a, b).", answer_of=no_answer)
    problem.visible_check = lambda text: VisibleResult(True)
    runs: list[str] = []

    def behaviour(text: str) -> str:
        runs.append(text)
        return next(v for k, v in groups.items() if k in text)

    problem.behaviour = behaviour
    return problem, runs


async def test_sc_picks_the_largest_behaviour_group_and_a_cut_pool_re_votes_without_running():
    """Sample 0 is the odd one out (a - b), the rest agree (a + b, written two ways): the
    earliest passer is a - b, the behaviour vote a + b; a cut pool keeps the digests."""
    problem, runs = code_problem_with({"a - b": "minus", "a + b": "plus", "b + a": "plus"})

    def replies(body: dict, index: int) -> str:
        seed = int(body.get("seed") or 0)
        expr = "a - b" if seed == 0 else ("a + b" if seed % 2 else "b + a")
        return f"```python\ndef add(a, b):\n    return {expr}\n```"

    options = {"parallel": 2, "max_tokens": 64}
    async with ScriptedServer(default_reply=replies) as srv, LLMClient(srv.base_url, "m") as c:
        earliest = await make_method("sc+filter", **options).run(problem, 1500, c)
        method = make_method("sc+filter+cluster", **options)
        grouped = await method.run(problem, 1500, c)
    assert "a - b" in earliest.final.text
    assert "a + b" in grouped.final.text
    assert grouped.meta["votes"] == len(grouped.pool) - 1
    assert grouped.meta["behaviour_groups"] == [len(grouped.pool) - 1, 1]
    ran = len(runs)
    assert ran == len({x.text for x in grouped.pool})
    small = method.subsample(grouped, 400)
    assert 2 <= len(small.pool) < len(grouped.pool) and len(runs) == ran
    assert "behaviour_groups" in small.meta and small.final is not None


def test_the_modifier_and_what_it_does_not_combine_with():
    assert make_method("sc+filter+cluster").behaviour_vote
    assert make_method("rse+check+cluster").behaviour_vote
    assert not make_method("sc+filter").behaviour_vote
    with pytest.raises(ValueError, match="behaviour_vote does not combine with a stop"):
        make_method("sc+filter+cluster+stop")
    with pytest.raises(ValueError, match="behaviour_vote does not combine with a stop"):
        make_method("rse+check+cluster+stop")
    with pytest.raises(ValueError, match="unknown option 'behaviour_vote'"):
        make_method("bon+cluster")


async def test_rse_with_the_checker_picks_by_behaviour_among_its_passing_rollouts():
    import json

    from rse_fast.encoder import Encoder
    from rse_fast.prompts import is_distillation

    problem, _ = code_problem_with({"a - b": "minus", "a + b": "plus", "b + a": "plus"})

    def replies(body: dict, index: int) -> str:
        if is_distillation(body["messages"]):
            return json.dumps({"positive": [], "negative": []})
        seed = int(body.get("seed") or 0)
        expr = "a - b" if seed == 0 else ("a + b" if seed % 2 else "b + a")
        return f"```python\ndef add(a, b):\n    return {expr}\n```"

    options = {"encoder": Encoder(providers=["CPUExecutionProvider"]), "k": 4,
               "max_tokens": 64, "budget_mode": "cap"}  # fmt: skip
    async with ScriptedServer(default_reply=replies) as srv, LLMClient(srv.base_url, "m") as c:
        earliest = await make_method("rse+check", **options).run(problem, 3000, c)
        grouped = await make_method("rse+check+cluster", **options).run(problem, 3000, c)
    assert "a - b" in earliest.final.text and "a + b" in grouped.final.text
    assert grouped.meta["behaviour_groups"][0] == len(grouped.pool) - 1 >= 3
    assert grouped.meta["execution_filter"]["passed"] == len(grouped.pool)
