"""Beam search: keep the best partial solutions, expand each several ways per level (the
step-wise machinery is ``stepwise``)."""

from __future__ import annotations

from rse_fast.methods.stepwise import SearchPath, SearchRun, Stepwise
from rse_fast.util.tasks import gather_or_cancel


class BeamSearch(Stepwise):
    """Keep the ``width`` best partial solutions; expand each ``expand`` ways per level."""

    name = "beam"

    def _paths(self) -> int:
        return self.width

    async def _search(
        self, run: SearchRun, tree: int, n: int
    ) -> tuple[list[SearchPath], list[SearchPath], int]:
        spend = run.spend
        beams, finished = [SearchPath()], []
        depth = 0
        while beams and depth < self.max_depth:
            pairs = [(b, e) for b in range(len(beams)) for e in range(self.expand)]
            pairs = pairs[: self._affordable(spend, len(pairs), depth)]
            if not pairs:
                break
            before = spend.spent
            children = await gather_or_cancel(
                self._grow(run, beams[b], self.seed + 100_000 * tree + 1000 * depth + 10 * b + e)
                for b, e in pairs
            )
            self._per_ext = (spend.spent - before) / len(pairs)
            per_beam = self._per_ext * self.expand
            depth += 1
            finished += [p for p in children if p.finished]
            open_ = sorted((p for p in children if not p.finished), key=lambda p: -p.score)
            beams = open_[: self._fit(spend, per_beam, depth, cap=min(len(open_), n))]
        return finished, beams, depth
