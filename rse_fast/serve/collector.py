"""How a serving process sets CPython's cyclic garbage collector, so collections stay short.

A proxy keeps ~100 container objects alive per request in flight (coroutines, futures, aiohttp
request and response objects). CPython 3.11 counts a young collection due when allocations
exceed deallocations by the threshold (700), and *any* deallocation counts, old objects' too.
Under steady load the requests finishing offset those arriving, so the count wanders and the
young generation fills with whole waves of in-flight requests before it is collected: pauses
of 5-20 ms, a few per second, measured in ``bench/serve.py``'s proxies. Freezing the heap built
at start-up (imports, numba, compiled kernels) and raising the young threshold leaves
reference counting to free the requests, as it does, and the collector to run rarely, over a
bounded set: what cyclic garbage there is still triggers it every ``young_threshold`` objects.

The service's own process (``rse-fast serve``) applies this; an application embedding
``Service`` in its own process decides for itself (it may call :func:`settle_collector`).
"""

from __future__ import annotations

import gc

#: net container allocations between young collections (CPython's default is 700)
YOUNG_THRESHOLD = 20_000


def settle_collector(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Freeze every object alive now out of the collector's reach, and set the young
    generation's threshold (the older generations keep CPython's defaults)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
