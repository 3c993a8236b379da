"""How the greedy kernel reads a bank: approximate scores in tiles, exact rows on demand.

Both stores give every score within ``error`` of the exact similarity (the float64 dot, in
index order, of the float32 rows). The kernel decides from the approximate scores wherever the
bound settles it and re-scores the rest from ``exact_rows``; so a float32 bank and a float16
bank make the same decisions and report the same rows and similarities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from . import half
from ._jit import small_matmul_nt

#: Multiply-adds below which a product runs on the calling thread, not through BLAS: BLAS
#: wakes its worker threads even for a tiny product, and where another library's threads
#: (the encoder's) are spinning on the cores the wake-up took milliseconds (docs/decisions.md)
SMALL_PRODUCT = 1 << 21


def matmul_nt(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b.T``: on this thread when small, else through BLAS."""
    if a.shape[0] * b.shape[0] * a.shape[1] <= SMALL_PRODUCT:
        small_matmul_nt(a, b, out)
    else:
        np.matmul(a, b.T, out=out)


def tie_band(dim: int) -> float:
    """Bound on the error of a float32 dot of d-dimensional unit vectors (≤ d·2⁻²⁴), with room."""
    return max(1e-4, 4.0 * dim * 2.0**-24)


class BankRows(Protocol):
    """The rows ``[0, n)`` of a bank as the kernel reads them."""

    n: int
    dim: int
    #: bound on |approximate score - exact similarity|
    error: float
    #: bytes one stored row takes (what a scan reads)
    row_bytes: int

    def query(self, batch: np.ndarray) -> np.ndarray:
        """The batch as the scoring calls take it (scaled for the stored format)."""

    def tile(self, start: int, stop: int, query: np.ndarray, out: np.ndarray, cols: bool) -> None:
        """Approximate scores of rows ``[start, stop)`` into ``out``: (T, B), (B, T) if ``cols``."""

    def scan(self, start: int, stop: int, query_row: np.ndarray, out: np.ndarray) -> None:
        """Approximate scores of rows ``[start, stop)`` against one query row into ``out``."""

    def exact_rows(self, ids: np.ndarray) -> np.ndarray:
        """The float32 rows ``ids`` (exact copies), shape (len(ids), dim)."""


class Float32Rows:
    """A float32 matrix read through BLAS."""

    def __init__(self, rows: np.ndarray, n: int) -> None:
        self.rows, self.n, self.dim = rows, n, int(rows.shape[1])
        self.error = tie_band(self.dim)
        self.row_bytes = 4 * self.dim

    def query(self, batch: np.ndarray) -> np.ndarray:
        return batch

    def tile(self, start: int, stop: int, query: np.ndarray, out: np.ndarray, cols: bool) -> None:
        if cols:
            matmul_nt(query, self.rows[start:stop], out)
        else:
            matmul_nt(self.rows[start:stop], query, out)

    def scan(self, start: int, stop: int, query_row: np.ndarray, out: np.ndarray) -> None:
        np.matmul(self.rows[start:stop], query_row, out=out)

    def exact_rows(self, ids: np.ndarray) -> np.ndarray:
        picked: np.ndarray = self.rows[ids]
        return picked


class HalfRows:
    """Rows stored as binary16 words (``half.encode``), decoded as they are read; the exact
    float32 rows come from ``exact_rows`` (a file, not memory)."""

    def __init__(
        self, words: np.ndarray, n: int, exact_rows: Callable[[np.ndarray], np.ndarray]
    ) -> None:
        self.words, self.n, self.dim = words, n, int(words.shape[1])
        self.error = half.score_error(self.dim)
        self.row_bytes = 2 * self.dim
        self._exact = exact_rows
        self._decoded = np.empty((0, self.dim), np.float32)

    def query(self, batch: np.ndarray) -> np.ndarray:
        scaled: np.ndarray = batch * half.QUERY_SCALE
        return scaled

    def tile(self, start: int, stop: int, query: np.ndarray, out: np.ndarray, cols: bool) -> None:
        t = stop - start
        if self._decoded.shape[0] < t:
            self._decoded = np.empty((t, self.dim), np.float32)
        decoded = self._decoded[:t]
        half.decode_into(self.words, start, stop, decoded)
        if cols:
            matmul_nt(query, decoded, out)
        else:
            matmul_nt(decoded, query, out)

    def scan(self, start: int, stop: int, query_row: np.ndarray, out: np.ndarray) -> None:
        half.scores_into(self.words, start, stop, query_row, out)

    def exact_rows(self, ids: np.ndarray) -> np.ndarray:
        return self._exact(ids)


class DeviceRows:
    """A bank scored on a device: it hands back, per candidate, the ascending ids of the rows
    that can still matter (within twice the error of the candidate's maximum, or at least
    ``floor[j]`` where a floor is given); the host re-scores them from ``exact_rows``."""

    n: int
    dim: int
    error: float

    def candidates(self, batch: np.ndarray, floor: np.ndarray | None) -> list[np.ndarray]:
        raise NotImplementedError

    def exact_rows(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def as_bank(rows: np.ndarray | BankRows | DeviceRows, n: int) -> BankRows | DeviceRows:
    """A float32 matrix is read through BLAS; anything else is already a bank."""
    if isinstance(rows, np.ndarray):
        return Float32Rows(rows, n)
    return rows
