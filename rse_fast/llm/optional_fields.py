"""Request fields a server may refuse, and asking again without them: JSON-schema
constrained output (``chat_json``, ``stream_json``) and token logprobs. A refusal that names
the field is remembered per endpoint, so the next call does not ask at all."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

from rse_fast.errors import LLMBadRequestError
from rse_fast.llm.routing import EndpointPool
from rse_fast.llm.types import ChatResult, Message, StreamEvent

if TYPE_CHECKING:
    from rse_fast.llm.client import LLMClient

log = logging.getLogger("rse_fast.llm.client")

#: Request fields a server names when it cannot do structured output.
SCHEMA_FIELDS = ("response_format", "json_schema", "guided_json", "grammar")
#: What a request asks for token probabilities with; a server may refuse them with a 400 (a
#: llama.cpp build did for tools + stream + logprobs; vLLM past its ``--max-logprobs``).
LOGPROB_FIELDS = ("logprobs", "top_logprobs")


def asks_logprobs(fields: dict[str, Any]) -> bool:
    return any(fields.get(f) for f in LOGPROB_FIELDS)


def without_logprobs(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in LOGPROB_FIELDS}


def refused_logprobs(pool: EndpointPool, body: dict[str, Any], error: LLMBadRequestError) -> bool:
    """Whether ``error`` is the server refusing the logprobs ``body`` asked for; if so,
    its endpoint is remembered and asked without them from now on (its choices then
    carry no logprobs: a confidence rule falls back to the plain vote and says so)."""
    if not asks_logprobs(body) or not error.concerns(*LOGPROB_FIELDS):
        return False
    state = pool.state_of(error.endpoint) or pool.pick()
    if state.supports_logprobs is not False:  # said once, not by every call in flight
        log.warning("%s refuses logprobs; asking it without them: %s", state.url, error)
    state.supports_logprobs = False
    return True


async def chat_json(
    client: LLMClient, messages: Sequence[Message], schema: dict[str, Any], **params: Any
) -> ChatResult:
    """``chat`` with JSON-schema constrained output where the server has it.

    An endpoint that rejects ``response_format`` is remembered and asked without it
    (callers parse the reply tolerantly); any other error is raised.
    """
    state = client.pool.pick()
    if state.supports_schema is not False:
        try:
            return await client.chat(messages, response_format=schema, **params)
        except LLMBadRequestError as exc:
            if not exc.concerns(*SCHEMA_FIELDS):
                raise
            state.supports_schema = False
    return await client.chat(messages, **params)


async def stream_json(
    client: LLMClient, messages: Sequence[Message], schema: dict[str, Any], **params: Any
) -> AsyncGenerator[StreamEvent, None]:
    """``stream`` with JSON-schema constrained output where the server has it, falling
    back as ``chat_json`` does (a rejection comes before the first event, so nothing
    has been yielded when it is asked again)."""
    state = client.pool.pick()
    if state.supports_schema is not False:
        try:
            async for event in client.stream(messages, response_format=schema, **params):
                yield event
            return
        except LLMBadRequestError as exc:
            if not exc.concerns(*SCHEMA_FIELDS):
                raise
            state.supports_schema = False
    async for event in client.stream(messages, **params):
        yield event
