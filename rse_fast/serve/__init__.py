"""The OpenAI-compatible service: the aiohttp app, method requests, Prometheus metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.lazy import attach

_LAZY = {
    "Service": "rse_fast.serve.app",
    "ServeConfig": "rse_fast.serve.app",
    "serve": "rse_fast.serve.app",
    "MethodRequest": "rse_fast.serve.requests",
    "parse_method_request": "rse_fast.serve.requests",
    "Metrics": "rse_fast.serve.metrics",
}
__all__ = ["MethodRequest", "Metrics", "ServeConfig", "Service", "parse_method_request", "serve"]

if TYPE_CHECKING:
    from rse_fast.serve.app import ServeConfig, Service, serve
    from rse_fast.serve.metrics import Metrics
    from rse_fast.serve.requests import MethodRequest, parse_method_request

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
