"""Every exception rse_fast raises on purpose, all under :class:`RSEFastError`.

Callers catch by family: ``LLMError`` for a call that ended without a result, ``ValueError``
subclasses for bad input, ``ServiceError`` for what the service answers as an HTTP error.
This module imports nothing of the project, so every layer can use it.
"""

from __future__ import annotations

import json
import re


class RSEFastError(Exception):
    """Base class of every error raised on purpose by rse_fast."""


class ModelNotFoundError(RSEFastError, FileNotFoundError):
    """A model file is missing; the message says what to install or where to put it."""


class IntegrityError(RSEFastError, ValueError):
    """A file's size or sha256 does not match its manifest."""


class RoundFailedError(RSEFastError, RuntimeError):
    """Every call of an RSE round failed; the last checkpoint is intact. ``cause`` is the first
    rollout's error."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class LLMError(RSEFastError):
    """An LLM call ended without a result. Carries the endpoint, HTTP status, a body excerpt,
    the attempts made and, when the server said, how long to wait (``retry_after``, seconds)."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        status: int | None = None,
        body: str | None = None,
        attempts: int = 1,
        retry_after: float | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.retry_after = retry_after
        self.response_body: str | None = None  # an error response's whole body, when any
        self.status = status
        self.body = body[:500] if body else body
        self.attempts = attempts
        parts = [message]
        if status is not None:
            parts.append(f"status {status}")
        if endpoint:
            parts.append(f"endpoint {endpoint}")
        if attempts > 1:
            parts.append(f"after {attempts} attempts")
        if self.body:
            parts.append(f"body: {self.body[:200]!r}")
        super().__init__("; ".join(parts))


class LLMConnectionError(LLMError):
    """Could not connect, or the connection broke before a complete response."""

    retryable = True


class LLMTimeoutError(LLMError):
    """The server did not answer (or went idle mid-stream) within the configured timeout."""

    retryable = True


class BudgetError(RSEFastError):
    """The budget, not the server: a call refused by a cap, or a budget too small to start.
    Its own family, so no caller mistakes a refusal for a failed call."""


class BudgetExhaustedError(BudgetError):
    """A call was not sent: what is left of a ``cap`` budget cannot hold its prompt and a
    useful completion. Not a failure of the server: the method stops and answers from what
    finished."""


class BudgetTooSmallError(BudgetError, ValueError):
    """A budget below the cost of one useful call; ``minimum`` is that cost (in tokens, or
    in the budget's unit)."""

    def __init__(self, budget: float, minimum: float, what: str, unit: str = "tokens") -> None:
        self.budget, self.minimum = budget, minimum
        amount = f"{budget} tokens" if unit == "tokens" else f"{budget:.6g} {unit}"
        least = f"{minimum}" if unit == "tokens" else f"{minimum:.6g} {unit}"
        super().__init__(f"a budget of {amount} cannot pay for {what}: the minimum is {least}")


class BudgetUnitError(BudgetError, ValueError):
    """A budget in a unit this run cannot turn into calls (time, before any call through the
    client has shown how fast its server is)."""


class CostModelError(RSEFastError, ValueError):
    """A cost unit or price that cannot be read (unknown unit, a negative or missing price, a
    setting given twice); the message names it and shows the form that works."""


class LLMDeadlineError(LLMTimeoutError):
    """The caller's own deadline for the whole call (every attempt and wait) passed."""

    retryable = False


class LLMResponseError(LLMError):
    """The server answered 2xx but the body was truncated, not JSON, or not a chat completion."""

    retryable = True


class LLMHTTPError(LLMError):
    """The server answered with an error status."""


class LLMRateLimitError(LLMHTTPError):
    """429: the server asked us to slow down (``retry_after`` seconds, when it said)."""

    retryable = True


class LLMServerError(LLMHTTPError):
    """5xx, 408 or 409: a transient server-side failure."""

    retryable = True


class LLMBadRequestError(LLMHTTPError):
    """Another 4xx (bad request, auth, not found): retrying would not help."""

    def concerns(self, *fields: str) -> bool:
        """Whether the server's error is about one of these request fields: its OpenAI-style
        ``param`` names one, or its message names one as a word (``'n' must be 1``)."""
        text = self.body or ""
        try:
            error = json.loads(text).get("error")
        except (ValueError, AttributeError, RecursionError):
            error = None
        if isinstance(error, dict):
            if error.get("param") in fields:
                return True
            text = str(error.get("message") or "")
        return any(re.search(rf"(?<![\w.-]){re.escape(f)}(?![\w-])", text) for f in fields)


class UnknownOptionError(RSEFastError, ValueError, TypeError):
    """An option name a method or a configuration does not know; the message lists the valid
    ones. A ``TypeError`` too, as Python raises for an unexpected keyword argument."""

    def __init__(self, owner: str, unknown: list[str], valid: list[str]) -> None:
        self.owner, self.unknown, self.valid = owner, unknown, valid
        names = ", ".join(repr(u) for u in unknown)
        super().__init__(f"{owner}: unknown option {names}; valid options: {', '.join(valid)}")


class BuildError(RSEFastError, RuntimeError):
    """The toolchain is missing or the llama-server build failed; the message says what to do."""


class LocalServerError(RSEFastError, RuntimeError):
    """llama-server is missing, exited, or did not become healthy in time."""


class SandboxUnavailableError(RSEFastError, RuntimeError):
    """Untrusted code was to run, and this machine offers no process isolation for it (and
    the caller did not accept a weaker sandbox)."""


class CheckerError(RSEFastError, RuntimeError):
    """A task's experience checker failed on a statement or a rollout; the message names the
    checker, what it raised and on what (the original is its ``__cause__``). The round's other
    rollouts are cancelled, and a checkpointed run resumes from its last finished round."""


class InsecureServiceError(RSEFastError, ValueError):
    """The service was asked to run in a way that exposes it (e.g. no keys on a public
    address) without the operator's explicit consent."""


class ServiceError(RSEFastError):
    """An error the OpenAI-compatible service answers as ``{"error": {...}}`` with a status.

    ``kind`` is the OpenAI error ``type``; ``code`` a short string or None; ``param`` the
    request field at fault, when there is one.
    """

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
        *,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.headers = headers or {}
        self.code, self.param = code, param


class RequestError(ServiceError, ValueError):
    """A malformed or disallowed method request (answered 400, naming the field)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(400, message, "invalid_request_error", param=param)
