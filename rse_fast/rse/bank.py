"""ExperienceBank: positive and negative experiences, their provenance, and a similarity index
per type; greedy semantic dedup on insert; rendering into the prompt; save/load (JSON + npz)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from rse_fast.llm.ledger import approx_token_count
from rse_fast.prompts import render_experiences
from rse_fast.rse.index import SimilarityIndex, normalize_rows

Kind = Literal["positive", "negative"]
KINDS: tuple[Kind, Kind] = ("negative", "positive")  # negatives render first


@dataclass(frozen=True, kw_only=True)
class Experience:
    """A statement and where it came from: round, rollout index, position in that rollout's
    distillation. Candidates waiting for dedup use the same type."""

    text: str
    kind: str
    round: int
    rollout: int
    position: int


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Why a candidate was or was not added: its best match and their similarity."""

    text: str
    kind: str
    accepted: bool
    similarity: float | None
    matched: str | None
    round: int
    rollout: int
    position: int


class ExperienceBank:
    def __init__(self, dim: int, capacity: int = 256) -> None:
        self.dim = dim
        self.items: dict[str, list[Experience]] = {k: [] for k in KINDS}
        self.indexes: dict[str, SimilarityIndex] = {
            k: SimilarityIndex(dim, capacity) for k in KINDS
        }

    def __len__(self) -> int:
        return sum(len(v) for v in self.items.values())

    def sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.items.items()}

    def texts(self, kind: str) -> list[str]:
        return [e.text for e in self.items[kind]]

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
        for kind, idx in groups.items():
            if not idx:
                continue
            index, items = self.indexes[kind], self.items[kind]
            n0 = len(items)
            res = index.insert(vectors[idx], tau[kind], keys=[candidates[i].text for i in idx])
            kept = [i for i, ok in zip(idx, res.accepted, strict=True) if ok]
            for j, i in enumerate(idx):
                c = candidates[i]
                m = int(res.match[j])
                matched = None
                if m >= 0:
                    matched = items[m].text if m < n0 else candidates[kept[m - n0]].text
                sim = float(res.similarity[j])
                decisions[i] = Decision(
                    text=c.text,
                    kind=kind,
                    accepted=bool(res.accepted[j]),
                    similarity=sim if np.isfinite(sim) else None,
                    matched=matched,
                    round=c.round,
                    rollout=c.rollout,
                    position=c.position,
                )
            items.extend(candidates[i] for i in kept)
        return [d for d in decisions if d is not None]

    def render(
        self,
        max_per_kind: int = 12,
        token_budget: int = 800,
        count_tokens: Callable[[str], int] = approx_token_count,
    ) -> str:
        """Prompt text for the bank: the newest ``max_per_kind`` of each kind, in the order they
        were found, pitfalls first, dropping the oldest until it fits ``token_budget``."""
        chosen = {k: self.texts(k)[-max_per_kind:] if max_per_kind > 0 else [] for k in KINDS}
        while True:
            text = render_experiences(chosen["negative"], chosen["positive"])
            if not text or count_tokens(text) <= token_budget:
                return text
            longest = max(KINDS, key=lambda k: len(chosen[k]))
            chosen[longest] = chosen[longest][1:]

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """``path.json`` (texts and provenance, human-readable) and ``path.npz`` (vectors)."""
        base = Path(path)
        meta = {
            "dim": self.dim,
            "items": {k: [asdict(e) for e in v] for k, v in self.items.items()},
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
        base = Path(path)
        try:
            meta = json.loads(base.with_suffix(".json").read_text())
            with np.load(base.with_suffix(".npz"), allow_pickle=False) as data:
                vectors = {k: data[k] for k in KINDS}
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{base}: not a saved experience bank ({exc})") from exc
        bank = cls(int(meta["dim"]))
        for kind in KINDS:
            items = [Experience(**e) for e in meta["items"][kind]]
            if len(items) != len(vectors[kind]):
                raise ValueError(
                    f"{base}: {len(items)} {kind} texts but {len(vectors[kind])} vectors"
                )
            if items:
                bank.indexes[kind].extend(vectors[kind], keys=[e.text for e in items])
            bank.items[kind] = items
        return bank
