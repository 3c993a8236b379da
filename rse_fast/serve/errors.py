"""OpenAI-shaped errors: every failure the service answers is ``{"error": {"message", "type",
"param", "code"}}`` JSON with a fitting status, and never names an upstream URL or key."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from rse_fast.errors import (
    BudgetError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMDeadlineError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
    RoundFailedError,
    ServiceError,
)


def error_body(
    message: str, kind: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(exc: ServiceError) -> web.Response:
    body = error_body(exc.message, exc.kind, exc.code or str(exc.status), exc.param)
    return web.json_response(body, status=exc.status, headers=exc.headers)


def error_event(exc: ServiceError) -> bytes:
    """The SSE event that ends a stream whose headers are already sent."""
    return sse_event(error_body(exc.message, exc.kind, exc.code or str(exc.status), exc.param))


def sse_event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def timed_out() -> ServiceError:
    return ServiceError(504, "request timed out", "timeout", code="timeout")


def failure(exc: BaseException) -> ServiceError:
    """What the service answers for a failure of the work behind a request."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, RoundFailedError):
        cause = exc.cause
        if isinstance(cause, LLMError):
            return upstream_error(cause)
        return ServiceError(502, "every call of a round failed", "upstream_error")
    if isinstance(exc, LLMError):
        return upstream_error(exc)
    if isinstance(exc, BudgetError):
        return ServiceError(400, f"budget: {exc}", "invalid_request_error", param="budget")
    if isinstance(exc, (TimeoutError, LLMTimeoutError)):
        return timed_out()
    return ServiceError(500, "internal error", "server_error")


def upstream_error(exc: LLMError) -> ServiceError:
    """An upstream failure as the service answers it: status, type and a message that names
    what went wrong but no upstream URL or key."""
    if isinstance(exc, LLMDeadlineError):
        return timed_out()
    if isinstance(exc, LLMRateLimitError):
        headers = {"Retry-After": str(max(1, int(exc.retry_after or 1)))}
        return ServiceError(429, "upstream rate limited", "rate_limit_error", headers)
    if isinstance(exc, LLMTimeoutError):
        return ServiceError(504, "upstream timed out", "upstream_timeout", code="upstream_timeout")
    if isinstance(exc, LLMBadRequestError) and exc.status in (401, 403):
        return ServiceError(
            502, "the upstream refused the service's credentials", "upstream_error",
            code="upstream_auth",
        )  # fmt: skip
    if isinstance(exc, LLMBadRequestError) and exc.status is not None:
        detail = upstream_message(exc.response_body)
        return ServiceError(
            exc.status, f"upstream rejected the request: {detail}", "invalid_request_error",
            code=str(exc.status), param=upstream_param(exc.response_body),
        )  # fmt: skip
    if isinstance(exc, LLMConnectionError):
        return ServiceError(
            502, "upstream unreachable", "upstream_error", code="upstream_unreachable"
        )
    if isinstance(exc, LLMResponseError):
        return ServiceError(
            502, "upstream sent a malformed reply", "upstream_error", code="bad_upstream_reply"
        )
    status = f" (status {exc.status})" if exc.status else ""
    return ServiceError(502, f"upstream error{status}", "upstream_error", code="upstream_error")


def upstream_error_object(body: str | None) -> dict[str, Any]:
    try:
        err = json.loads(body or "").get("error")
    except (ValueError, AttributeError, RecursionError):
        return {}
    return err if isinstance(err, dict) else {}


def upstream_message(body: str | None) -> str:
    message = upstream_error_object(body).get("message")
    return str(message) if message else (body or "").strip()[:300] or "no detail"


def upstream_param(body: str | None) -> str | None:
    param = upstream_error_object(body).get("param")
    return param if isinstance(param, str) else None
