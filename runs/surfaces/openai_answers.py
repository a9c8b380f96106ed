"""OpenAI-compatible `/v1`, the answer (runs.surfaces.openai_compat): a run's content, its
failure, the completion that is not streamed, and the answer of a request whose
`Idempotency-Key` repeats an earlier one's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from runs import selectors as run_selectors
from runs.core.records import REQUIRES_ACTION, RunRecord
from runs.core.tools.client import (
    client_calls,
)
from runs.surfaces.openai_request import ChatRequest, OpenAIError
from runs.surfaces.openai_runs import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    RUN_HEADER,
    SESSION_HEADER,
    Remember,
    StartedRun,
)
from sessions_app.backends import db_call
from sessions_app.core.events import Event, ToolCall

# Between the texts of two assistant messages of one answer (a step's text before its tool
# calls, then the final answer): without it they run together ("...first.The certificate...").
PART_SEPARATOR = "\n\n"
# A run that answers: it completed, or it paused for the client's tool calls (issue 20).
_ANSWERED = ("completed", REQUIRES_ACTION)


def _usage(record: RunRecord) -> dict[str, int]:
    return {
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "total_tokens": record.prompt_tokens + record.completion_tokens,
    }


def run_failure(record: RunRecord) -> OpenAIError:
    """A run that started and ended without an answer: 422, which the OpenAI SDK (and the
    frameworks built on it) does not retry. Retrying would start the run again and write the
    user turn a second time; a 5xx is kept for requests that never reached a run."""
    error = record.error or {}
    return OpenAIError(
        422,
        f"the run {record.status}: {error.get('message', 'no answer')}",
        type="run_error",
        code=str(error.get("type") or record.status),
    )


def failure_response(record: RunRecord, headers: dict[str, str]) -> JsonResponse:
    """A failed run's answer (`run_failure`), with `headers` and `x-should-retry: false`."""
    response = run_failure(record).response()
    for name, value in {**headers, "x-should-retry": "false"}.items():
        response[name] = value
    return response


def answer_part(event: Event) -> str | None:
    """The text an event adds to the answer: an assistant message's text (a model step's,
    also beside its tool calls), never a delta, an error or a tool result."""
    message = event.message
    if message is None or message.role != "assistant" or event.partial or event.is_error or not message.content:
        return None
    return message.content


def answer_text(events: Iterable[Event]) -> str:
    """The content of a completion: the text of each of the run's assistant messages, in
    order, separated by `PART_SEPARATOR` (the streamed content is the same, chunk by chunk)."""
    return PART_SEPARATOR.join(part for event in events if (part := answer_part(event)) is not None)


def waiting_calls(events: Iterable[Event]) -> list[ToolCall]:
    """The calls of the client's tools the run ended waiting for (issue 20): those of its
    last step, when that step called client tools."""
    calls: list[ToolCall] = []
    for event in events:
        if event.message is not None and event.message.role == "assistant" and not event.partial:
            calls = client_calls(event)
    return calls


def _wire_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def _completion(
    record: RunRecord, chat: ChatRequest, content: str, headers: dict[str, str], *, calls: Sequence[ToolCall] = ()
) -> JsonResponse:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:  # the run waits for the client's results, as OpenAI's answer to a tool call reads
        message = {"role": "assistant", "content": content or None, "tool_calls": _wire_calls(calls)}
    return JsonResponse(
        {
            "id": f"chatcmpl-{record.id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.agent,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _usage(record),
        },
        headers=headers,
    )


@dataclass(frozen=True, kw_only=True)
class Answered:
    """A run that answered: its record, the answer's text (the final answer alone for a
    `final_only` request, else every assistant message's, `answer_text`), the client tool
    calls it waits for, and the response headers."""

    record: RunRecord
    text: str
    calls: list[ToolCall]
    headers: dict[str, str]


async def run_answer(
    manager: Any, started: StartedRun, chat: ChatRequest, remember: Remember
) -> Answered | HttpResponse:
    """A started run's answer once it has ended (the failure response when it failed),
    remembered for the client's next request to find its session."""
    seen = [event async for event in started.events]  # the run's end ends the iterator
    final = await manager.await_run(started.record.id, 5.0) or started.record
    if final.status not in _ANSWERED:
        return failure_response(final, started.headers)
    text = final.answer if chat.final_only else answer_text(seen)
    calls = waiting_calls(seen)
    await remember(text, calls)
    return Answered(record=final, text=text, calls=calls, headers=started.headers)


async def replayed_run(
    manager: Any, record: RunRecord, chat: ChatRequest, session_header: str | None, *, input_name: str
) -> Answered | HttpResponse:
    """The run whose `Idempotency-Key` this request repeats, waited for while in flight;
    its failure response when it failed. A different request under the same key (`input_name`
    says what the request's input is called) is refused, as is one whose run still runs."""
    turn = await db_call(run_selectors.run_turn)(record=record)
    for _ in range(50):  # a concurrent request's run row is written before its turn is
        if turn:
            break
        await asyncio.sleep(0.1)
        turn = await db_call(run_selectors.run_turn)(record=record)
    if (
        record.agent != chat.agent
        or (session_header is not None and session_header != record.session_id)
        or not same_input(turn, chat)
    ):
        raise OpenAIError(
            400,
            f"{IDEMPOTENCY_HEADER} {record.request_id!r} was used for another request (model, "
            f"{input_name} or session differ); use a new key for a new request",
            param=IDEMPOTENCY_HEADER,
            code="idempotency_key_reused",
        )
    final = await run_ended(manager, record)
    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id, REPLAYED_HEADER: "true"}
    if not final.finished:
        raise OpenAIError(
            409,
            f"the run {record.id} of this {IDEMPOTENCY_HEADER} is still in progress; retry later",
            param=IDEMPOTENCY_HEADER,
            code="run_in_progress",
        )
    if final.status not in _ANSWERED:
        return failure_response(final, headers)
    if not record.finished:
        turn = await db_call(run_selectors.run_turn)(record=final)  # what the run wrote since
    text = final.answer if chat.final_only else answer_text(turn)
    return Answered(record=final, text=text, calls=waiting_calls(turn), headers=headers)


def same_input(turn: Sequence[Event], chat: ChatRequest) -> bool:
    """Whether the run's turn began with this request's input: its user message, or its
    tool results (issue 20)."""
    if chat.message is None:
        given = [(m.tool_call_id, m.content) for m in chat.tool_results]
        stored = [
            (e.message.tool_call_id, e.message.content)
            for e in turn
            if e.message is not None and e.message.role == "tool"
        ][: len(given)]
        return stored == given
    said = next((e.message for e in turn if e.message is not None and e.message.role == "user"), None)
    return said is not None and said.content == chat.message.content


async def run_ended(manager: Any, record: RunRecord) -> RunRecord:
    """The run's record once it has ended, or as it stands after the wait limit."""
    deadline = time.monotonic() + settings.AGENTSITE_RUN_WAIT_TIMEOUT_S
    while not record.finished and time.monotonic() < deadline:
        # In this process the wait returns when the run ends; a run of another process is
        # read from the store, so the reads are paced.
        record = await manager.await_run(record.id, 5.0) or record
        if not record.finished:
            await asyncio.sleep(0.5)
    return record
