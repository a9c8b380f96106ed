"""OpenAIModel: the Model contract on any OpenAI-compatible chat completions endpoint.

Retrying is ours, not the SDK's (the SDK client is built with `max_retries=0`): a rate
limit, a 5xx, a timeout or a dropped connection is retried with bounded exponential
backoff, but only while nothing has been streamed to the caller yet. Once text has been
yielded, a retry would repeat it, so the failure is raised as `TransientModelError` and the
caller (a job) decides. A refused request (any other 4xx) raises `ModelError` at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import openai
from openai import AsyncOpenAI

from runs.core.attachments import openai_content
from runs.core.errors import ModelError, TransientModelError
from runs.core.llm.base import FinalResponseBuilder, ModelInfo, ModelRequest, ModelResponse, ToolChoice, ToolSpec
from runs.core.llm.catalog import context_window_for
from runs.core.output import OutputSpec
from sessions_app.core.events import Message, ToolCall, Usage

logger = logging.getLogger(__name__)

RequestFilter = Callable[[ModelRequest], ModelRequest]
"""Rewrites every request before it goes upstream (the demo's redactor: runs.core.callbacks)."""

# Stands in for a missing key: local OpenAI-compatible servers need none, and an absent key
# must not make the SDK read OPENAI_API_KEY behind the settings' back (only `agentsite/`
# reads the environment). A real endpoint answers it with a 401, which names the problem.
_NO_API_KEY = "no-api-key"

# Statuses worth another attempt: rate limit, request timeout, and every server error.
_RETRYABLE_STATUSES = frozenset({408, 429})

# In-stream error events (no HTTP status) whose `type` says the server, not the request, failed.
_RETRYABLE_STREAM_ERROR_TYPES = frozenset({"server_error", "overloaded_error", "rate_limit_error", "timeout"})

# Reasoning models refuse `max_tokens` and want `max_completion_tokens` instead.
_MAX_COMPLETION_TOKENS_PREFIXES = ("o1", "o3", "o4", "gpt-5")


class OpenAIModel:
    """A chat model served by an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, DeepSeek...).

    `context_window` overrides the catalog (see `runs.core.llm.catalog`). `client` may be
    injected (tests, shared connection pools); otherwise one is built from `base_url` and
    `api_key`, and `aclose()` closes it.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        context_window: int | None = None,
        timeout_s: float = 120,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8,
        client: AsyncOpenAI | None = None,
        request_filters: Sequence[RequestFilter] = (),
        structured_output: bool = True,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.model = model
        self.base_url = base_url
        self.context_window = context_window
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s: float = backoff_max_s
        # Applied to every request this model sends, whoever built it (an agent step, a
        # summary, a memory extraction): the one place that sees all upstream traffic.
        self.request_filters = tuple(request_filters)
        # Whether the endpoint takes `response_format`; without it the schema goes as words.
        self.structured_output = structured_output
        self._owns_client = client is None
        self._client = client or AsyncOpenAI(
            api_key=api_key or _NO_API_KEY,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"OpenAIModel(model={self.model!r}, base_url={self.base_url!r})"

    def info(self) -> ModelInfo:
        """Name and context window (catalog, or the override given at construction)."""
        return ModelInfo(
            name=self.model,
            context_window=context_window_for(self.model, self.context_window),
            provider="openai",
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this model built it; an injected client is left open."""
        if self._owns_client:
            await self._client.close()

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        """Stream the response: partial text deltas (when streaming), then one final response.

        Raises `ModelError` when the endpoint refuses the request or answers without any
        choice, and `TransientModelError` when a transient failure outlives the retries or
        breaks a stream that had already yielded text.
        """
        for request_filter in self.request_filters:
            request = request_filter(request)
        params = self._request_params(request)
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            stream = self._stream_attempt(params) if request.stream else self._complete_attempt(params)
            streamed = False
            failure: openai.APIError | None = None
            try:
                while True:
                    # Only the call into the SDK is guarded: an exception the consumer throws in
                    # at the `yield` below must not be mistaken for a failed attempt.
                    try:
                        response = await anext(stream)
                    except StopAsyncIteration:
                        return
                    except json.JSONDecodeError as exc:
                        raise ModelError(f"model {self.model!r} answered invalid JSON: {exc}") from exc
                    except openai.APIError as exc:
                        if not _is_retryable(exc):
                            raise self._refused(exc) from exc
                        failure = exc
                        break
                    streamed = streamed or response.partial
                    yield response
            finally:
                await stream.aclose()

            assert failure is not None  # the loop above only falls through on a retryable failure
            if streamed:
                raise TransientModelError(
                    f"stream from model {self.model!r} broke after text was streamed: {_describe(failure)}",
                    status_code=_status_of(failure),
                    code=failure.code,
                ) from failure
            if attempt == attempts:
                raise TransientModelError(
                    f"model {self.model!r} failed after {attempts} attempt(s): {_describe(failure)}",
                    status_code=_status_of(failure),
                    code=failure.code,
                ) from failure
            delay = self._backoff_delay(attempt, failure)
            logger.info(
                "model %r attempt %d/%d failed (%s); retrying in %.2fs",
                self.model,
                attempt,
                attempts,
                _describe(failure),
                delay,
            )
            await asyncio.sleep(delay)

    # -- one attempt ----------------------------------------------------------------------

    async def _stream_attempt(self, params: Mapping[str, Any]) -> AsyncGenerator[ModelResponse, None]:
        stream = await self._client.chat.completions.create(
            **params,
            stream=True,
            stream_options={"include_usage": True},
            timeout=self.timeout_s,
        )
        builder = FinalResponseBuilder()
        response_id = ""
        model_name: str | None = None
        finish_reason: str | None = None
        usage: Usage | None = None
        saw_choice = False
        try:
            async for chunk in stream:
                response_id = chunk.id or response_id
                model_name = chunk.model or model_name
                if chunk.usage is not None:
                    # With include_usage the last chunk carries the usage and no choices.
                    usage = Usage(
                        prompt_tokens=chunk.usage.prompt_tokens or 0,
                        completion_tokens=chunk.usage.completion_tokens or 0,
                    )
                for choice in chunk.choices or ():
                    if choice.index != 0:
                        continue  # n is never set above 1; ignore anything else a server sends
                    saw_choice = True
                    delta = choice.delta
                    # A refusal is the model's answer in another field: show it as the text.
                    text = (delta.content or "") + (delta.refusal or "") if delta is not None else ""
                    if text:
                        builder.add_text(text)
                        yield ModelResponse(id=response_id, partial=True, delta=text, model=model_name or self.model)
                    for call in (delta.tool_calls if delta is not None else None) or ():
                        function = call.function
                        builder.add_tool_call_fragment(
                            call.index,
                            id=call.id,
                            name=function.name if function is not None else None,
                            arguments=function.arguments if function is not None else None,
                        )
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        finally:
            await stream.close()
        if not saw_choice:
            raise ModelError(f"stream from model {self.model!r} ended without any choice")
        message = builder.message()
        yield ModelResponse(
            id=response_id,
            partial=False,
            message=message,
            finish_reason=_finish_reason(finish_reason, message),
            usage=usage,
            model=model_name or self.model,
        )

    async def _complete_attempt(self, params: Mapping[str, Any]) -> AsyncGenerator[ModelResponse, None]:
        completion = await self._client.chat.completions.create(**params, stream=False, timeout=self.timeout_s)
        choice = next((c for c in completion.choices or () if c.index == 0), None)
        if choice is None:
            raise ModelError(f"model {self.model!r} answered without any choice")
        answer = choice.message
        calls = tuple(
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
            for call in answer.tool_calls or ()
            if call.type == "function"
        )
        message = Message(role="assistant", content=(answer.content or "") + (answer.refusal or ""), tool_calls=calls)
        usage = (
            Usage(
                prompt_tokens=completion.usage.prompt_tokens or 0,
                completion_tokens=completion.usage.completion_tokens or 0,
            )
            if completion.usage is not None
            else None
        )
        yield ModelResponse(
            id=completion.id,
            partial=False,
            message=message,
            finish_reason=_finish_reason(choice.finish_reason, message),
            usage=usage,
            model=completion.model or self.model,
        )

    # -- request building -----------------------------------------------------------------

    def _request_params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [to_openai_message(message) for message in request.messages],
        }
        if request.tools:
            params["tools"] = [to_openai_tool(tool) for tool in request.tools]
            if request.tool_choice is not None:  # only beside tools: OpenAI refuses it alone
                params["tool_choice"] = to_openai_tool_choice(request.tool_choice)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_tokens is not None:
            key = "max_completion_tokens" if self.model.startswith(_MAX_COMPLETION_TOKENS_PREFIXES) else "max_tokens"
            params[key] = request.max_tokens
        if request.output is not None:
            if self.structured_output:
                params["response_format"] = to_openai_response_format(request.output)
            else:
                params["messages"].append({"role": "system", "content": request.output.instruction()})
        return params

    # -- failures -------------------------------------------------------------------------

    def _refused(self, exc: openai.APIError) -> ModelError:
        status = _status_of(exc)
        where = f"HTTP {status}" if status is not None else "in the stream"
        return ModelError(
            f"model {self.model!r} refused the request ({where}): {_server_message(exc)}",
            status_code=status,
            code=exc.code,
        )

    def _backoff_delay(self, attempt: int, failure: openai.APIError) -> float:
        """Seconds to wait before attempt `attempt + 1`: Retry-After if sent, else jittered backoff."""
        retry_after = _retry_after_s(failure)
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempt - 1))
        # Jitter keeps many runs that failed together from retrying in lockstep.
        return ceiling * random.uniform(0.5, 1.0)


# -- conversions (public: the request tests and other providers reuse them) ---------------


def to_openai_message(message: Message) -> dict[str, Any]:
    """One chat message in the OpenAI chat completions wire format."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # null, not "", beside tool calls: some compatible servers reject empty content.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": openai_content(message)}


def to_openai_tool(tool: ToolSpec) -> dict[str, Any]:
    """One tool in the OpenAI `tools` wire format."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)},
    }


def to_openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """A tool choice in the OpenAI wire format (issue 20)."""
    if choice.mode == "function":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def to_openai_response_format(output: OutputSpec) -> dict[str, Any]:
    """An output spec as OpenAI's `response_format` (`json_object`, or `json_schema` with `strict`)."""
    if output.kind == "json_object" or output.schema is None:
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": output.name, "schema": dict(output.schema), "strict": output.strict},
    }


def _finish_reason(reported: str | None, message: Message) -> str:
    # Some compatible servers (Ollama) report "stop" beside tool calls; the runner keys on
    # "tool_calls", so the message's content decides when the server's word is vague.
    if message.tool_calls and reported in (None, "stop"):
        return "tool_calls"
    return reported or "stop"


def _is_retryable(exc: openai.APIError) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # also APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in _RETRYABLE_STATUSES
    if isinstance(exc, openai.APIResponseValidationError):
        return False
    # An error event inside a stream: its type says whether the server or the request failed.
    return exc.type in _RETRYABLE_STREAM_ERROR_TYPES


def _status_of(exc: openai.APIError) -> int | None:
    return exc.status_code if isinstance(exc, openai.APIStatusError | openai.APIResponseValidationError) else None


def _server_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body:
        return body
    return exc.message


def _describe(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection error ({cause})" if cause is not None else "connection error"
    status = _status_of(exc)
    prefix = f"HTTP {status}" if status is not None else "stream error"
    return f"{prefix} ({_server_message(exc)})"


def _retry_after_s(exc: openai.APIError) -> float | None:
    """The server's requested wait, from `retry-after-ms` or `Retry-After` (seconds or a date)."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


__all__ = [
    "OpenAIModel",
    "RequestFilter",
    "to_openai_message",
    "to_openai_response_format",
    "to_openai_tool",
    "to_openai_tool_choice",
]
