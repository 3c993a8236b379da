"""The project's errors as one or two lines a person can act on (what failed, what to do).

The CLI prints these instead of a traceback; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json

from rse_fast.errors import (
    BuildError,
    IntegrityError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
    LocalServerError,
    ModelNotFoundError,
    RoundFailedError,
    RSEFastError,
)

SERVER_HINT = "is the server running? set --base-url or OPENAI_BASE_URL"


def _server_message(body: str | None) -> str:
    try:
        message = json.loads(body or "")["error"]["message"]
    except (ValueError, KeyError, TypeError, RecursionError):
        message = (body or "").strip()
    return str(message)[:200] or "no detail"


def describe_llm_error(exc: LLMError) -> str:
    where = exc.endpoint or "the server"
    if isinstance(exc, LLMConnectionError):
        reason = "connection refused" if "refused" in str(exc).lower() else "connection failed"
        return f"cannot reach {where} ({reason}): {SERVER_HINT}"
    if isinstance(exc, LLMTimeoutError):
        return f"{where} did not answer in time: is it overloaded? raise the timeout or lower --k"
    if isinstance(exc, LLMRateLimitError):
        return f"{where} kept rate-limiting after {exc.attempts} attempts: lower --k or retry later"
    if isinstance(exc, LLMServerError):
        return (
            f"{where} failed with status {exc.status} after {exc.attempts} attempts: "
            "check the server's log"
        )
    if isinstance(exc, LLMResponseError):
        return f"{where} sent a reply that is not a chat completion: is it OpenAI-compatible?"
    if isinstance(exc, LLMBadRequestError):
        detail = _server_message(exc.body)
        if exc.status in (401, 403):
            return f"{where} rejected the API key ({detail}): set --api-key or OPENAI_API_KEY"
        if exc.status == 404:
            return (
                f"{where} does not know that model ({detail}): check --model "
                "(its GET /models lists the names)"
            )
        return f"{where} rejected the request with status {exc.status}: {detail}"
    return f"{where}: {exc}"


def describe(exc: BaseException) -> str:
    """One or two lines for ``exc``: the cause, then what to do."""
    if isinstance(exc, RoundFailedError):
        cause = exc.cause
        head = str(exc).split(" (first error")[0]
        if isinstance(cause, LLMError):
            return f"{head}\n{describe_llm_error(cause)}"
        return head
    if isinstance(exc, LLMError):
        return describe_llm_error(exc)
    if isinstance(exc, (ModelNotFoundError, LocalServerError, BuildError, IntegrityError)):
        return str(exc).splitlines()[0]
    if isinstance(exc, (RSEFastError, ValueError, OSError)):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"unexpected {type(exc).__name__}: {exc}; rerun with --debug for the traceback"
