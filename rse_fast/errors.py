"""The project's typed exceptions, in one place so callers can catch by family."""

from __future__ import annotations


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
    """An LLM call ended without a result. Carries the endpoint, HTTP status and a body excerpt."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        status: int | None = None,
        body: str | None = None,
        attempts: int = 1,
    ) -> None:
        self.endpoint = endpoint
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


class LLMResponseError(LLMError):
    """The server answered 2xx but the body was truncated, not JSON, or not a chat completion."""

    retryable = True


class LLMHTTPError(LLMError):
    """The server answered with an error status."""


class LLMRateLimitError(LLMHTTPError):
    """429: the server asked us to slow down (``retry_after`` seconds, when it said)."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class LLMServerError(LLMHTTPError):
    """5xx, 408 or 409: a transient server-side failure."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class LLMBadRequestError(LLMHTTPError):
    """Another 4xx (bad request, auth, not found): retrying would not help."""


def http_error(status: int, body: str, endpoint: str, retry_after: float | None) -> LLMError:
    """The typed error for an HTTP error status (retry rules: see ``retry.py``)."""
    from rse_fast.retry import is_retryable_status

    if status == 429:
        return LLMRateLimitError(
            "rate limited", retry_after=retry_after, endpoint=endpoint, status=status, body=body
        )
    if is_retryable_status(status):
        return LLMServerError(
            "server error", retry_after=retry_after, endpoint=endpoint, status=status, body=body
        )
    return LLMBadRequestError("request rejected", endpoint=endpoint, status=status, body=body)
