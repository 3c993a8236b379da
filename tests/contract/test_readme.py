"""The README's Python examples, run as written against the scripted server, so they cannot rot."""

from __future__ import annotations

import contextlib
import io
import json
import re
import textwrap
from pathlib import Path

from rse_fast.prompts import is_distillation
from rse_fast.testing import ScriptedServer

README = Path(__file__).resolve().parents[2] / "README.md"
PLACEHOLDER = "http://my-vllm:8000/v1"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def reply(body: dict, index: int) -> str:
    messages = body["messages"]
    if is_distillation(messages):
        return json.dumps(
            {
                "positive": ["360 = 2^3 * 3^2 * 5, so it has (3+1)(2+1)(1+1) divisors."],
                "negative": ["Counting only prime divisors of 360 misses the composite ones."],
            }
        )
    user = messages[-1]["content"]
    answer = "391" if "17 * 23" in user else "24"
    return f"Working it out step by step gives \\boxed{{{answer}}}."


async def run_block(code: str, url: str) -> str:
    namespace: dict[str, object] = {}
    source = "async def _example():\n" + textwrap.indent(code.replace(PLACEHOLDER, url), "    ")
    exec(compile(source, str(README), "exec"), namespace)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        await namespace["_example"]()  # type: ignore[operator]
    return out.getvalue()


def test_readme_has_the_examples():
    blocks = python_blocks()
    assert len(blocks) >= 2 and all(PLACEHOLDER in b for b in blocks)


async def test_readme_rse_example_runs():
    async with ScriptedServer(default_reply=reply) as srv:
        printed = await run_block(python_blocks()[1], srv.base_url)
    assert printed.startswith("24 [1.0, 1.0, 1.0, 1.0]")
    solves = [b for b in srv.requests if not is_distillation(b["messages"])]
    assert len(solves) == 4 * 32 and {b["model"] for b in solves} == {"Qwen/Qwen2.5-7B-Instruct"}


async def test_readme_method_example_runs_the_measured_default_and_hands_back_the_rest():
    """The first example is the vote with the stop: every sample agrees here, so it stops
    after a wave and the rest of the 6,000 tokens is unspent (plain sc would spend them)."""
    async with ScriptedServer(default_reply=reply) as srv:
        printed = await run_block(python_blocks()[0], srv.base_url)
    answer, tokens, unspent, _ = printed.split(" ", 3)
    assert answer == "391" and "explore" in printed
    assert 0 < int(tokens) < 3000 and int(tokens) + int(unspent) == 6000
    assert 2 <= len(srv.requests) <= 8  # one wave of the 8 parallel samples, no more
