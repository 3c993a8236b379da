"""The domain of every TTS family, shared with the evaluation and the service: a problem,
a candidate, a method's result, what a stated-example check returned."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rse_fast.answers import answers_equivalent, extract_answer
from rse_fast.llm.ledger import Ledger
from rse_fast.llm.types import Message
from rse_fast.prompts import solve_messages


@dataclass
class Candidate:
    """One output in the pool: text, extracted answer, scores by name, and its token cost."""

    text: str
    answer: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    cost: int = 0  # tokens spent producing (and scoring) this candidate
    completion_tokens: int = 0  # of which the generated text itself
    origin: str = "sample"  # sample | refine | fuse | beam | particle | rse-round-N
    tool_calls: tuple[dict[str, Any], ...] = ()  # agentic requests: the calls it asked for
    reasoning: str | None = None  # a thinking model's trace behind the text, when it sent one
    #: code: a digest of what its program did on the problem's probe inputs (equal digests,
    #: same behaviour), left by the behaviour vote so a smaller budget's re-vote runs nothing
    behaviour: str | None = None

    @classmethod
    def of(cls, text: str, **kw: Any) -> Candidate:
        return cls(text=text, answer=extract_answer(text), **kw)


@dataclass
class MethodResult:
    method: str
    budget: int
    final: Candidate | None
    pool: list[Candidate]
    ledger: Ledger
    meta: dict[str, Any] = field(default_factory=dict)
    #: an RSE run's rounds as its engine recorded them (``RoundResult``: prompts, rollouts,
    #: what each distillation kept), for a report page; not part of ``to_dict``
    rounds: list[Any] = field(default_factory=list, repr=False)
    #: an RSE run's experience bank as it ended (``ExperienceBank``); not part of ``to_dict``
    bank: Any = field(default=None, repr=False)

    @property
    def tokens(self) -> int:
        return self.ledger.total_tokens

    @property
    def budget_error(self) -> float:
        return self.tokens / self.budget - 1 if self.budget else 0.0

    @property
    def unspent(self) -> int:
        """Budget a run left unspent (a stop once its answer was settled, or a cap's rest)."""
        return max(0, self.budget - self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "budget": self.budget,
            "tokens": self.tokens,
            "unspent": self.unspent,
            "final": asdict(self.final) if self.final else None,
            "pool": [asdict(c) for c in self.pool],
            "ledger": self.ledger.summary(),
            "meta": self.meta,
        }


@dataclass(frozen=True)
class VisibleResult:
    """A response run on the examples its problem states: passed, or the first failure
    (the call, what came back or what it raised, and what was expected); ``code``: what ran,
    ``examples``: how many examples it was run on. ``reason`` says what kind of failure it
    was (``failed``: an example ran and failed; ``load-error``: the code did not load, so
    none ran; ``no-code``: the reply held no code that could run; ``timeout``;
    ``output-limit``), ``where`` the line of the code it was raised at, when it raised."""

    passed: bool
    detail: str = ""
    code: str = ""
    examples: int = 0
    reason: str = "failed"
    where: str = ""

    @property
    def failure(self) -> str:
        """What went wrong, as a clause after "the attempt's code" ("" when it passed): a
        load error is not an example failed, nor a reply without code a syntax error."""
        if self.passed:
            return ""
        detail = self.detail.strip().rstrip(".")
        at = f" (raised at {self.where})" if self.where else ""
        if self.reason == "load-error":
            return f"did not load, so no stated example ran: {detail}{at}"
        if self.reason == "no-code":
            return f"could not run: {detail}"
        if self.reason == "timeout":
            return f"ran {detail} on the stated examples without finishing"
        if self.reason == "output-limit":
            return f"printed past the output limit ({detail}) on the stated examples"
        # the stated examples' check says what failed in an AssertionError's message
        return (
            f"failed an example the problem states: {detail.removeprefix('AssertionError: ')}{at}"
        )


def no_answer(text: str) -> None:
    """``Problem.answer_of`` for a task whose replies state no answer to vote on: code. What
    a program does is its answer, and only running it shows that; a value the reply happens to
    box (``\\boxed{True}``, an example's output) is no vote for its code (docs/decisions.md
    has what voting on such values did). With no answers a vote falls to its earliest
    candidate (after the execution filter: the earliest that passes)."""
    return None


@dataclass
class Problem:
    """A task: the prompt text (the last user turn), and (for verifiable tasks) a gold answer.

    ``history`` holds the earlier turns of a conversation, roles kept; ``open_ended`` marks a
    task answered by a complete free-form response (no ``\\boxed{}`` answer, no vote).
    An agentic request comes as its own ``conversation`` (sent as written, the caller's system
    prompt and tool results included) with the ``tools`` it may call.
    """

    id: str
    prompt: str
    gold: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    history: tuple[Message, ...] = ()
    open_ended: bool = False
    conversation: tuple[Message, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    #: a check that is free at solving time: whether a response passes the examples the
    #: problem itself states (code run in the sandbox, with what the first failure returned),
    #: None where it states none. The hidden tests are for grading alone and never here.
    visible_check: Callable[[str], VisibleResult | None] | None = field(
        default=None, repr=False, compare=False
    )
    #: code: a digest of what a response's program gives back on inputs near the stated
    #: examples' (``eval.examples.probe_calls``), for a vote among programs by behaviour;
    #: None where the problem has no probes
    behaviour: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)
    #: what a response's answer is, the key votes and stops count (None: its ``\boxed{}``
    #: or stated final answer); :func:`no_answer` for code, whose answer is its behaviour.
    answer_of: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)

    def answer(self, text: str) -> str | None:
        """The answer ``text`` gives to this problem (see ``answer_of``)."""
        return (self.answer_of or extract_answer)(text)

    def is_gold(self, answer: str | None) -> bool | None:
        """Whether ``answer`` is the reference answer (None: the problem has none)."""
        if self.gold is None:
            return None
        return answer is not None and answers_equivalent(answer, self.gold)

    def candidate(self, text: str, **kw: Any) -> Candidate:
        """A pool candidate of ``text``, its answer read as this problem reads answers."""
        return Candidate(text=text, answer=self.answer(text), **kw)

    @property
    def transcript(self) -> str:
        """The whole task as text for judges and graders: the conversation with its roles,
        or the prompt alone when there is no history."""
        if not self.history:
            return self.prompt
        turns = [*self.history, {"role": "user", "content": self.prompt}]
        return "\n\n".join(f"[{m['role']}]\n{str(m.get('content') or '').strip()}" for m in turns)

    def messages(self, experience_block: str = "") -> list[Message]:
        """The chat messages that ask for one response to this task."""
        if self.conversation:
            return list(self.conversation)
        return solve_messages(
            self.prompt, experience_block, open_ended=self.open_ended, history=self.history
        )
