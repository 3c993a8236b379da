"""The OpenAI-compatible service: the aiohttp app (routes), errors, auth and limits, the body
check, pass-through, method requests, workers, Prometheus metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "Service": "rse_fast.serve.app",
    "ServeConfig": "rse_fast.serve.app",
    "serve": "rse_fast.serve.workers",
    "MethodRequest": "rse_fast.serve.requests",
    "parse_method_request": "rse_fast.serve.requests",
    "Metrics": "rse_fast.serve.metrics",
}
__all__ = ["MethodRequest", "Metrics", "ServeConfig", "Service", "parse_method_request", "serve"]

if TYPE_CHECKING:
    from rse_fast.serve.app import ServeConfig, Service
    from rse_fast.serve.metrics import Metrics
    from rse_fast.serve.requests import MethodRequest, parse_method_request
    from rse_fast.serve.workers import serve

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
