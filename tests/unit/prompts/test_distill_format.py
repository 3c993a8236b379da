"""Answer extraction, normalisation, voting, and tolerant distillation parsing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rse_fast.answers import (
    answers_equivalent,
    extract_answer,
    majority_vote,
    normalize_answer,
)
from rse_fast.prompts.distill_format import clean_statement, item_statement, parse_distillation
from rse_fast.prompts.reply_json import ItemScanner, repair_escapes


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so \\boxed{41} then \\boxed{42}", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{ \\{1, 2\\} }", "\\{1, 2\\}"),
        ("Work.\nAnswer: 17.", "17"),
        ("**Final Answer:** $3\\sqrt{2}$", "3\\sqrt{2}"),
        ("Final answer: \\boxed{7}", "7"),
        ("no answer here", None),
        ("", None),
        ("\\boxed{unclosed", None),
        ("Adding them up, the answer is $-11$.", "-11"),
        ("The final answer is 1,234. I hope it is correct.", "1,234"),
        ("So the answer is \\(\\frac{3}{4}\\), as shown.", "\\frac{3}{4}"),
        ("First the answer is 3; rechecking, the answer is **5**.", "5"),
        ("The answer is \\boxed{8} (not 9, the answer is 9 was a slip)", "8"),
        ("Answer: 17\nthe answer is 18", "17"),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("1,000", "1000", True),
        ("x = 5", "5", True),
        ("$\\dfrac{1}{2}$", "\\frac{1}{2}", True),
        ("0.50", "0.5", True),
        ("90^\\circ", "90", True),
        ("\\text{Monday}", "monday", True),
        ("\u221211", "-11", True),
        ("3", "4", False),
        (None, "4", False),
    ],
)
def test_normalisation_and_equivalence(a, b, same):
    assert answers_equivalent(a, b) is same


def test_math_verify_equivalence_when_installed():
    pytest.importorskip("math_verify")
    assert answers_equivalent("\\frac{1}{2}", "0.5")
    assert answers_equivalent("\\sqrt{8}", "2\\sqrt{2}")
    assert not answers_equivalent("\\sqrt{8}", "3")


def test_majority_vote_clusters_and_breaks_ties_by_first_seen():
    vote = majority_vote(["7", "x = 7", "8", None, "8", "7.0"])
    assert vote.answer == "7" and vote.count == 3 and vote.total == 5
    tie = majority_vote(["b", "a", "a", "b"])
    assert tie.answer == "b"
    assert majority_vote([None, None]).answer is None
    assert normalize_answer("  ") is None


def test_parse_distillation_variants():
    clean = parse_distillation(json.dumps({"positive": ["a"], "negative": ["b"]}), 5, 100)
    assert clean.positive == ["a"] and clean.negative == ["b"]
    fenced = parse_distillation(
        'Sure:\n```json\n{"verified_propositions": ["p", {"text": "q"}], '
        '"critical_pitfalls": ["- {braced} pitfall"]}\n```',
        5,
        100,
    )
    assert fenced.positive == ["p", "q"] and fenced.negative == ["{braced} pitfall"]
    capped = parse_distillation(json.dumps({"positive": [str(i) for i in range(9)]}), 3, 100)
    assert capped.positive == ["0", "1", "2"] and capped.negative == []
    python = parse_distillation(
        "Here:\n{'propositions': ['6 x 7 = 42', {'statement': 'a sum of odds is even'}], "
        "'pitfalls': []}",
        5,
        100,
    )  # a Python dict, as small models sometimes write
    assert python.positive == ["6 x 7 = 42", "a sum of odds is even"] and python.negative == []
    for garbage in ("no json", '{"other": 1}', "[1, 2]", '{"positive": 5}x', "{__import__('os')}"):
        assert parse_distillation(garbage, 5, 100) is None or garbage.endswith("x")


#: A reply as small models write it: LaTeX straight into JSON strings, unescaped. The
#: second and third items are the two a qwen2.5-coder-1.5b distiller wrote on the test-mid
#: cell, which were banked as "\x08oxed{-11}" and "rac{-91}{7}" before the repair.
LATEX_REPLY = (
    '{"propositions": ["We get \\(3 \\cdot 4 = 12\\)", '
    '"The result of the expression is \\boxed{-11}\\", which is the correct answer.", '
    '"The division \\frac{-91}{7} = -13 keeps its sign", '
    '"x \\neq y\\nNext \\u00e9 \\underline{z} \\times 2, \\theta \\right)", '
    '"already escaped: \\\\sqrt{2}"], '
    '"pitfalls": ["\\left( a \\right) \\leq b is not \\pi"]}'
)
LATEX_READ = [
    "We get \\(3 \\cdot 4 = 12\\)",
    'The result of the expression is \\boxed{-11}", which is the correct answer.',
    "The division \\frac{-91}{7} = -13 keeps its sign",
    "x \\neq y Next é \\underline{z} \\times 2, \\theta \\right)",
    "already escaped: \\sqrt{2}",
]


def test_latex_in_json_strings_is_read_as_latex():
    """Invalid escapes (``\\(``, ``\\cdot``) no longer void the reply or drop the item, and
    ``\\frac``/``\\boxed`` no longer decode to a form feed and a backspace; real escapes
    (a quote, ``\\n`` before a word, ``\\u00e9``, an escaped backslash) keep their meaning."""
    with pytest.raises(ValueError):
        json.loads(LATEX_REPLY)  # what the parser is handed is not JSON as written
    got = parse_distillation(LATEX_REPLY, 9, 200)
    assert got is not None
    assert got.positive == LATEX_READ
    assert got.negative == ["\\left( a \\right) \\leq b is not \\pi"]
    clean = json.dumps({"propositions": ["tab\tthen\nnewline", "\\boxed{1}"]})
    assert parse_distillation(clean, 9, 200).positive == ["tab then newline", "\\boxed{1}"]
    assert repair_escapes(repair_escapes(LATEX_REPLY)) == repair_escapes(LATEX_REPLY)


#: Text as a well-escaping server sends it: any characters but control characters (a tab or a
#: newline before "imes" or "eq" is the one reading the repair gives up), backslashes included.
PRINTABLE = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40)


@given(PRINTABLE)
def test_repair_leaves_well_escaped_json_as_it_was(text):
    """JSON that ``json.dumps`` wrote (every backslash escaped) reads back unchanged."""
    dumped = json.dumps({"propositions": [text]}, ensure_ascii=False)
    assert json.loads(repair_escapes(dumped)) == {"propositions": [text]}
    assert json.loads(repair_escapes(json.dumps([text]))) == [text]  # ASCII escapes (\uXXXX)


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_streamed_latex_items_match_the_final_parse(step):
    scanner, early = ItemScanner(), []
    for k in range(0, len(LATEX_REPLY), step):
        early += [item_statement(key, v, 200) for key, v in scanner.feed(LATEX_REPLY[k : k + step])]
    assert early[: len(LATEX_READ)] == LATEX_READ


def test_a_reply_cut_off_after_latex_keeps_its_whole_items():
    cut = LATEX_REPLY[: LATEX_REPLY.index("already")]
    got = parse_distillation(cut, 9, 200)
    assert got is not None and got.positive == LATEX_READ[:4]


def test_json_after_a_long_latex_preamble_is_found():
    """Hundreds of short LaTeX blocks before the object do not hide it (the search for the
    object is bounded by how much of the reply it reads, not by how many braces it tries)."""
    preamble = "Thinking: " + " ".join(f"\\frac{{{i}}}{{{i + 1}}}" for i in range(200))
    reply = preamble + "\n" + json.dumps({"propositions": ["a half and a third make 5/6"]})
    got = parse_distillation(reply, 5, 200)
    assert got is not None and got.positive == ["a half and a third make 5/6"]


def test_clean_statement_truncates_at_a_word():
    s = clean_statement("1. " + "alpha " * 50, 40)
    assert len(s) <= 40 and s.endswith("…") and not s.startswith("1.")


STREAMED = {
    "propositions": [
        {"statement": 'Say "6 x 7 = 42" {braces} [and brackets]', "conditions": "-", "source": "s"},
        {"statement": "Seven sixes make forty-two", "conditions": "always", "source": "table"},
        "A plain string item",
    ],
    "pitfalls": [
        {
            "context": "times tables",
            "kind": "arithmetic",
            "trigger": "rushing",
            "action": "wrote 48 for 6 x 7",
            "consequence": "a wrong final answer",
        },
        {"not": "a pitfall"},
    ],
}


@pytest.mark.parametrize("step", [1, 2, 5, 17, 10_000])
def test_item_scanner_hands_over_each_item_as_it_closes(step):
    text = "Sure:\n```json\n" + json.dumps(STREAMED, indent=2) + "\n```\nDone."
    scanner, got, closed_at = ItemScanner(), [], []
    for k in range(0, len(text), step):
        for pair in scanner.feed(text[k : k + step]):
            got.append(pair)
            closed_at.append(k + step)
    items = STREAMED["propositions"] + STREAMED["pitfalls"]
    assert [v for _, v in got] == items
    assert [key for key, _ in got] == ["propositions"] * 3 + ["pitfalls"] * 2
    if step < 100:  # handed over before the reply ended, not all at the end
        assert closed_at[0] < len(text) // 2


def test_item_scanner_skips_an_item_that_does_not_parse():
    scanner = ItemScanner()
    got = scanner.feed('{"pitfalls": [{"action": nope}, {"action": "real"}]}')
    assert got == [("pitfalls", {"action": "real"})]


def test_streamed_statements_are_those_the_final_parse_keeps():
    """What is embedded early is rendered by the same rules as the final parse, so a whole
    reply's statements are all found early (the malformed pitfall is dropped by both)."""
    text = json.dumps(STREAMED)
    final = parse_distillation(text, 8, 200)
    assert final is not None
    early = [item_statement(k, v, 200) for k, v in ItemScanner().feed(text)]
    assert [t for t in early if t] == final.positive + final.negative
    assert item_statement("notes", "something", 200) is None


#: Replies a looping model can write, each read by the parser that takes it. The old readers
#: took cubic (blank lines, spaces after "the answer is") or quadratic (braces) time on them,
#: hours at these sizes, or raised RecursionError (deep nesting).
PATHOLOGICAL = r"""
import sys
from rse_fast.answers import extract_answer
from rse_fast.prompts.distill_format import parse_distillation
n = 100_000
for text in ("\n" * n, "the answer is" + " " * n, "Answer" + " " * n + "x", "**" * n):
    extract_answer(text)
for text in ("{" * n, '{"a": [' * (n // 5), "{'a': [" * (n // 5), "\\" * n):
    assert parse_distillation(text, 5, 200) is None
print("read")
"""


def test_pathological_replies_are_read_not_hung():
    """Finishing at all is what is tested (linear readers take well under a second here): a
    reader that hangs on one reply freezes the caller's event loop."""
    done = subprocess.run(
        [sys.executable, "-c", PATHOLOGICAL], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "read"
