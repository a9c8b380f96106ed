"""OpenAI-compatible `/v1`, streamed (runs.surfaces.openai_compat): `chat.completion.chunk`
server-sent events, the role first, then the text as it comes, through tool rounds to the run's
final answer, then the client's tool calls or `finish_reason`, the usage chunk when asked, and
`data: [DONE]`."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from django.http import StreamingHttpResponse

from runs.core.records import RunRecord
from runs.core.tools.client import (
    client_calls,
)
from runs.surfaces.openai_answers import _ANSWERED, PART_SEPARATOR, _usage, _wire_calls, answer_part, run_failure
from runs.surfaces.openai_request import ChatRequest
from sessions_app.core.events import OBJECT_CHUNK, Event, ToolCall


def _chunk(
    run_id: str,
    agent: str,
    created: int,
    delta: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> str:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{run_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": agent,
        "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def event_stream(chunks: AsyncIterator[str], headers: dict[str, str]) -> StreamingHttpResponse:
    """Server-sent events (`chunks`, each a whole event) as the response, never cached."""
    response = StreamingHttpResponse(chunks, content_type="text/event-stream", headers=headers)
    response["Cache-Control"] = "no-cache"
    return response


async def _stream(
    manager: Any,
    record: RunRecord,
    chat: ChatRequest,
    events: AsyncIterator[Event],
    remember: Callable[[str, Sequence[ToolCall]], Awaitable[None]],
) -> AsyncIterator[str]:
    created = int(time.time())
    sent: list[str] = []  # the content as the client receives it, for `remember`
    yield _chunk(record.id, chat.agent, created, {"role": "assistant", "content": ""})
    streamed: set[str] = set()
    current: str | None = None  # the message whose text was sent last
    calls: list[ToolCall] = []
    async for event in events:
        if event.message is not None and event.message.role == "assistant" and not event.partial:
            calls = client_calls(event)  # the last step's, when it waits for the client
        if chat.final_only:
            continue  # the answer is sent whole once the run has ended
        message_id = str(event.extensions.get("message_id", event.id))
        text = None
        if event.object == OBJECT_CHUNK and event.text:
            streamed.add(message_id)
            text = event.text
        elif message_id not in streamed and (part := answer_part(event)) is not None:
            # A model that does not stream still shows its text, once, as one chunk.
            text = part
        if text is None:
            continue
        if current is not None and message_id != current:
            text = PART_SEPARATOR + text  # as answer_text joins the parts
        current = message_id
        sent.append(text)
        yield _chunk(record.id, chat.agent, created, {"content": text})
    final = await manager.await_run(record.id, 5.0) or record
    if final.status == "completed" and chat.final_only and final.answer:
        sent.append(final.answer)
        yield _chunk(record.id, chat.agent, created, {"content": final.answer})
    if final.status in _ANSWERED:
        await remember("".join(sent), calls)
    for line in _stream_end(final, chat, created, calls):
        yield line


async def _stream_done(
    record: RunRecord, chat: ChatRequest, content: str, calls: Sequence[ToolCall] = ()
) -> AsyncIterator[str]:
    """A run that already ended, as a stream: its whole content in one chunk."""
    created = int(time.time())
    yield _chunk(record.id, chat.agent, created, {"role": "assistant", "content": ""})
    if content:
        yield _chunk(record.id, chat.agent, created, {"content": content})
    for line in _stream_end(record, chat, created, calls):
        yield line


def _stream_end(record: RunRecord, chat: ChatRequest, created: int, calls: Sequence[ToolCall] = ()) -> list[str]:
    """The client's tool calls (one chunk, each call whole) and `finish_reason: tool_calls`
    when the run waits for them, else the finish chunk; then (when the client asked for it)
    the usage chunk with no choices, as OpenAI sends them, and `[DONE]`; an error event
    instead for a failed run."""
    if record.status in _ANSWERED and calls:
        wire = [{"index": i, **call} for i, call in enumerate(_wire_calls(calls))]
        lines = [
            _chunk(record.id, chat.agent, created, {"tool_calls": wire}),
            _chunk(record.id, chat.agent, created, {}, finish="tool_calls"),
        ]
        if chat.include_usage:
            lines.append(_chunk(record.id, chat.agent, created, {}, usage=_usage(record)))
    elif record.status == "completed":
        lines = [_chunk(record.id, chat.agent, created, {}, finish="stop")]
        if chat.include_usage:
            lines.append(_chunk(record.id, chat.agent, created, {}, usage=_usage(record)))
    else:
        failure = run_failure(record)
        error = {"message": failure.message, "type": failure.type, "code": failure.code}
        lines = [f"data: {json.dumps({'error': error})}\n\n"]
    return [*lines, "data: [DONE]\n\n"]
