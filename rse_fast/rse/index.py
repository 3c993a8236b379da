"""SimilarityIndex: a growable bank of L2-normalised rows with exact greedy dedup.

The experience bank builds on it. Every public method validates its input completely before it
touches state, so a failed call leaves the index exactly as it was.

Decision rule (exact, documented): candidate j is rejected when its key (text, or the bytes of
its normalised vector) equals that of a row already in the index or of an earlier candidate of
the batch, or when ``sim(j, e) >= tau`` for some row ``e`` in the index or an earlier *accepted*
candidate; otherwise it is accepted and appended. ``sim`` is the float64 dot product, in index
order, of the normalised float32 rows. Ties (``sim == tau``) reject. The kernel works in float32
and recomputes in float64 only what its error bound cannot settle, so batch and one-at-a-time
insertion make identical decisions, and so do the two precisions: ``precision="float16"``
keeps the rows in half the memory (binary16, exact float32 copies in a file for the
re-scoring; docs/dedup-at-scale.md) and reports the same decisions, rows and similarities.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rse_fast import kernels
from rse_fast.rse.exact_rows import ExactRowFile

_FORMAT = 1
PRECISIONS = ("float32", "float16")
DEVICES = ("auto", "cpu", "cuda")
#: ``device="auto"`` scores a bank on the GPU from this many rows (below it a launch costs
#: more than the CPU's whole scan).
GPU_MIN_ROWS = 65536


def _gpu_present() -> bool:
    if not os.path.exists("/dev/nvidiactl"):
        return False
    try:
        from rse_fast.kernels import cuda
    except ImportError:  # numba-cuda not installed
        return False
    return cuda.available()


@dataclass(frozen=True)
class InsertResult:
    """Per-candidate outcome of :meth:`SimilarityIndex.insert`, in input order.

    ``similarity[j]`` and ``match[j]``: the most similar row the rule compared j with (for a
    rejection, the row that caused it; for B=1, the first such row found). ``match`` ids are
    row ids of the index after the insert; -1 (with similarity -inf) when nothing was compared.
    ``rows[j]`` is the row id given to an accepted candidate, -1 for a rejected one.
    ``from_batch[j]`` says whether ``match[j]`` is a candidate of this same batch.
    """

    accepted: np.ndarray
    similarity: np.ndarray
    match: np.ndarray
    rows: np.ndarray
    from_batch: np.ndarray

    def __len__(self) -> int:
        return int(self.accepted.shape[0])

    @property
    def n_accepted(self) -> int:
        return int(self.accepted.sum())


def _validate_tau(tau: float) -> float:
    try:
        t = float(tau)
    except (TypeError, ValueError):
        raise ValueError(f"tau must be a real number in (-1, 1], got {tau!r}") from None
    if not (-1.0 < t <= 1.0):
        raise ValueError(f"tau must be in (-1, 1], got {t}")
    return t


def normalize_rows(vectors: object, dim: int) -> np.ndarray:
    """Validate a (n, dim) real array and return a C-contiguous float32 copy with unit rows."""
    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array of shape (n, {dim}), got shape {arr.shape}")
    if arr.dtype.kind != "f":
        raise ValueError(f"vectors must have a floating dtype (float32 preferred), got {arr.dtype}")
    if arr.shape[1] != dim:
        raise ValueError(f"vectors have dimension {arr.shape[1]}, the index has dimension {dim}")
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)[:5].tolist()
        raise ValueError(f"vectors contain NaN or inf (rows {bad})")
    if arr.dtype.itemsize > 4 and arr.size:
        big = np.abs(arr).max(axis=1) > np.finfo(np.float32).max
        if big.any():
            bad = np.flatnonzero(big)[:5].tolist()
            raise ValueError(f"vectors hold values beyond float32's range (rows {bad})")
    norms = np.linalg.norm(arr.astype(np.float64, copy=False), axis=1)
    if (norms == 0).any():
        bad = np.flatnonzero(norms == 0)[:5].tolist()
        raise ValueError(f"vectors contain zero rows, which have no direction (rows {bad})")
    return np.ascontiguousarray(arr / norms[:, None], dtype=np.float32)


def _digests(unit: np.ndarray, keys: Sequence[str | bytes] | None) -> np.ndarray:
    if keys is None:
        return kernels.row_digests(unit)
    if isinstance(keys, (str, bytes)) or len(keys) != unit.shape[0]:
        raise ValueError(f"keys must be a sequence of {unit.shape[0]} str or bytes, one per row")
    out = np.empty(len(keys), np.uint64)
    for i, key in enumerate(keys):
        if isinstance(key, str):
            key = key.encode("utf-8", "surrogatepass")
        elif not isinstance(key, bytes):
            raise ValueError(f"keys[{i}] must be str or bytes, got {type(key).__name__}")
        out[i] = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return out


class SimilarityIndex:
    """Preallocated (capacity, dim) matrix of unit rows, capacity doubling on demand.

    ``precision="float16"`` stores the rows as binary16 (half the bytes) and their exact float32
    copies in an anonymous file under ``spill_dir``. ``device="cuda"`` scores on a GPU (a
    float32 mirror in its memory); ``"auto"`` does so when one is present and the bank holds
    ``GPU_MIN_ROWS`` rows. Every choice makes the float32 CPU index's decisions.
    """

    def __init__(
        self,
        dim: int,
        capacity: int = 1024,
        precision: str = "float32",
        spill_dir: str | os.PathLike[str] | None = None,
        device: str = "auto",
    ) -> None:
        if int(dim) != dim or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if int(capacity) != capacity or capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
        self._mirror: Any = None
        if device == "cuda" or (device == "auto" and _gpu_present()):
            from rse_fast.kernels import cuda

            if not cuda.available():
                raise ValueError("device='cuda' but no CUDA device is available")
            self._mirror = cuda.CudaRows(int(dim), int(capacity))
        self._gpu_from = 0 if device == "cuda" else GPU_MIN_ROWS
        self._dim = int(dim)
        self._precision = precision
        self._exact = ExactRowFile(self._dim, spill_dir) if precision == "float16" else None
        dtype = np.uint16 if self._exact is not None else np.float32
        self._rows = np.zeros((int(capacity), self._dim), dtype)
        self._half_view: kernels.HalfRows | None = None
        self._n = 0
        self._row_of_digest: dict[int, int] = {}
        self._digests = np.zeros(int(capacity), np.uint64)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def capacity(self) -> int:
        return int(self._rows.shape[0])

    @property
    def precision(self) -> str:
        return self._precision

    @property
    def memory_bytes(self) -> int:
        """Bytes the index holds in memory (rows at capacity and their keys; the float16
        index's exact copies are in a file)."""
        return int(self._rows.nbytes + self._digests.nbytes)

    @property
    def device(self) -> str:
        return "cpu" if self._mirror is None else "cuda"

    def _bank(self) -> np.ndarray | kernels.BankRows | kernels.DeviceRows:
        exact = self._rows.__getitem__ if self._exact is None else self._exact.read
        if self._mirror is not None and self._n >= self._gpu_from:
            bound: kernels.DeviceRows = self._mirror.bind(self._n, exact)
            return bound
        if self._exact is None:
            return self._rows
        view = self._half_view
        if view is None or view.words is not self._rows:  # kept: it holds the decode buffer
            view = self._half_view = kernels.HalfRows(self._rows, self._n, exact)
        view.n = self._n
        return view

    def __len__(self) -> int:
        return self._n

    @property
    def vectors(self) -> np.ndarray:
        """Read-only float32 used rows (a view; for a float16 index, read from its file)."""
        view = self._rows[: self._n] if self._exact is None else self._exact.read_first(self._n)
        view.flags.writeable = False
        return view

    def max_similarity(self, vectors: object) -> tuple[np.ndarray, np.ndarray]:
        """Max similarity of each vector to the index and the row holding it (-inf, -1 if empty).
        An empty batch gives two empty arrays."""
        if np.asarray(vectors).size == 0:
            return np.empty(0, np.float32), np.empty(0, np.int64)
        unit = normalize_rows(vectors, self._dim)
        return kernels.bank_max_tiled(self._bank(), self._n, unit)

    def insert(
        self, vectors: object, tau: float, keys: Sequence[str | bytes] | None = None
    ) -> InsertResult:
        """Greedily insert a batch in order; see the module docstring for the exact rule.

        Args:
            vectors: (B, dim) real array (any float dtype; rows need not be unit length).
            tau: threshold in (-1, 1]: a candidate whose cosine to a stored row or to an
                earlier *accepted* candidate is >= tau is rejected (ties reject).
            keys: optional per-row identity (text or bytes): a repeated key is an exact
                duplicate, caught before any arithmetic. Without keys, the normalised
                vector's bytes are the key.

        Returns:
            :class:`InsertResult`, per candidate in input order: accepted, the best
            similarity seen, the row (bank or batch) that caused a rejection, and the new
            row index of accepted ones.

        Raises:
            ValueError: wrong dim, NaN/inf, zero rows, tau out of range, bad keys; the index
                is left untouched.

        Example::

            index = SimilarityIndex(dim=3)
            res = index.insert(np.eye(3, dtype=np.float32), tau=0.9)
            res.accepted.tolist()  # [True, True, True]
            index.insert(np.array([[1.0, 0.1, 0.0]]), tau=0.9).accepted.tolist()  # [False]
        """
        t = _validate_tau(tau)
        unit = normalize_rows(vectors, self._dim)
        digests = _digests(unit, keys)
        with self._lock:
            n0 = self._n
            b = unit.shape[0]
            bank_dup = np.full(b, -1, np.int64)
            dup_of = np.full(b, -1, np.int64)
            first_seen: dict[int, int] = {}
            for j, dg in enumerate(digests.tolist()):
                row = self._row_of_digest.get(dg)
                if row is not None:
                    bank_dup[j] = row
                elif dg in first_seen:
                    dup_of[j] = first_seen[dg]
                else:
                    first_seen[dg] = j
            dec = kernels.greedy_insert(self._bank(), n0, unit, t, bank_dup, dup_of)
            rows = np.full(b, -1, np.int64)
            rows[dec.accepted] = n0 + np.arange(int(dec.accepted.sum()))
            self._append(unit[dec.accepted], digests[dec.accepted])
        return InsertResult(dec.accepted, dec.similarity, dec.match, rows, dec.match >= n0)

    def replace(self, row: int, vector: object, key: str | bytes | None = None) -> None:
        """Put a new vector (and key) in place of stored row ``row``: how a longer statement
        takes the place of the near-duplicate it matched. Validated first; on error the index
        is unchanged."""
        unit = normalize_rows(np.asarray(vector).reshape(1, -1), self._dim)
        digest = int(_digests(unit, None if key is None else [key])[0])
        with self._lock:
            if not 0 <= row < self._n:
                raise ValueError(f"row {row} is not a stored row (the index has {self._n})")
            old = int(self._digests[row])
            if self._exact is not None:
                self._exact.write(row, unit)
            if self._row_of_digest.get(old) == row:
                del self._row_of_digest[old]
            self._rows[row] = self._stored(unit)[0]
            self._remirror()
            self._digests[row] = digest
            self._row_of_digest.setdefault(digest, row)

    def remove(self, row: int) -> None:
        """Take stored row ``row`` out; the rows after it move up by one (how the bank drops
        the losing side of a pitfall/proposition conflict)."""
        with self._lock:
            if not 0 <= row < self._n:
                raise ValueError(f"row {row} is not a stored row (the index has {self._n})")
            if self._exact is not None:
                self._exact.drop(row, self._n)
            self._rows[row : self._n - 1] = self._rows[row + 1 : self._n]
            self._digests[row : self._n - 1] = self._digests[row + 1 : self._n]
            self._n -= 1
            self._remirror()
            self._row_of_digest = {}
            for i, d in enumerate(self._digests[: self._n].tolist()):
                self._row_of_digest.setdefault(d, i)

    def extend(self, vectors: object, keys: Sequence[str | bytes] | None = None) -> np.ndarray:
        """Append rows without deduplication (bulk loading); returns their row ids."""
        unit = normalize_rows(vectors, self._dim)
        digests = _digests(unit, keys)
        with self._lock:
            n0 = self._n
            self._append(unit, digests)
        return np.arange(n0, n0 + unit.shape[0])

    def _remirror(self) -> None:
        if self._mirror is not None:
            self._mirror.reset(self.vectors)

    def _stored(self, unit: np.ndarray) -> np.ndarray:
        return unit if self._exact is None else kernels.half.encode(unit)

    def _append(self, unit: np.ndarray, digests: np.ndarray) -> None:
        k = unit.shape[0]
        if k == 0:
            return
        need = self._n + k
        rows, dg = self._rows, self._digests
        if need > rows.shape[0]:
            cap = rows.shape[0]
            while cap < need:
                cap *= 2
            rows = np.zeros((cap, self._dim), self._rows.dtype)
            rows[: self._n] = self._rows[: self._n]
            dg = np.zeros(cap, np.uint64)
            dg[: self._n] = self._digests[: self._n]
        stored = self._stored(unit)
        if self._exact is not None:
            self._exact.write(self._n, unit)  # lands first: a failed write counts nothing
        rows[self._n : need] = stored
        if self._mirror is not None:
            self._mirror.append(unit)
        dg[self._n : need] = digests
        for i, d in enumerate(digests.tolist()):
            self._row_of_digest.setdefault(d, self._n + i)
        self._rows, self._digests, self._n = rows, dg, need

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the used rows and their keys to an ``.npz`` file atomically."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with self._lock, open(tmp, "wb") as fh:
            np.savez(
                fh,
                format=np.int64(_FORMAT),
                rows=self.vectors,
                digests=self._digests[: self._n],
            )
        os.replace(tmp, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        precision: str = "float32",
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> SimilarityIndex:
        """Read an index written by :meth:`save` (float32 rows, whatever the precision it was
        kept in), validating shapes, dtypes and values."""
        try:
            with np.load(path, allow_pickle=False) as data:
                fmt = int(data["format"])
                rows = data["rows"]
                digests = data["digests"]
        except (KeyError, OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: not a SimilarityIndex file ({exc!r})") from None
        if fmt != _FORMAT:
            raise ValueError(f"{path}: unsupported index format {fmt}")
        if rows.ndim != 2 or rows.dtype != np.float32 or digests.shape != rows.shape[:1]:
            raise ValueError(f"{path}: corrupt index (rows {rows.shape}, digests {digests.shape})")
        index = cls(rows.shape[1], max(1, rows.shape[0]), precision, spill_dir)
        if rows.shape[0]:
            index._append(normalize_rows(rows, rows.shape[1]), digests.astype(np.uint64))
        return index
