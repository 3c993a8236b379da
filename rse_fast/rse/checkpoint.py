"""Per-round checkpoints: an interrupted RSE run resumes and loses at most the round in flight.

Each round writes ``round-R.json`` (results + ledger) and ``bank-R.json/.npz``, then atomically
replaces ``latest.json`` to point at them: a crash at any moment leaves the previous round's
checkpoint complete and current.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rse_fast.llm.ledger import CallRecord, Ledger
from rse_fast.rse.bank import ExperienceBank
from rse_fast.rse.results import RoundResult
from rse_fast.util.files import write_atomic


def problem_id(problem: str) -> str:
    return hashlib.sha256(problem.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class Saved:
    """The last complete round's state: the rounds, the bank, the ledger's records, and
    whatever the run's own loop saved beside them (``state``; None when it saved none)."""

    rounds: list[RoundResult]
    bank: ExperienceBank
    records: list[CallRecord]
    state: dict[str, Any] | None = None


class Checkpoint:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)

    def save(
        self,
        problem: str,
        config: dict[str, Any],
        rounds: list[RoundResult],
        bank: ExperienceBank,
        ledger: Ledger,
        state: dict[str, Any] | None = None,
    ) -> None:
        """Write round ``rounds[-1]`` (``state``: the caller's own loop state, plain JSON)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        r = rounds[-1].round
        state = {
            "problem": problem,
            "config": config,
            "rounds": [x.to_dict() for x in rounds],
            "ledger": [asdict(rec) for rec in ledger.records],
            **({"state": state} if state is not None else {}),
        }
        write_atomic(self.dir / f"round-{r}.json", json.dumps(state, ensure_ascii=False))
        bank.save(self.dir / f"bank-{r}")
        latest = {"round": r, "problem_id": problem_id(problem)}
        write_atomic(self.dir / "latest.json", json.dumps(latest))

    def load(self, problem: str) -> Saved | None:
        """The last complete round's state, or None when there is no checkpoint yet."""
        latest_path = self.dir / "latest.json"
        if not latest_path.exists():
            return None
        latest = _read(latest_path, ("round", "problem_id"))
        if latest["problem_id"] != problem_id(problem):
            raise ValueError(
                f"checkpoint in {self.dir} belongs to another problem; use another directory "
                "or delete it to start over"
            )
        path = self.dir / f"round-{latest['round']}.json"
        state = _read(path, ("rounds", "ledger"))
        try:
            rounds = [RoundResult.from_dict(x) for x in state["rounds"]]
            records = [CallRecord(**rec) for rec in state["ledger"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: damaged checkpoint ({exc!r}); {_REMEDY}") from None
        bank = ExperienceBank.load(self.dir / f"bank-{latest['round']}")
        loop = state.get("state")
        if loop is not None and not isinstance(loop, dict):
            raise ValueError(f"{path}: damaged checkpoint (its state is not an object); {_REMEDY}")
        return Saved(rounds, bank, records, loop)


_REMEDY = "delete the checkpoint directory (or use another) to start over"


def _read(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object with ``keys``, or a ValueError that names the file and the problem."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read checkpoint ({exc.strerror}); {_REMEDY}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: checkpoint is not valid JSON ({exc}); {_REMEDY}") from None
    missing = [k for k in keys if not isinstance(data, dict) or k not in data]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks {', '.join(missing)}; {_REMEDY}")
    return data  # type: ignore[no-any-return]
