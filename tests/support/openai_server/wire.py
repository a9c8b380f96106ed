"""The OpenAI wire format: the paths, and the bodies OpenAI would send for a step."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from tests.support.openai_server.steps import ServerStep

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

# Answered when a request arrives with no step left: a 4xx that clients do not retry, so a
# test that calls the model once too often fails at once with this message.
EXHAUSTED_STATUS = 418
EXHAUSTED_MESSAGE = "ScriptedOpenAIServer: the script is exhausted but a chat completion was requested"


def error_body(message: str, type: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _usage(step: ServerStep, body: Mapping[str, Any]) -> dict[str, int]:
    if step.usage is not None:
        prompt, completion = step.usage
    else:
        # Deterministic stand-ins (about four characters a token), not a tokenizer.
        messages = body.get("messages") or []
        prompt = sum(len(str(m.get("content") or "")) // 4 + 1 for m in messages if isinstance(m, dict))
        produced = step.text + "".join(call.arguments for call in step.tool_calls)
        completion = max(1, len(produced) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[start : start + size] for start in range(0, len(text), size)]


def stream_chunks(step: ServerStep, body: Mapping[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects OpenAI would stream for this step, in order."""
    base: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "system_fingerprint": "fp_scripted",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        made = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if include_usage:
            made["usage"] = None  # as OpenAI does: null on every chunk but the last
        return made

    text_first = step.kind != "tool_calls" or bool(step.text)
    chunks = [chunk({"role": "assistant", "content": "" if text_first else None, "refusal": None})]
    chunks.extend(chunk({"content": piece}) for piece in _pieces(step.text, step.chunk_size))

    # Each call opens with its id, type and name and empty arguments; the arguments follow
    # in fragments that carry only the call's index.
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(step.tool_calls):
        fragments = [
            {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        ]
        fragments.extend(
            {"index": index, "function": {"arguments": piece}} for piece in _pieces(call.arguments, step.fragment_size)
        )
        per_call.append(fragments)
    if step.interleave:
        longest = max((len(fragments) for fragments in per_call), default=0)
        ordered = [fragments[i] for i in range(longest) for fragments in per_call if i < len(fragments)]
    else:
        ordered = [fragment for fragments in per_call for fragment in fragments]
    chunks.extend(chunk({"tool_calls": [fragment]}) for fragment in ordered)

    chunks.append(chunk({}, step.finish_reason or "stop"))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(step, body)})
    return chunks


def completion(step: ServerStep, body: Mapping[str, Any]) -> dict[str, Any]:
    """The `chat.completion` object OpenAI would answer for this step without streaming."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": step.text if step.text or not step.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if step.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in step.tool_calls
        ]
    return {
        "id": f"chatcmpl-scripted-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": step.finish_reason or "stop"}],
        "usage": _usage(step, body),
    }
