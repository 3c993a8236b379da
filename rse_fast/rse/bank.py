"""ExperienceBank: positive and negative experiences, their provenance and support, and a
similarity index per type; greedy semantic dedup on insert; ranked rendering into the prompt;
save/load (JSON + npz), validated so a damaged file names itself and its problem.

**Support.** Every dedup rejection is a rollout that re-derived an experience already kept (or
accepted earlier in the same batch). The bank records which (round, rollout) pairs derived each
experience; their number is its support, a consensus signal that ranks what the prompt shows.

**Dedup policies.** ``keep-first``: the first statement of an idea stays. ``replace-longer``:
a rejected candidate that is longer than the earlier-round experience it matched replaces its
text and vector (the longest such candidate of the batch wins), keeping the support. Accept or
reject decisions are made exactly as with keep-first, against the bank as it was when the batch
began; replacements apply after the batch.

**One name per statement.** A statement is never both a pitfall and a proposition. When a new
statement matches (cosine ≥ its kind's τ) one of the other kind, the stronger side stays and
the other is taken out: a checker's verdict first (a verified or refuted item beats an
unchecked one), then support (how many rollouts derived it), then age (the item filed first).
The loser's decision says ``conflict`` and names the winner.

**Rendering policy.** Experiences are ranked by support (most first), then recency (the round
that last derived them, newest first), then by when they were first found. The top-ranked
experiences of both types that fit the token budget are shown, pitfalls first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rse_fast.llm.ledger import approx_token_count
from rse_fast.prompts.rse import DEFAULT_GUIDANCE, Guidance, render_experiences
from rse_fast.rse.index import SimilarityIndex, normalize_rows

Kind = Literal["positive", "negative"]
KINDS: tuple[Kind, Kind] = ("negative", "positive")  # negatives render first
Policy = Literal["keep-first", "replace-longer"]
POLICIES: tuple[Policy, Policy] = ("keep-first", "replace-longer")


@dataclass(frozen=True, kw_only=True)
class Experience:
    """A statement and where it came from: round, rollout index, position in that rollout's
    distillation. Candidates waiting for dedup use the same type."""

    text: str
    kind: str
    round: int
    rollout: int
    position: int
    #: what a task's checker said of it (``rse.checking``): verified, refuted (a proposition
    #: refiled as a pitfall), unknown, or unchecked (no checker), and its evidence
    verdict: str = "unchecked"
    evidence: str = ""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Why a candidate was or was not added: its best match and their similarity.
    ``replaced``: the candidate was a duplicate but its longer text took the match's place."""

    text: str
    kind: str
    accepted: bool
    similarity: float | None
    matched: str | None
    round: int
    rollout: int
    position: int
    replaced: bool = False
    #: accepted by its own kind, then taken out because the other kind holds the same
    #: statement with stronger evidence (``matched`` names it)
    conflict: bool = False
    verdict: str = "unchecked"  # the task checker's, as on the candidate
    evidence: str = ""


def _strength(entry: _Entry) -> tuple[bool, int, int, int, int]:
    """What settles a conflict between a pitfall and a proposition: checked, then support,
    then age (earlier round, rollout, position)."""
    e = entry.experience
    return (e.verdict in ("verified", "refuted"), entry.support, -e.round, -e.rollout, -e.position)


@dataclass
class _Entry:
    experience: Experience
    derived_by: set[tuple[int, int]] = field(default_factory=set)  # (round, rollout)

    @property
    def support(self) -> int:
        return len(self.derived_by)

    @property
    def last_round(self) -> int:
        return max((r for r, _ in self.derived_by), default=self.experience.round)


class ExperienceBank:
    """Two typed sets of experiences, deduplicated by embedding similarity.

    Args:
        dim: embedding dimension (the encoder's).
        capacity: initial rows per type (grows by doubling).
        policy: ``keep-first`` or ``replace-longer`` (see the module docstring).
    """

    def __init__(self, dim: int, capacity: int = 256, *, policy: Policy = "keep-first") -> None:
        if policy not in POLICIES:
            raise ValueError(f"dedup policy must be one of {POLICIES}, got {policy!r}")
        self.dim, self.policy = dim, policy
        self._entries: dict[str, list[_Entry]] = {k: [] for k in KINDS}
        self.indexes: dict[str, SimilarityIndex] = {
            k: SimilarityIndex(dim, capacity) for k in KINDS
        }
        self.problem_ids: set[str] = set()  # problems whose rollouts filled the bank

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self._entries.items()}

    @property
    def items(self) -> dict[str, list[Experience]]:
        return {k: [e.experience for e in v] for k, v in self._entries.items()}

    def texts(self, kind: str) -> list[str]:
        return [e.experience.text for e in self._entries[kind]]

    def support(self, kind: str) -> list[int]:
        """Support of each experience of ``kind``, in bank order."""
        return [e.support for e in self._entries[kind]]

    def derived_by(self, kind: str, i: int) -> list[tuple[int, int]]:
        """The (round, rollout) pairs that derived experience ``i`` of ``kind``."""
        return sorted(self._entries[kind][i].derived_by)

    def add(
        self,
        candidates: Sequence[Experience],
        vectors: np.ndarray,
        tau: dict[str, float],
    ) -> list[Decision]:
        """Greedy-insert candidates of both kinds, in the given order, all or nothing.

        Every input is validated before the first insert, so a bad vector or τ leaves the bank
        exactly as it was.
        """
        if len(candidates) != len(vectors):
            raise ValueError(f"{len(candidates)} candidates but {len(vectors)} vectors")
        groups: dict[str, list[int]] = {k: [] for k in KINDS}
        for i, c in enumerate(candidates):
            if c.kind not in groups:
                raise ValueError(f"unknown experience kind {c.kind!r}; expected one of {KINDS}")
            groups[c.kind].append(i)
        for kind, idx in groups.items():
            if idx:
                normalize_rows(vectors[idx], self.dim)  # raises before anything changes
                t = tau[kind]
                if not -1.0 < float(t) <= 1.0:
                    raise ValueError(f"tau for {kind} must be in (-1, 1], got {t}")
        decisions: list[Decision | None] = [None] * len(candidates)
        n0: dict[str, int] = {k: len(self._entries[k]) for k in KINDS}
        for kind, idx in groups.items():
            if idx:
                for i, d in self._add_kind(kind, idx, candidates, vectors, tau[kind]).items():
                    decisions[i] = d
        lost = self._settle_conflicts(n0, tau)
        for i, decided in enumerate(decisions):
            if decided is not None and id(candidates[i]) in lost:
                winner, sim = lost[id(candidates[i])]
                decisions[i] = replace(
                    decided, accepted=False, conflict=True, matched=winner, similarity=sim
                )
        return [d for d in decisions if d is not None]

    def _settle_conflicts(
        self, n0: dict[str, int], tau: dict[str, float]
    ) -> dict[int, tuple[str, float]]:
        """Take out the weaker side wherever a statement filed in this batch matches one of the
        other kind (see the module docstring); returns, by ``id`` of each experience taken
        out, the text that won and their similarity."""
        lost: dict[int, tuple[str, float]] = {}
        for kind in KINDS:
            other = "positive" if kind == "negative" else "negative"
            row = n0[kind]
            while row < len(self._entries[kind]) and len(self._entries[other]):
                sims, match = self.indexes[other].max_similarity(
                    self.indexes[kind].vectors[row : row + 1]
                )
                sim, m = float(sims[0]), int(match[0])
                if sim < tau[kind]:
                    row += 1
                    continue
                entry, rival = self._entries[kind][row], self._entries[other][m]
                if _strength(entry) > _strength(rival):
                    lost[id(rival.experience)] = (entry.experience.text, sim)
                    self._drop(other, m)
                    n0[other] -= m < n0[other]
                else:
                    lost[id(entry.experience)] = (rival.experience.text, sim)
                    self._drop(kind, row)
        return lost

    def _drop(self, kind: str, row: int) -> None:
        del self._entries[kind][row]
        self.indexes[kind].remove(row)

    def _add_kind(
        self,
        kind: str,
        idx: list[int],
        candidates: Sequence[Experience],
        vectors: np.ndarray,
        tau: float,
    ) -> dict[int, Decision]:
        index, entries = self.indexes[kind], self._entries[kind]
        n0 = len(entries)
        res = index.insert(vectors[idx], tau, keys=[candidates[i].text for i in idx])
        kept = [i for i, ok in zip(idx, res.accepted, strict=True) if ok]
        entries.extend(
            _Entry(candidates[i], {(candidates[i].round, candidates[i].rollout)}) for i in kept
        )
        longest: dict[int, int] = {}  # bank row -> candidate that may replace it
        out: dict[int, Decision] = {}
        for j, i in enumerate(idx):
            c = candidates[i]
            m = int(res.match[j])  # index row == entry (accepted candidates append in order)
            rejected_by = m if m >= 0 and not res.accepted[j] else None
            matched = None
            if rejected_by is not None:
                entry = entries[rejected_by]
                matched = entry.experience.text
                entry.derived_by.add((c.round, c.rollout))
                if rejected_by < n0 and len(c.text) > len(matched):
                    best = longest.get(rejected_by)
                    if best is None or len(c.text) > len(candidates[best].text):
                        longest[rejected_by] = i
            sim = float(res.similarity[j])
            out[i] = Decision(
                verdict=c.verdict,
                evidence=c.evidence,
                text=c.text,
                kind=kind,
                accepted=bool(res.accepted[j]),
                similarity=sim if np.isfinite(sim) else None,
                matched=matched,
                round=c.round,
                rollout=c.rollout,
                position=c.position,
            )
        if self.policy == "replace-longer":
            for row, i in longest.items():
                old = entries[row].experience
                index.replace(row, vectors[i], key=candidates[i].text)
                entries[row].experience = replace(
                    candidates[i], kind=kind, round=old.round, rollout=old.rollout,
                    position=old.position,
                )  # fmt: skip
                d = out[i]
                out[i] = Decision(**{**asdict(d), "replaced": True})
        return out

    # -- rendering -------------------------------------------------------------------------
    def _rank_key(self, kind: str, i: int) -> tuple[int, int, int, int]:
        e = self._entries[kind][i]
        return (-e.support, -e.last_round, i, 0 if kind == "negative" else 1)

    def ranked(self, kind: str) -> list[int]:
        """Indices of ``kind`` by the rendering policy: support, then recency, then age."""
        return sorted(range(len(self._entries[kind])), key=lambda i: self._rank_key(kind, i))

    def render(
        self,
        token_budget: int = 1000,
        count_tokens: Callable[[str], int] = approx_token_count,
        *,
        max_per_kind: int | None = None,
        same_problem: bool = True,
        min_support: int = 1,
        guidance: Guidance = DEFAULT_GUIDANCE,
        shown_if: Callable[[str, set[tuple[int, int]]], bool] | None = None,
    ) -> str:
        """Prompt text for the bank: the best-ranked experiences of both kinds with at least
        ``min_support`` that fit ``token_budget`` (framing included), pitfalls first. A
        checker-verified item needs no second sighting: support guards against a belief one
        rollout made up, and a verified item is no belief. ``shown_if(kind, sources)``: a
        further test of an item by the (round, rollout) pairs that derived it."""

        def eligible(entry: _Entry, kind: str) -> bool:
            return self._shown_with(entry, min_support) and (
                shown_if is None or shown_if(kind, entry.derived_by)
            )

        order = {
            k: [i for i in self.ranked(k) if eligible(self._entries[k][i], k)][:max_per_kind]
            for k in KINDS
        }
        merged = sorted(
            ((k, i) for k in KINDS for i in order[k]), key=lambda ki: self._rank_key(*ki)
        )
        shown: list[tuple[str, int]] = []
        used = count_tokens(render_experiences(["x"], ["x"], same_problem, guidance))
        for kind, i in merged:  # strictly by rank: nothing below an item that did not fit
            used += count_tokens(self._entries[kind][i].experience.text) + 2
            if used > token_budget:
                break
            shown.append((kind, i))
        while True:
            negatives, positives = (
                [self._entries[k][i].experience.text for kk, i in shown if kk == k] for k in KINDS
            )
            text = render_experiences(negatives, positives, same_problem, guidance)
            if not text or count_tokens(text) <= token_budget:
                return text
            shown.pop()  # the per-line estimate was short: drop the lowest-ranked

    @staticmethod
    def _shown_with(entry: _Entry, min_support: int) -> bool:
        return entry.support >= min_support or entry.experience.verdict == "verified"

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """``path.json`` (texts, provenance, support; human-readable) and ``path.npz``
        (vectors), each written atomically."""
        base = Path(path)
        meta = {
            "format": 2,
            "dim": self.dim,
            "policy": self.policy,
            "problem_ids": sorted(self.problem_ids),
            "items": {
                k: [
                    {**asdict(e.experience), "derived_by": sorted(e.derived_by)}
                    for e in self._entries[k]
                ]
                for k in KINDS
            },
        }
        tmp_json, tmp_npz = base.with_suffix(".json.tmp"), base.with_suffix(".npz.tmp")
        tmp_json.write_text(json.dumps(meta, indent=1, ensure_ascii=False))
        with open(tmp_npz, "wb") as fh:
            np.savez(
                fh,
                negative=self.indexes["negative"].vectors,
                positive=self.indexes["positive"].vectors,
            )
        os.replace(tmp_npz, base.with_suffix(".npz"))
        os.replace(tmp_json, base.with_suffix(".json"))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ExperienceBank:
        """Read a bank written by :meth:`save`; a truncated or hand-edited file raises a
        ValueError naming the file and what is wrong with it."""
        base = Path(path)
        json_path, npz_path = base.with_suffix(".json"), base.with_suffix(".npz")
        try:
            meta = json.loads(json_path.read_text())
            if not isinstance(meta, dict) or not {"dim", "items"} <= meta.keys():
                raise ValueError("no 'dim' and 'items'")
        except (OSError, ValueError) as exc:
            raise ValueError(f"{json_path}: not a saved experience bank ({exc})") from None
        try:
            with np.load(npz_path, allow_pickle=False) as data:
                vectors: dict[str, np.ndarray] = {k: np.asarray(data[k]) for k in KINDS}
        except Exception as exc:  # any unreadable npz is the same problem
            raise ValueError(f"{npz_path}: not a saved experience bank ({exc!r})") from None
        try:
            return cls._from_saved(meta, vectors)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{json_path}: not a saved experience bank ({exc!r})") from None

    @classmethod
    def _from_saved(cls, meta: dict[str, Any], vectors: dict[str, np.ndarray]) -> ExperienceBank:
        bank = cls(int(meta["dim"]), policy=meta.get("policy", "keep-first"))
        bank.problem_ids = {str(p) for p in meta.get("problem_ids", [])}
        for kind in KINDS:
            raw = meta["items"][kind]
            if not isinstance(raw, list):
                raise TypeError(f"items.{kind} is not a list")
            if len(raw) != len(vectors[kind]):
                raise ValueError(f"{len(raw)} {kind} texts but {len(vectors[kind])} vectors")
            entries = []
            for item in raw:
                derived = item.pop("derived_by", None) if isinstance(item, dict) else None
                exp = Experience(**item)
                pairs = (
                    {(int(r), int(o)) for r, o in derived}
                    if derived
                    else {(exp.round, exp.rollout)}
                )
                entries.append(_Entry(exp, pairs))
            if entries:
                bank.indexes[kind].extend(vectors[kind], keys=[e.experience.text for e in entries])
            bank._entries[kind] = entries
        return bank
