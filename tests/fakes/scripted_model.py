"""A scripted 'model' for RSE tests: it gets the problem wrong until a specific pitfall appears
in its prompt, and its distiller names that pitfall. Deterministic given the request seed."""

from __future__ import annotations

import json

from rse_fast.prompts import SOLVE_SYSTEM, is_distillation

PROBLEM = "What is 27 + 15? Mind the carry."
GOLD = "42"
PITFALL = "Adding 27 and 15 without carrying the one from the units column gives 32, not 42."
FACT = "The units digits 7 and 5 sum to 12, so write 2 and carry 1."
#: The engine's new defaults hide the recycling mechanism this fake exercises (its round 1 is
#: unanimous, its items are single sightings, its last round is read): mechanism tests switch
#: them off and the defaults have tests of their own.
MECHANISM = {"settle_margin": None, "min_support_shown": 1, "distill_final_round": True}


def is_distill(body: dict) -> bool:
    return is_distillation(body["messages"])


def is_solve(body: dict) -> bool:
    return body["messages"][0]["content"].startswith(SOLVE_SYSTEM) and not is_distill(body)


def attempt_of(body: dict) -> str:
    """The attempt a distillation reads: the assistant turn it continues, or the pasted one."""
    messages = body["messages"]
    if len(messages) >= 2 and messages[-2]["role"] == "assistant":
        return messages[-2]["content"]
    return messages[-1]["content"]


def is_guided(body: dict) -> bool:
    """A solve prompt that carries a bank block (it follows the system text, whatever its
    framing)."""
    return is_solve(body) and body["messages"][0]["content"] != SOLVE_SYSTEM


def prompt_of(body: dict) -> str:
    """The whole prompt (the guided bank sits in the system turn, the problem in the user's)."""
    return "\n".join(m["content"] for m in body["messages"])


def rollout_index(body: dict) -> int:
    return int(body.get("seed") or 0) % 1000


def solve_reply(body: dict, _: int) -> str:
    if PITFALL in prompt_of(body):
        return "Units: 7 + 5 = 12, write 2 carry 1. Tens: 2 + 1 + 1 = 4. \\boxed{42}"
    return "7 + 5 = 12, write 2. 2 + 1 = 3. So the sum is \\boxed{32}"


def distill_reply(body: dict, _: int) -> str:
    i = rollout_index(body)
    negative = [PITFALL] if "boxed{32}" in attempt_of(body) else []
    positive = [FACT, f"Observation number {i} about rollout-specific detail {i * 7919}."]
    return json.dumps({"positive": positive, "negative": negative})


def reply(body: dict, index: int) -> str:
    if is_distill(body):
        return distill_reply(body, index)
    return solve_reply(body, index)


__all__ = [
    "FACT",
    "GOLD",
    "MECHANISM",
    "PITFALL",
    "PROBLEM",
    "is_distill",
    "is_guided",
    "is_solve",
    "prompt_of",
    "reply",
    "rollout_index",
]
