"""Thread policy: BLAS and Numba each get the cores, one at a time, never both at once.

The kernel's phases run one after another (BLAS GEMM tiles, then the serial Numba walk; or the
parallel Numba scan alone), so each phase may use every core without oversubscription. Callers
that run kernels from several threads at once should give each a share with ``set_threads``.
"""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on (affinity-aware, unlike ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def set_threads(n: int | None = None) -> int:
    """Cap BLAS and Numba thread pools at ``n`` (default: available cores); returns the cap."""
    import numba
    from threadpoolctl import threadpool_limits

    cores = available_cores()
    n = cores if n is None else max(1, min(int(n), cores))
    threadpool_limits(limits=n, user_api="blas")
    numba.set_num_threads(min(n, int(numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    return n
