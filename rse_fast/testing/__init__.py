"""Test fixtures shipped with the package (a scripted OpenAI-compatible server)."""

from rse_fast.testing.server import Fault, Rule, ScriptedServer, fault_mix

__all__ = ["Fault", "Rule", "ScriptedServer", "fault_mix"]
