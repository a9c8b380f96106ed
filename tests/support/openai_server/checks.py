"""What OpenAI would refuse in a chat completion request, checked before a step is played."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def request_problem(body: Mapping[str, Any]) -> str | None:
    """What OpenAI would refuse in this request body, in its words where known; None if fine."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    if "stream_options" in body and body["stream_options"] is not None and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "[] is too short - 'tools'"
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function" or not function.get("name"):
                return f"Invalid tool at 'tools[{index}]': expected {{type: 'function', function: {{name, ...}}}}"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            return f"Invalid value for 'messages[{index}].role': {role!r}"
        if role != "tool" and pending:
            return _unanswered_calls(pending)
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(function, dict)
                    or not call.get("id")
                    or call.get("type") != "function"
                    or not isinstance(function.get("arguments"), str)
                ):
                    return f"Invalid tool call in 'messages[{index}].tool_calls': {call!r}"
                pending.add(call["id"])
        elif role == "tool":
            if message.get("tool_call_id") not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'."
                )
            pending.discard(message["tool_call_id"])
    if pending:
        return _unanswered_calls(pending)
    return None


def _unanswered_calls(pending: set[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(pending))}"
    )
