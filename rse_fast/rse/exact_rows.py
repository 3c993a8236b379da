"""The exact float32 rows of a half-precision index, in a file rather than in memory.

A half-precision bank scores from binary16 rows and re-scores the few candidates its error
bound cannot settle from these rows, a handful per insert: an unlinked temporary file read
with ``pread`` serves that without the rows counting in the process's resident memory (the
page cache may keep them; the kernel reclaims it under pressure). Every write lands before the
caller counts the row (the file keeps no count of its own: the index's is the only one), so
a failed write leaves the index as it was.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np


class ExactRowFile:
    """(dim,) float32 rows by row id in an anonymous file under ``directory``
    (default: the system's temporary directory; put it on a disk, not a tmpfs, to keep the
    rows out of memory)."""

    def __init__(self, dim: int, directory: str | os.PathLike[str] | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - lives as the index
        self._fd = self._file.fileno()
        self._dim = dim
        self._row_bytes = 4 * dim

    def _offset(self, row: int) -> int:
        return row * self._row_bytes

    def write(self, first: int, rows: np.ndarray) -> None:
        """Write ``rows`` as rows ``first, first + 1, ...``."""
        data = np.ascontiguousarray(rows, np.float32).tobytes()
        self._write_all(data, self._offset(first))

    def _write_all(self, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written

    def _read(self, offset: int, size: int) -> bytes:
        parts, got = [], 0
        while got < size:
            part = os.pread(self._fd, size - got, offset + got)
            if not part:
                raise OSError(f"exact row file ended at byte {offset + got} of {offset + size}")
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def read(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` as a (len(ids), dim) float32 array."""
        size = self._row_bytes
        data = b"".join(self._read(self._offset(int(i)), size) for i in ids)
        return np.frombuffer(data, np.float32).reshape(len(ids), self._dim)

    def read_first(self, n: int) -> np.ndarray:
        """Rows ``[0, n)`` as one (n, dim) float32 array."""
        data = self._read(0, self._offset(n))
        rows: np.ndarray = np.frombuffer(data, np.float32).reshape(n, self._dim).copy()
        return rows

    def drop(self, row: int, n: int) -> None:
        """Take row ``row`` out of rows ``[0, n)``; the rows after it move up by one."""
        tail = self._read(self._offset(row + 1), self._offset(n - row - 1))
        self._write_all(tail, self._offset(row))
        os.ftruncate(self._fd, self._offset(n - 1))

    def flush(self) -> None:
        """Wait until the rows written so far are on the disk."""
        os.fsync(self._fd)

    def close(self) -> None:
        self._file.close()
