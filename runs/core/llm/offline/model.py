"""OfflineModel itself: the `Model` interface over the planner (plan, answer, summarise),
its deltas and its usage figures."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from runs.core.attachments import describe_part
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse
from runs.core.llm.offline.answers import (
    _CAUSE,
    _TEXT,
    Language,
    _compose_answer,
    _compose_no_tool_answer,
    answer_language,
)
from runs.core.llm.offline.digests import _parse, _Result
from runs.core.llm.offline.planning import plan_tool_calls, tool_profile
from runs.core.llm.offline.summaries import extractive_summary
from runs.core.output import OutputSpec, minimal_instance
from runs.core.tokens import count_messages, count_text
from sessions_app.core.events import Message, ToolCall, Usage

OFFLINE_MODEL_NAME = "offline"
OFFLINE_DESCRIPTION = "deterministic rule-based planner, not a language model"
DEFAULT_CONTEXT_WINDOW = 8192

WORDS_PER_DELTA = 5


def offline_model_info(context_window: int | None = None) -> ModelInfo:
    """What the offline model reports about itself (window 8,192 unless overridden)."""
    return ModelInfo(
        name=OFFLINE_MODEL_NAME,
        context_window=context_window or DEFAULT_CONTEXT_WINDOW,
        provider="offline",
        description=OFFLINE_DESCRIPTION,
    )


def _turn(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The last user message's text and the messages after it."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index].content, list(messages[index + 1 :])
    return None, []


def _attachments_notice(messages: Sequence[Message], language: Language = "en") -> str:
    """Issue 20: the planner reads text only, and says so plainly when the user's message
    came with images or files, naming what it received ("" when there were none)."""
    user = next((m for m in reversed(messages) if m.role == "user"), None)
    if user is None or not user.attachments:
        return ""
    received = "; ".join(describe_part(p) for p in user.attachments)
    if language == "zh":
        return f"我看不到图片，也读不了附件：离线规划器只处理文字。收到的附件：{received}。\n\n"
    return (
        f"I cannot see images or read attached files: the offline planner works on text only. "
        f"I received: {received}.\n\n"
    )


def _turn_results(after_user: Sequence[Message]) -> list[_Result]:
    calls: dict[str, ToolCall] = {}
    results: list[_Result] = []
    for message in after_user:
        calls.update((made.id, made) for made in message.tool_calls)
        if message.role == "tool":
            call = calls.get(message.tool_call_id or "")
            arguments = _parse(call.arguments) if call is not None else {}
            results.append(
                _Result(
                    tool=message.tool_name or (call.name if call is not None else "tool"),
                    arguments=arguments if isinstance(arguments, Mapping) else {},
                    content=message.content,
                )
            )
    return results


def _chunks(text: str, words_per_delta: int) -> Iterable[str]:
    pieces = re.findall(r"\S+\s*|\s+", text)
    for start in range(0, len(pieces), words_per_delta):
        yield "".join(pieces[start : start + words_per_delta])


class OfflineModel:
    """The offline model: a deterministic rule-based planner, not a language model.

    Plans tool calls from the request, answers by composing tool results, summarises
    extractively. See the module docstring for the rules.
    """

    def __init__(self, context_window: int | None = None) -> None:
        if context_window is not None and context_window <= 0:
            raise ValueError(f"context_window must be positive, got {context_window!r}")
        self._info = offline_model_info(context_window)

    def info(self) -> ModelInfo:
        return self._info

    def summarize(self, text: str, budget_tokens: int) -> str:
        """Extractive summary of `text` within `budget_tokens` (see `extractive_summary`)."""
        return extractive_summary(text, budget_tokens)

    def respond(self, request: ModelRequest) -> Message:
        """The complete assistant message for a request (what `generate` streams)."""
        user_text, after_user = _turn(request.messages)
        if user_text is None:
            return Message(
                role="assistant",
                content="The offline planner found no user request to act on.\n\n(Composed by the offline planner.)",
            )
        results = _turn_results(after_user)
        language = answer_language(user_text)
        notice = _attachments_notice(request.messages, language)
        if results:
            return self._answer(request.output, notice + _compose_answer(results, language), len(results))
        calls, blocked = plan_tool_calls(user_text, request.tools) if request.tools else ([], [])
        if calls:
            first = sum(len(m.tool_calls) for m in request.messages) + 1
            return Message(
                role="assistant",
                tool_calls=tuple(
                    ToolCall(
                        id=f"offline_call_{first + i}",
                        name=plan.tool,
                        arguments=json.dumps(plan.arguments, ensure_ascii=False),
                    )
                    for i, plan in enumerate(calls)
                ),
            )
        return self._answer(request.output, notice + _compose_no_tool_answer(request.tools, blocked, language), 0)

    @staticmethod
    def _answer(output: OutputSpec | None, text: str, count: int) -> Message:
        """The text answer, or, when the request wants structured output, a valid JSON value
        carrying its conclusion (the line that says what the findings mean)."""
        if output is None:
            return Message(role="assistant", content=text)
        signatures = {_TEXT[language]["signature"] for language in _TEXT}
        lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() not in signatures]
        at = next((i for i, line in enumerate(lines) if _CAUSE.match(line)), None)
        gist = lines[0] if at is None and lines else ""
        if at is not None:
            # Several problems are listed under the cause line: the gist carries them all.
            listed = [line for line in lines[at + 1 : at + 6] if re.match(r"\d+\. ", line)]
            gist = " ".join([_CAUSE.sub("", lines[at]), *listed])
        if output.kind == "json_object" or output.schema is None:
            value: Any = {"answer": gist}
        else:
            value = minimal_instance(output.schema, text=gist, count=count)
        return Message(role="assistant", content=json.dumps(value, ensure_ascii=False))

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        message = self.respond(request)
        response_id = f"offline-{_fingerprint(request)}"
        name = self._info.name
        for delta in _chunks(message.content, WORDS_PER_DELTA):
            yield ModelResponse(id=response_id, partial=True, delta=delta, model=name)
        if message.tool_calls:
            completion = sum(count_text(c.name) + count_text(c.arguments) for c in message.tool_calls)
        else:
            completion = count_text(message.content)
        yield ModelResponse(
            id=response_id,
            partial=False,
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=Usage(prompt_tokens=_prompt_tokens(request), completion_tokens=completion),
            model=name,
        )


def _prompt_tokens(request: ModelRequest) -> int:
    return count_messages(request.messages) + sum(count_text(tool_profile(t).json) for t in request.tools)


_MESSAGE_BYTES: dict[int, tuple[Message, bytes]] = {}
_MAX_MESSAGES = 1024
_MAX_MESSAGE_CHARS = 65_536  # a longer message is encoded each time rather than kept alive


def _message_bytes(message: Message) -> bytes:
    """A message as the fingerprint hashes it, remembered by object: a run's later steps
    send the same history objects again (a `Message` is immutable)."""
    hit = _MESSAGE_BYTES.get(id(message))
    if hit is not None and hit[0] is message:
        return hit[1]
    data = json.dumps(message.to_dict(), sort_keys=True, ensure_ascii=False).encode()
    if len(data) > _MAX_MESSAGE_CHARS:
        return data
    if len(_MESSAGE_BYTES) >= _MAX_MESSAGES:
        _MESSAGE_BYTES.clear()
    _MESSAGE_BYTES[id(message)] = (message, data)
    return data


def _fingerprint(request: ModelRequest) -> str:
    digest = hashlib.sha256()
    for message in request.messages:
        digest.update(_message_bytes(message))
    for spec in request.tools:
        digest.update(tool_profile(spec).json.encode())
    return digest.hexdigest()[:16]
