"""The results files of an evaluation: append-only JSONL, one record per
(problem, method, budget), shardable, never silently lossy.

An interrupted write leaves at most a torn last line: it is cut off in place with
``os.truncate`` (the file is never rewritten). Any other line that does not parse is counted
and reported by file and line number, and its cell is run again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Key = tuple[str, str, float]


@dataclass(frozen=True, kw_only=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based): the problems whose id hashes to it. Hashing the
    id (not its position) keeps the split stable when the problem list changes."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        head, sep, tail = text.partition("/")
        try:
            index, count = int(head), int(tail)
        except ValueError:
            index = count = 0
        if not sep or count < 1 or not 1 <= index <= count:
            raise ValueError(f"--shard takes i/N with 1 <= i <= N, got {text!r}")
        return cls(index=index, count=count)

    def holds(self, problem_id: str) -> bool:
        digest = hashlib.sha256(problem_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    @property
    def filename(self) -> str:
        return f"results.shard-{self.index}-of-{self.count}.jsonl"


def results_file(out: Path, shard: Shard | None) -> Path:
    return out / (shard.filename if shard else "results.jsonl")


def repair_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline (an interrupted append) with ``os.truncate``;
    returns the bytes cut."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        # walk back to the last newline, in blocks, without reading the whole file
        pos, block = size, 1 << 16
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        else:
            keep = 0
    os.truncate(path, keep)
    return size - keep


@dataclass
class Records:
    """Rows read from one or more results files, first occurrence of each key kept."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "file:line"
    duplicates: int = 0
    sources: list[str] = field(default_factory=list)

    def keys(self) -> set[Key]:
        return {key_of(r) for r in self.rows}


def key_of(row: dict[str, Any]) -> Key:
    return (str(row["problem"]), str(row["method"]), float(row["budget"]))


def read_records(paths: Iterable[Path]) -> Records:
    out = Records()
    seen: set[Key] = set()
    for path in paths:
        out.sources.append(str(path))
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    key = key_of(row)
                except (ValueError, KeyError, TypeError):
                    out.unreadable.append(f"{path}:{number}")
                    continue
                if key in seen:
                    out.duplicates += 1
                    continue
                seen.add(key)
                out.rows.append(row)
    return out


def results_files(places: Iterable[Path]) -> list[Path]:
    """Every results file in the given directories (shards included), or the files given."""
    found: list[Path] = []
    for place in places:
        if place.is_dir():
            found += sorted(place.glob("results*.jsonl"))
        elif place.exists():
            found.append(place)
        else:
            raise FileNotFoundError(f"no results at {place}")
    if not found:
        raise FileNotFoundError(
            "no results*.jsonl in " + ", ".join(str(p) for p in places) + ": run `rse-fast eval`"
        )
    return found


def append_record(fh: Any, row: dict[str, Any]) -> None:
    """One record per line, flushed and synced so a crash loses at most the line in flight."""
    fh.write(json.dumps(row, default=str) + "\n")
    fh.flush()
    os.fsync(fh.fileno())
