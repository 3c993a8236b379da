"""rse_fast: fast test-time scaling for LLMs, built around Recycling Search Experience (RSE).

The public API, loaded lazily (``import rse_fast`` costs milliseconds; numpy, aiohttp and
onnxruntime load when a name that needs them is first used)::

    from rse_fast import RSE, RSEConfig, LLMClient

    async with LLMClient("http://127.0.0.1:8000/v1", "my-model") as client:
        result = await RSE(client, config=RSEConfig(rounds=3, k=8)).solve("What is 17 * 23?")
        print(result.answer, result.accuracy_per_round)

Subpackages: ``llm`` (client, transport, ledger), ``rse`` (engine, bank, index), ``methods``
(the TTS families), ``eval`` (compute-normalised evaluation), ``serve`` (OpenAI-compatible
service), ``local`` (embedded llama-server), ``testing`` (a scripted server for tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rse_fast.errors import (
    BuildError,
    CheckerError,
    IntegrityError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMDeadlineError,
    LLMError,
    LLMHTTPError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
    LocalServerError,
    ModelNotFoundError,
    RequestError,
    RoundFailedError,
    RSEFastError,
    ServiceError,
    UnknownOptionError,
)
from rse_fast.util.lazy import attach

__version__ = "0.1.0"

_LAZY = {
    "RSE": "rse_fast.rse.engine",
    "RSEConfig": "rse_fast.rse.config",
    "RSEResult": "rse_fast.rse.results",
    "RoundResult": "rse_fast.rse.results",
    "Progress": "rse_fast.rse.results",
    "ExperienceBank": "rse_fast.rse.bank",
    "Experience": "rse_fast.rse.bank",
    "Decision": "rse_fast.rse.bank",
    "SimilarityIndex": "rse_fast.rse.index",
    "LLMClient": "rse_fast.llm.client",
    "ChatResult": "rse_fast.llm.types",
    "Choice": "rse_fast.llm.types",
    "StreamEvent": "rse_fast.llm.types",
    "Usage": "rse_fast.llm.types",
    "Endpoint": "rse_fast.llm.routing",
    "Ledger": "rse_fast.llm.ledger",
    "RetryPolicy": "rse_fast.llm.retry",
    "Timeouts": "rse_fast.llm.transport",
    "Encoder": "rse_fast.encoder",
    "make_method": "rse_fast.methods.catalog",
    "Method": "rse_fast.methods.base",
    "MethodResult": "rse_fast.methods.base",
    "Problem": "rse_fast.methods.base",
    "Candidate": "rse_fast.methods.base",
}

__all__ = [
    "RSE",
    "BuildError",
    "Candidate",
    "ChatResult",
    "CheckerError",
    "Choice",
    "Decision",
    "Encoder",
    "Endpoint",
    "Experience",
    "ExperienceBank",
    "IntegrityError",
    "LLMBadRequestError",
    "LLMClient",
    "LLMConnectionError",
    "LLMDeadlineError",
    "LLMError",
    "LLMHTTPError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMServerError",
    "LLMTimeoutError",
    "Ledger",
    "LocalServerError",
    "Method",
    "MethodResult",
    "ModelNotFoundError",
    "Problem",
    "Progress",
    "RSEConfig",
    "RSEFastError",
    "RSEResult",
    "RequestError",
    "RetryPolicy",
    "RoundFailedError",
    "RoundResult",
    "ServiceError",
    "SimilarityIndex",
    "StreamEvent",
    "Timeouts",
    "UnknownOptionError",
    "Usage",
    "__version__",
    "make_method",
]

if TYPE_CHECKING:
    from rse_fast.encoder import Encoder
    from rse_fast.llm.client import LLMClient
    from rse_fast.llm.ledger import Ledger
    from rse_fast.llm.retry import RetryPolicy
    from rse_fast.llm.routing import Endpoint
    from rse_fast.llm.transport import Timeouts
    from rse_fast.llm.types import ChatResult, Choice, StreamEvent, Usage
    from rse_fast.methods.base import Method
    from rse_fast.methods.catalog import make_method
    from rse_fast.methods.types import Candidate, MethodResult, Problem
    from rse_fast.rse.bank import Decision, Experience, ExperienceBank
    from rse_fast.rse.config import RSEConfig
    from rse_fast.rse.engine import RSE
    from rse_fast.rse.index import SimilarityIndex
    from rse_fast.rse.results import Progress, RoundResult, RSEResult

__getattr__, __dir__ = attach(__name__, _LAZY, globals())
