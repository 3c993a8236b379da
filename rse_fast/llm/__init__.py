"""The LLM layer: an async OpenAI-compatible client over one transport (pooling, timeouts,
retries, routing), SSE parsing, chat types, retry policy, token ledger, JSONL trace.
It knows nothing of RSE or the TTS methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.util.lazy import attach

_LAZY = {
    "LLMClient": "rse_fast.llm.client",
    "Transport": "rse_fast.llm.transport",
    "Timeouts": "rse_fast.llm.transport",
    "ChatResult": "rse_fast.llm.types",
    "Choice": "rse_fast.llm.types",
    "StreamEvent": "rse_fast.llm.types",
    "Usage": "rse_fast.llm.types",
    "Message": "rse_fast.llm.types",
    "Endpoint": "rse_fast.llm.routing",
    "EndpointPool": "rse_fast.llm.routing",
    "RetryPolicy": "rse_fast.llm.retry",
    "Ledger": "rse_fast.llm.ledger",
    "CallRecord": "rse_fast.llm.ledger",
    "JsonlTrace": "rse_fast.llm.trace",
}
__all__ = [
    "CallRecord",
    "ChatResult",
    "Choice",
    "Endpoint",
    "EndpointPool",
    "JsonlTrace",
    "LLMClient",
    "Ledger",
    "Message",
    "RetryPolicy",
    "StreamEvent",
    "Timeouts",
    "Transport",
    "Usage",
]

if TYPE_CHECKING:
    from rse_fast.llm.client import LLMClient
    from rse_fast.llm.ledger import CallRecord, Ledger
    from rse_fast.llm.retry import RetryPolicy
    from rse_fast.llm.routing import Endpoint, EndpointPool
    from rse_fast.llm.trace import JsonlTrace
    from rse_fast.llm.transport import Timeouts, Transport
    from rse_fast.llm.types import ChatResult, Choice, Message, StreamEvent, Usage

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
