"""What ``solve`` shows while it runs: live ``rich`` bars on a terminal, one line per round
otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rse_fast.rse.results import Progress


def bank_words(sizes: dict[str, int]) -> str:
    """``{"negative": 3, "positive": 1}`` → "3 pitfalls, 1 proposition"."""
    neg, pos = sizes.get("negative", 0), sizes.get("positive", 0)
    return f"{neg} pitfall{'' if neg == 1 else 's'}, {pos} proposition{'' if pos == 1 else 's'}"


class ProgressDisplay:
    """Live ``rich`` bars on a terminal (per round: rollouts and distillations done of K,
    tokens and tokens/s, the bank's sizes by name); one plain line per round otherwise."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.live = bool(self.stream.isatty())
        self._bars: Any = None
        self._round = 0
        self._tasks: tuple[Any, Any] = (None, None)
        self._since = (time.perf_counter(), 0)

    def _rate(self, p: Progress) -> float:
        t0, tokens0 = self._since
        return (p.tokens - tokens0) / max(1e-6, time.perf_counter() - t0)

    def __call__(self, p: Progress) -> None:
        if p.round != self._round:
            self._round, self._since = p.round, (time.perf_counter(), p.tokens)
            if self.live:
                self._new_round(p)
        info = f"{p.tokens:,} tokens, {self._rate(p):,.0f} tok/s"
        if not self.live:
            if p.round_done:
                self.stream.write(
                    f"round {p.round}/{p.rounds}: rollouts {p.rollouts_done}/{p.k}, distilled "
                    f"{p.distills_done}/{p.k} (unparseable {p.unparseable}), failed "
                    f"{p.failures} | bank: "
                    f"{bank_words(p.bank_sizes)} | {info}\n"
                )
            return
        rollouts, distills = self._tasks
        self._bars.update(rollouts, completed=p.rollouts_done + p.failures,
                          info=f"failed {p.failures} · {info}")  # fmt: skip
        self._bars.update(distills, completed=p.distills_done,
                          info=f"unparseable {p.unparseable} · bank: "
                               f"{bank_words(p.bank_sizes)}")  # fmt: skip

    def _new_round(self, p: Progress) -> None:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bars

            self._bars = Bars(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                console=Console(file=self.stream),
            )  # fmt: skip
            self._bars.start()
        self._tasks = (
            self._bars.add_task(f"round {p.round}/{p.rounds} rollouts", total=p.k, info=""),
            self._bars.add_task(f"round {p.round}/{p.rounds} distilled", total=p.k, info=""),
        )

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
