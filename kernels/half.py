"""Half-precision bank rows: encoding, decoding and the bound on a score computed from them.

A unit row ``x`` is stored as the IEEE binary16 bits of ``x * 2**15`` (``STORE_SCALE``): the
scale lifts every component a unit vector can hold above binary16's subnormal range down to
``2**-29``, and the few components below it are stored as zero. Decoding is a sign-extending
load, a shift and a mask into a binary32 word, read as a float (no table, no subnormal
arithmetic); the word's value is the stored one times ``2**-112``, so a query is multiplied
by ``QUERY_SCALE = 2**97`` (exact: a power of two) and a plain float32 dot of decoded row and
scaled query is the score.

:func:`score_error` bounds ``|score - exact similarity|`` (docs/dedup-at-scale.md derives it):
the storage rounding contributes at most ``2**-11`` (relative rounding of binary16, Cauchy-
Schwarz over unit vectors), the float32 dot at most ``gamma_d`` (any summation order), the
flushed components ``sqrt(d) * 2**-29``.
"""

from __future__ import annotations

import math
from typing import Any

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

STORE_SCALE = np.float32(2.0**15)
QUERY_SCALE = np.float32(2.0**97)
#: rows decoded per block of the fused scan: the decoded block stays in the core's L1/L2
SCAN_BLOCK_ROWS = 64
_EXPONENT = 0x7C00
#: 0x8FFFFFFF as an int32: keeps the sign and the 15 bits of exponent and mantissa after the
#: shift, clears the copies of the sign that sign extension left above them
_WORD_MASK = np.int32(-0x70000001)


def score_error(dim: int) -> float:
    """Upper bound on ``|approximate score - exact_dot(row, query)|`` for unit float32 rows and
    query, the row stored in half precision and the score summed in float32 in any order."""
    u32, u64 = 2.0**-24, 2.0**-53
    gamma = dim * u32 / (1.0 - dim * u32)  # float32 summation of d products
    norm = (1.0 + dim * u32) ** 2  # neither float32-normalised vector is exactly unit
    storage = 2.0**-11 * norm + math.sqrt(dim) * 2.0**-29
    arithmetic = gamma * (1.0 + 2.0**-11) * norm + dim * 2.0**-140  # underflowed products
    reference = dim * u64 * 2.0  # exact_dot itself sums d exact products in float64
    return 1.01 * (storage + arithmetic + reference)


def encode(unit: np.ndarray) -> np.ndarray:
    """(n, d) unit float32 rows -> (n, d) uint16 words, scaled and with subnormals flushed."""
    words: np.ndarray = (unit * STORE_SCALE).astype(np.float16).view(np.uint16)
    words[(words & _EXPONENT) == 0] = 0
    return words


def _bitcast_int32_to_float32(typingctx: Any, bits: Any) -> tuple[Any, Any]:
    """Reinterpret an int32's bits as a float32 (LLVM's bitcast: no instruction at all)."""
    sig = types.float32(types.int32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


_bits_as_float32: Any = intrinsic(_bitcast_int32_to_float32)


@nb.njit(cache=True, nogil=True, inline="always")
def _decoded(w: np.int16) -> np.float32:
    value: np.float32 = _bits_as_float32((np.int32(w) << np.int32(13)) & _WORD_MASK)
    return value


@nb.njit(cache=True, nogil=True)
def _decode_flat(words: np.ndarray, out: np.ndarray) -> None:
    for k in range(words.shape[0]):
        out[k] = _decoded(words[k])


def decode_into(words: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
    """Rows ``[start, stop)`` of ``words`` into the contiguous ``out[: stop - start]`` as
    float32, each value the stored one times ``2**-112`` (scored against a query times
    ``QUERY_SCALE``). One thread: it runs between two BLAS calls, whose threads a parallel
    region's spinning workers would slow down more than a second core speeds this up."""
    if (
        not out.flags.c_contiguous
        or out.shape[0] < stop - start
        or out.shape[1:] != words.shape[1:]
    ):
        raise ValueError(f"decode_into needs a contiguous ({stop - start}, d) float32 buffer")
    _decode_flat(words[start:stop].reshape(-1).view(np.int16), out[: stop - start].reshape(-1))


def scores_into(
    words: np.ndarray, start: int, stop: int, query: np.ndarray, out: np.ndarray
) -> None:
    """Scores of rows ``[start, stop)`` against one scaled query into ``out[: stop - start]``,
    each component decoded in registers as it is read: the bank is read once, at two bytes a
    component."""
    _scores(words.view(np.int16), start, stop, query, out)


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=True)
def _scores(words: np.ndarray, start: int, stop: int, query: np.ndarray, out: np.ndarray) -> None:
    d = words.shape[1]
    n_blocks = (stop - start + SCAN_BLOCK_ROWS - 1) // SCAN_BLOCK_ROWS
    for blk in nb.prange(n_blocks):
        first = start + blk * SCAN_BLOCK_ROWS
        for r in range(first, min(stop, first + SCAN_BLOCK_ROWS)):
            row = words[r]
            s = np.float32(0.0)
            for k in range(d):
                s += _decoded(row[k]) * query[k]
            out[r - start] = s
