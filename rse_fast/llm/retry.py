"""Retry policy: exponential backoff with full jitter, honouring Retry-After."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

from rse_fast.errors import LLMBadRequestError, LLMError, LLMRateLimitError, LLMServerError

#: Statuses worth retrying: request timeout, conflict, rate limit, and every 5xx.
RETRY_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Wait before attempt ``attempt + 1`` (attempt counts from 1)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return random.uniform(0, cap)


def http_error(status: int, body: str, endpoint: str, retry_after: float | None) -> LLMError:
    """The typed error for an HTTP error status: 429 and transient statuses are retryable."""
    cls: type[LLMError] = LLMBadRequestError
    message = "request rejected"
    if status == 429:
        cls, message = LLMRateLimitError, "rate limited"
    elif is_retryable_status(status):
        cls, message = LLMServerError, "server error"
    error = cls(message, endpoint=endpoint, status=status, body=body, retry_after=retry_after)
    error.response_body = body
    return error
