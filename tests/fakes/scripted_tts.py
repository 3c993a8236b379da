"""A scripted model for the TTS families: right on some seeds, a judge that prefers right
answers, step-wise replies that finish on the third step, critiques, revisions and fusion."""

from __future__ import annotations

import json

from rse_fast.prompts import JUDGE_SYSTEM, is_distillation

PROBLEM = "What is 6 times 7?"
GOLD = "42"
FILLER = "I multiply six by seven carefully and check the product twice to be sure of it."


def reply(body: dict, index: int) -> str:
    system = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    seed = int(body.get("seed") or 0)
    if system.startswith(JUDGE_SYSTEM[:40]) and "Rate" in user:
        return json.dumps({"score": 9 if "boxed{42}" in user else 3})
    if system.startswith(JUDGE_SYSTEM[:40]):  # critique
        return "The product is wrong: six times seven is forty-two."
    if is_distillation(body["messages"]):
        return json.dumps(
            {
                "positive": ["6 times 7 equals 42."],
                "negative": [f"Answer 41 from attempt {seed % 1000} is wrong."],
            }
        )
    if "Write only the next step" in user:
        steps = user.split("Solution so far:\n", 1)[1].split("\n\nWrite only", 1)[0]
        done = 0 if steps.startswith("(nothing yet") else steps.count("\n\n") + 1
        if done >= 2:
            return "So the answer is \\boxed{%s}." % ("42" if seed % 2 == 0 else "41")
        return f"Step {done + 1}: {FILLER}"
    if "Several independent attempts" in user or "Review of it" in user:
        return f"{FILLER} \\boxed{{42}}"
    return f"{FILLER} \\boxed{{{'42' if seed % 3 == 0 else '41'}}}"
