"""Turning a rollout into experience: the distillation request (continuing the rollout's own
conversation where the server caches prompts), its streamed parse with each statement embedded
as it closes, batch distillation of a round, and a task checker's verdicts and grounded
observations filed beside the distiller's statements."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rse_fast.answers import answers_equivalent, off_loop
from rse_fast.encoder import Encoder
from rse_fast.errors import BudgetExhaustedError, CheckerError, LLMError, RSEFastError
from rse_fast.llm.client import LLMClient
from rse_fast.llm.ledger import CallRecord
from rse_fast.llm.types import Message
from rse_fast.prompts import (
    distill_batch_messages,
    distill_messages,
    distill_schema,
    primed_preamble,
)
from rse_fast.prompts.distill_format import Distilled, item_statement, parse_distillation
from rse_fast.prompts.reply_json import ItemScanner
from rse_fast.rse.bank import Experience
from rse_fast.rse.checking import Check, ExperienceChecker, Observation
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.results import RolloutRecord


def clip_tokens(text: str, limit: int, count_tokens: Callable[[str], int]) -> str:
    """Keep the head and the tail (where the answer is) of a text over ``limit`` tokens."""
    n = count_tokens(text)
    if n <= limit:
        return text
    keep = max(1, int(len(text) * limit / n) // 2)
    return text[:keep] + "\n[... middle omitted ...]\n" + text[-keep:]


def release_early(early: dict[str, asyncio.Future[np.ndarray]]) -> None:
    """Cancel early embeddings still running and read the outcome of finished ones, so none
    is left behind (or logged as an unread error) once a rollout's vectors are settled."""
    for future in early.values():
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


@dataclass
class RolloutOutcome:
    """One rollout of a round, with the experience it gave and when."""

    record: RolloutRecord
    candidates: list[Experience]
    vectors: np.ndarray | None
    returned_at: float  # when the last call of this rollout returned
    encoded_at: float  # when its experiences were embedded
    error: LLMError | BudgetExhaustedError | None = None


class Distiller:
    """Distils rollouts for one RSE engine: the policy client (whose ledger books every
    call), the encoder, the engine's config, an optional client for distillation alone and
    an optional task checker (``rse.checking``)."""

    def __init__(
        self,
        client: LLMClient,
        encoder: Encoder,
        config: RSEConfig,
        *,
        distill_client: LLMClient | None = None,
        checker: ExperienceChecker | None = None,
    ) -> None:
        self.client, self.encoder, self.config = client, encoder, config
        self.distill_client = distill_client
        #: a task's check of each distilled statement: refuted propositions never reach a
        #: prompt
        self.checker = checker
        #: the checker's verdicts on what was filed, counted over the engine's rounds
        self.check_counts: dict[str, int] = {}
        #: the same verdicts by the kind of statement (``positive``: propositions;
        #: ``negative``: pitfalls), so a run can say how often its propositions were wrong
        self.check_counts_by_kind: dict[str, dict[str, int]] = {}

    def rollout_preamble(self) -> str:
        """What every rollout's system turn carries for its distillation: the primed ask
        (``distill_ask="primed"``, distilled by the rollouts' own server), else nothing."""
        if self.config.distill_ask != "primed" or self.distill_client is not None:
            return ""
        cfg = self.config
        return primed_preamble(
            cfg.max_experiences_per_rollout, cfg.max_words_per_experience, cfg.distill_format
        )

    def _continues(self) -> bool:
        """Whether a distillation continues its rollout's conversation: as configured, or
        (None) once the server has shown it caches prompts (a call reported cached tokens).
        A primed rollout is always continued: its prompt holds the ask."""
        if self.rollout_preamble():
            return True
        if self.config.distill_continues is not None:
            return self.config.distill_continues
        return self.client.ledger.cached_tokens > 0

    def _client(self) -> LLMClient:
        """The client distillations go to, booked in the run's ledger."""
        if self.distill_client is None:
            return self.client
        return self.distill_client.metered_like(self.client)

    def _distill_request(
        self, r: int, read_tokens: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """A distillation call's parameters (its cap follows what it reads) and schema."""
        cfg = self.config
        params: dict[str, Any] = dict(
            role="distill",
            task=f"round{r}",
            temperature=cfg.distill_temperature,
            max_tokens=cfg.distill_tokens(read_tokens),
            model=cfg.distill_model,
            extra=dict(cfg.distill_extra) if cfg.distill_extra else None,
        )
        schema = (
            distill_schema(cfg.max_experiences_per_rollout, cfg.distill_format)
            if cfg.use_json_schema
            else None
        )
        return params, schema

    async def file(
        self,
        rec: RolloutRecord,
        parsed: Distilled,
        r: int,
        rollout: Check | None = None,
        *,
        propositions: bool = True,
    ) -> list[Experience]:
        """A parsed distillation recorded on its rollout; its statements as candidates
        (``propositions=False``: its pitfalls only)."""
        cfg = self.config
        rec.distill, rec.echoes = "ok", parsed.echoes
        rec.positive = parsed.positive if cfg.use_positive and propositions else []
        rec.negative = parsed.negative if cfg.use_negative else []
        found = [
            Experience(text=t, kind=kind, round=r, rollout=rec.index, position=p)
            for kind, texts in (("negative", rec.negative), ("positive", rec.positive))
            for p, t in enumerate(texts)
        ]
        if self.checker is None or not found:
            return found
        # off the event loop, as observe: a task's checker may run a tool or a process, and
        # the rounds' other rollouts stream meanwhile
        t0 = time.perf_counter()
        checks = await asyncio.to_thread(self._verdicts, found)
        self._book_check(time.perf_counter() - t0, r)
        return self._checked(found, checks, rollout)

    def _verdicts(self, found: list[Experience]) -> list[Check]:
        assert self.checker is not None
        checks = []
        for e in found:
            with checker_failures(self.checker, f"the {e.kind} statement {e.text[:80]!r}"):
                checks.append(self.checker.check(e.text, e.kind))
        return checks

    @property
    def observes(self) -> bool:
        """Whether the checker runs rollouts itself (grounded experience at no token cost)."""
        return callable(getattr(self.checker, "observe", None))

    async def observe(self, rec: RolloutRecord, r: int) -> Observation:
        """What a checker that runs rollouts observed of this one (off the event loop; its
        time booked as the checker's)."""
        if not self.observes:
            return Observation()
        t0 = time.perf_counter()
        with checker_failures(self.checker, f"rollout {rec.index}"):
            seen: Observation = await asyncio.to_thread(self.checker.observe, rec.text)  # type: ignore[union-attr]
        self._book_check(time.perf_counter() - t0, r)
        return seen

    def grounded(self, seen: Observation, rec: RolloutRecord, r: int) -> list[Experience]:
        """An observation's items as experience, filed after the distiller's statements."""
        for kind, _, check in seen.items:
            self._count(kind, check.verdict)
        return [
            Experience(text=text, kind=kind, round=r, rollout=rec.index, position=100 + p,
                       verdict=check.verdict, evidence=check.evidence)
            for p, (kind, text, check) in enumerate(seen.items)
        ]  # fmt: skip

    def _count(self, kind: str, verdict: str) -> None:
        self.check_counts[verdict] = self.check_counts.get(verdict, 0) + 1
        of_kind = self.check_counts_by_kind.setdefault(kind, {})
        of_kind[verdict] = of_kind.get(verdict, 0) + 1

    def _book_check(self, seconds: float, r: int) -> None:
        self.client.ledger.record(
            CallRecord(role="check", prompt_tokens=0, completion_tokens=0, latency_s=seconds,
                       endpoint="checker", task=f"round{r}", work_s=seconds)
        )  # fmt: skip

    def _checked(
        self, found: list[Experience], checks: list[Check], rollout: Check | None = None
    ) -> list[Experience]:
        """Each statement with the checker's verdict: a refuted proposition becomes a pitfall
        stating the evidence (or is dropped), a refuted pitfall is dropped, and so is a
        verified one (the step it warns against is right: "4 muffins at $3 cost $12" is no
        pitfall); a proposition the checker cannot judge alone takes its rollout's verdict
        (``rollout``: what running the rollout showed). Verdicts are counted
        (``check_counts``)."""
        kept: list[Experience] = []
        for e, check in zip(found, checks, strict=True):
            if check.verdict == "unknown" and rollout is not None and e.kind == "positive":
                check = rollout
            self._count(e.kind, check.verdict)
            if e.kind == "negative" and check.verdict == "verified":
                continue
            if check.verdict != "refuted":
                kept.append(replace(e, verdict=check.verdict, evidence=check.evidence))
            elif e.kind == "positive" and self.config.refuted_as_pitfall:
                text = f'The claim "{e.text}" is wrong: {check.evidence}.'
                kept.append(
                    replace(e, text=text, kind="negative", verdict="refuted",
                            evidence=check.evidence)
                )  # fmt: skip
        return kept

    async def vectors(
        self, texts: list[str], early: dict[str, asyncio.Future[np.ndarray]]
    ) -> np.ndarray:
        """Embeddings of ``texts``: those started while the distillation streamed, the rest
        in one call; early ones the final parse did not keep are dropped."""
        rest = [t for t in texts if t not in early]
        try:
            got = dict(zip(rest, await self.encoder.aencode(rest), strict=True)) if rest else {}
            for t in texts:
                if t in early:
                    got[t] = (await early[t])[0]
        finally:
            release_early(early)
        return np.stack([got[t] for t in texts])

    async def distill_rollout(
        self,
        problem: str,
        rec: RolloutRecord,
        r: int,
        seed: int | None,
        early: dict[str, asyncio.Future[np.ndarray]],
        rollout_tokens: int = 0,
        votes: str | None = None,
        rollout: list[Message] | None = None,
    ) -> Distilled | None:
        """Distil one rollout, asking again (new seed) while the reply does not parse, up to
        ``distill_retries`` times. Sets ``rec.distill`` to failed/unparseable when it gives up.
        Streamed, each statement's embedding starts as its item closes (into ``early``)."""
        cfg = self.config
        client = self._client()
        count = client.count_tokens
        limit = cfg.attempt_max_tokens
        shown = clip_tokens(rec.text, limit // 4 if rec.reasoning else limit, count)
        reasoning = clip_tokens(rec.reasoning, limit, count) if rec.reasoning else None
        items, words = cfg.max_experiences_per_rollout, cfg.max_words_per_experience
        # the same server and model saw the rollout: its prefix cache holds that prefix
        continues = rollout is not None and self.distill_client is None and self._continues()
        messages = distill_messages(
            problem, shown, items, words, reasoning, rec.truncated,
            style=cfg.distill_format, split=votes, rollout=rollout if continues else None,
            ask=cfg.distill_ask,
        )  # fmt: skip
        params, schema = self._distill_request(r, rollout_tokens)
        for attempt in range(cfg.distill_retries + 1):
            rec.distill_tries += 1
            params["seed"] = None if seed is None else seed + 7919 * attempt
            try:
                if cfg.stream_distill:
                    text = await self._streamed_reply(
                        client, problem, messages, schema, params, early
                    )
                elif schema is not None:
                    text = (await client.chat_json(messages, schema, **params)).text
                else:
                    text = (await client.chat(messages, **params)).text
            except BudgetExhaustedError:  # not bought: the cap's room is spent
                rec.distill = "skipped"
                return None
            except LLMError:
                rec.distill = "failed"
                return None
            parsed = parse_distillation(
                text,
                cfg.max_experiences_per_rollout,
                cfg.max_chars_per_experience,
                problem if cfg.drop_echoes else None,
            )
            if parsed is not None:
                return parsed
        rec.distill = "unparseable"
        return None

    async def _streamed_reply(
        self,
        client: LLMClient,
        problem: str,
        messages: list[Message],
        schema: dict[str, Any] | None,
        params: dict[str, Any],
        early: dict[str, asyncio.Future[np.ndarray]],
    ) -> str:
        """A distillation reply read as it streams; each statement (as the final parse will
        render it) goes to the encoder the moment its item closes."""
        cfg = self.config
        events = (
            client.stream_json(messages, schema, **params)
            if schema is not None
            else client.stream(messages, **params)
        )
        scanner, parts = ItemScanner(), []
        echo_of = problem if cfg.drop_echoes else None
        async for event in events:
            if not event.delta:
                continue
            parts.append(event.delta)
            for key, item in scanner.feed(event.delta):
                text = item_statement(key, item, cfg.max_chars_per_experience, echo_of)
                room = len(early) < 2 * cfg.max_experiences_per_rollout
                if text and text not in early and room:
                    early[text] = asyncio.ensure_future(self.encoder.aencode([text]))
        return "".join(parts)

    async def grounded_only(
        self, rec: RolloutRecord, r: int, report: Callable[[], None]
    ) -> RolloutOutcome:
        """No distillation: what running the rollout showed, filed as experience."""
        cands = self.grounded(await self.observe(rec, r), rec, r)
        returned = time.perf_counter()
        vectors = await self.encoder.aencode([c.text for c in cands]) if cands else None
        report()
        return RolloutOutcome(rec, cands, vectors, returned, time.perf_counter())

    async def distill_round(
        self, problem: str, r: int, outcomes: list[RolloutOutcome], first: int
    ) -> None:
        """One distillation for the whole round: one rollout per distinct answer (largest
        groups first, at most ``distill_batch``), shown side by side with how the answers
        split, so the distiller compares where they part. Its statements are filed under the
        first rollout it read."""
        cfg = self.config
        done = [o for o in outcomes if o.record.error is None]
        groups: list[tuple[str | None, list[RolloutOutcome]]] = []
        for o in done:
            for answer, members in groups:
                if await off_loop(answers_equivalent, o.record.answer, answer):
                    members.append(o)
                    break
            else:
                groups.append((o.record.answer, [o]))
        groups.sort(key=lambda g: -len(g[1]))
        chosen = [members[0] for _, members in groups[: cfg.distill_batch]]
        if not chosen:
            return
        client = self._client()
        attempts = [
            (
                clip_tokens(o.record.text, cfg.attempt_batch_tokens, client.count_tokens),
                o.record.answer,
                len(members),
            )
            for o, (_, members) in zip(chosen, groups, strict=False)
        ]
        messages = distill_batch_messages(
            problem, attempts, len(done), cfg.max_experiences_per_rollout,
            cfg.max_words_per_experience,
        )  # fmt: skip
        longest = max(self.client.count_tokens(o.record.text) for o in chosen)
        params, schema = self._distill_request(r, longest)
        lead = chosen[0]
        parsed = None
        for attempt in range(cfg.distill_retries + 1):
            lead.record.distill_tries += 1
            if cfg.seed is not None:
                params["seed"] = cfg.seed + first + 7919 * (attempt + 1)
            try:
                reply = await (
                    client.chat_json(messages, schema, **params)
                    if schema is not None
                    else client.chat(messages, **params)
                )
            except BudgetExhaustedError:  # not bought: the cap's room is spent
                return
            except LLMError:
                lead.record.distill = "failed"
                return
            parsed = parse_distillation(
                reply.text,
                cfg.max_experiences_per_rollout,
                cfg.max_chars_per_experience,
                problem if cfg.drop_echoes else None,
            )
            if parsed is not None:
                break
        if parsed is None:
            lead.record.distill = "unparseable"
            return
        lead.candidates = await self.file(lead.record, parsed, r)
        if lead.candidates:
            lead.vectors = await self.encoder.aencode([c.text for c in lead.candidates])
        lead.returned_at = lead.encoded_at = time.perf_counter()


@contextlib.contextmanager
def checker_failures(checker: object, what: str) -> Iterator[None]:
    """A task's checker that raises ends the run with a :class:`CheckerError` naming it and
    what it was checking (the library's own typed errors, e.g. a sandbox that cannot run,
    pass as they are)."""
    try:
        yield
    except RSEFastError:
        raise
    except Exception as exc:
        raise CheckerError(
            f"the experience checker {type(checker).__name__} raised {type(exc).__name__}: "
            f"{exc} (on {what})"
        ) from exc
