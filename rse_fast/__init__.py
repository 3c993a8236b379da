"""rse_fast: fast test-time scaling for LLMs, built around Recycling Search Experience (RSE)."""

from __future__ import annotations

__version__ = "0.1.0"
