"""Test fixtures shipped with the package (a scripted OpenAI-compatible server); never a
product model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "ScriptedServer": "rse_fast.testing.server",
    "Reply": "rse_fast.testing.script",
    "Rule": "rse_fast.testing.script",
    "Fault": "rse_fast.testing.script",
    "fault_mix": "rse_fast.testing.script",
}
__all__ = ["Fault", "Reply", "Rule", "ScriptedServer", "fault_mix"]

if TYPE_CHECKING:
    from rse_fast.testing.script import Fault, Reply, Rule, fault_mix
    from rse_fast.testing.server import ScriptedServer

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
