"""The OpenAI Responses API's wire format (issue 25, item 2), as plain Python.

`POST /v1/responses` (runs.surfaces.openai_responses) is served by the same run as
`POST /v1/chat/completions`: this module translates a Responses request into the chat
grammar the /v1 surface already checks and runs, and the run back into Responses objects
and stream events.

- `input_messages`: `input` (a string, or a list of items: messages with `input_text`,
  `input_image`, `input_file`, `output_text` parts; `function_call` and
  `function_call_output` items) as chat-completions messages, each remembering the input
  item it came from so that an error names `input[i]`. An assistant message and the
  `function_call` items after it are one assistant message with `tool_calls`, as the chat
  grammar has it (and as a client resending its history must be matched).
- `responses_tools`, `responses_tool_choice`, `responses_output`, `responses_metadata`:
  the request's options, refused with `ResponsesInputError` naming the parameter.
- `response_object` and `ResponseStream`: the response and its streamed events.

A response is a run: its id is `resp_<run id>`; the answer is one assistant message whose
text is the run's answer as /v1 chat completions gives it (`runs.surfaces.openai_compat.answer_text`:
every assistant text of the run, the final answer last), followed by a `function_call`
item for each call of a client tool the run waits on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from runs.core.llm.base import ToolChoice, ToolSpec
from runs.core.output import OutputSpec, SchemaError, output_from_response_format
from runs.core.tools.client import ClientToolError, check_unique, client_tool_spec
from sessions_app.core.events import ToolCall

RESPONSE_PREFIX = "resp_"
MESSAGE_PREFIX = "msg_"
CALL_ITEM_PREFIX = "fc_"
ECHO_EXTENSION = "openai_response"
"""The turn event's extension holding what the request said (`ResponseEcho`), so that
`GET /v1/responses/<id>` answers with it."""

# OpenAI's limits on `metadata`.
METADATA_MAX_KEYS = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512

ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
_STATUSES: dict[str, ResponseStatus] = {
    "queued": "queued",
    "running": "in_progress",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "interrupted": "incomplete",
}
_ROLES = ("user", "assistant", "system", "developer")
# A reasoning model's own notes, which clients resend: dropped, nothing our agents' models read.
# Items of hosted tools (web search, computer use, MCP, ...) are refused: none of them ran here.
_REASONING = "reasoning"


class ResponsesInputError(ValueError):
    """A Responses request that cannot be honoured; `param` names the field
    (`input[2].content[0].image_url`), `code` is OpenAI's error code when there is one."""

    def __init__(self, message: str, *, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, kw_only=True)
class ResponsesInput:
    """`input` as chat-completions messages; `origins[i]` is the index of the input item
    message `i` starts at (0 for a string input)."""

    messages: tuple[dict[str, Any], ...]
    origins: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class ResponseEcho:
    """What a create request said that its response repeats (stored with the run's turn)."""

    instructions: str | None = None
    previous_response_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Any = "auto"
    text_format: Mapping[str, Any] = field(default_factory=lambda: {"type": "text"})
    store: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "metadata": dict(self.metadata),
            "tools": [dict(t) for t in self.tools],
            "text_format": dict(self.text_format),
        }

    @classmethod
    def from_value(cls, value: Any) -> ResponseEcho:
        """The echo stored with a run's turn; the defaults for a run made elsewhere."""
        if not isinstance(value, Mapping):
            return cls()
        known = {k: value[k] for k in cls.__dataclass_fields__ if k in value}
        if "tools" in known:
            known["tools"] = tuple(known["tools"] or ())
        return cls(**known)

    @property
    def json_output(self) -> bool:
        """Whether the answer must parse as JSON (then it is the run's final answer alone)."""
        return self.text_format.get("type") in ("json_object", "json_schema")


def response_id(run_id: str) -> str:
    return f"{RESPONSE_PREFIX}{run_id}"


def run_id_of(value: str) -> str | None:
    """The run a response id names; None for a value that is not a response id."""
    if not value.startswith(RESPONSE_PREFIX) or len(value) == len(RESPONSE_PREFIX):
        return None
    return value[len(RESPONSE_PREFIX) :]


def input_messages(raw: Any) -> ResponsesInput:
    """`input` as chat-completions messages (see the module docstring)."""
    if isinstance(raw, str):
        if not raw.strip():
            raise ResponsesInputError("input must not be empty", param="input")
        return ResponsesInput(messages=({"role": "user", "content": raw},), origins=(0,))
    if not isinstance(raw, list) or not raw:
        raise ResponsesInputError("input must be a non-empty string or a non-empty array of input items", param="input")
    messages: list[dict[str, Any]] = []
    origins: list[int] = []
    calls_of: int | None = None  # the assistant message the next function_call item joins
    for index, item in enumerate(raw):
        at = f"input[{index}]"
        if not isinstance(item, dict):
            raise ResponsesInputError(f"{at} must be an object", param=at)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == _REASONING:
            continue  # a reasoning model's own notes: nothing the agent's model reads
        if kind == "message":
            message = _message(item, at)
            calls_of = len(messages) if message["role"] == "assistant" else None
        elif kind == "function_call":
            call = _function_call(item, at)
            if calls_of is not None:
                messages[calls_of].setdefault("tool_calls", []).append(call)
                continue
            calls_of = len(messages)
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            message = _function_output(item, at)
            calls_of = None
        elif kind == "item_reference":
            raise ResponsesInputError(
                f"{at}: item_reference is not supported; send the item itself, or continue with previous_response_id",
                param=f"{at}.type",
                code="unsupported_input",
            )
        else:
            raise ResponsesInputError(
                f"{at}.type must be 'message', 'function_call' or 'function_call_output', got {kind!r}",
                param=f"{at}.type",
                code="unsupported_input",
            )
        messages.append(message)
        origins.append(index)
    if not messages:
        raise ResponsesInputError("input holds no message or tool result", param="input")
    return ResponsesInput(messages=tuple(messages), origins=tuple(origins))


def _message(item: Mapping[str, Any], at: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise ResponsesInputError(f"{at}.role must be one of {list(_ROLES)}, got {role!r}", param=f"{at}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise ResponsesInputError(f"{at}.content must be a string or an array of content parts", param=f"{at}.content")
    # One chat part per input part, so that an error about chat part k names input part k.
    return {"role": role, "content": [_part(part, f"{at}.content[{number}]") for number, part in enumerate(content)]}


def _part(part: Any, at: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise ResponsesInputError(f"{at} must be an object", param=at)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise ResponsesInputError(f"{at}.text must be a string", param=f"{at}.text")
        return {"type": "text", "text": text}
    if kind == "refusal":
        refusal = part.get("refusal")
        if not isinstance(refusal, str):
            raise ResponsesInputError(f"{at}.refusal must be a string", param=f"{at}.refusal")
        return {"type": "text", "text": refusal}
    if kind == "input_image":
        if part.get("file_id") is not None or part.get("image_url") is None:
            raise ResponsesInputError(
                f"{at} must carry image_url (a URL or a data URL); file_id is not supported "
                "(this server has no Files API)",
                param=f"{at}.image_url",
                code="unsupported_content",
            )
        image: dict[str, Any] = {"url": part.get("image_url")}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if part.get("file_data") is None:
            raise ResponsesInputError(
                f"{at} must carry file_data (base64 or a data URL); file_id and file_url are not supported",
                param=f"{at}.file_data",
                code="unsupported_content",
            )
        file: dict[str, Any] = {"file_data": part.get("file_data")}
        if part.get("filename") is not None:
            file["filename"] = part.get("filename")
        return {"type": "file", "file": file}
    raise ResponsesInputError(
        f"{at}.type must be 'input_text', 'input_image', 'input_file', 'output_text' or 'refusal', got {kind!r}",
        param=f"{at}.type",
        code="unsupported_content",
    )


def _function_call(item: Mapping[str, Any], at: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
    if not isinstance(call_id, str) or not call_id:
        raise ResponsesInputError(f"{at}.call_id must be a non-empty string", param=f"{at}.call_id")
    if not isinstance(name, str) or not name:
        raise ResponsesInputError(f"{at}.name must be a non-empty string", param=f"{at}.name")
    if not isinstance(arguments, str):
        raise ResponsesInputError(f"{at}.arguments must be a string (JSON text)", param=f"{at}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _function_output(item: Mapping[str, Any], at: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise ResponsesInputError(f"{at}.call_id must be a non-empty string", param=f"{at}.call_id")
    if isinstance(output, list):
        texts = []
        for number, part in enumerate(output):
            if not isinstance(part, dict) or part.get("type") != "input_text" or not isinstance(part.get("text"), str):
                raise ResponsesInputError(
                    f"{at}.output[{number}] must be an input_text part (a tool result is text)",
                    param=f"{at}.output[{number}]",
                    code="unsupported_content",
                )
            texts.append(part["text"])
        output = "".join(texts)
    if not isinstance(output, str):
        raise ResponsesInputError(f"{at}.output must be a string", param=f"{at}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def responses_tools(raw: Any) -> tuple[ToolSpec, ...]:
    """The Responses `tools` (`{"type": "function", "name", "description"?, "parameters"?,
    "strict"?}`) as client tool specs; hosted tools (web search, file search, ...) are refused:
    this server runs none of them."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ResponsesInputError("tools must be an array of tool definitions", param="tools")
    specs: list[ToolSpec] = []
    try:
        for index, item in enumerate(raw):
            at = f"tools[{index}]"
            if not isinstance(item, dict):
                raise ResponsesInputError(f"{at} must be an object", param=at)
            if item.get("type") != "function":
                raise ResponsesInputError(
                    f"{at}.type must be 'function' (hosted tools are not available here), got {item.get('type')!r}",
                    param=f"{at}.type",
                    code="unsupported_tool",
                )
            specs.append(client_tool_spec(item.get("name"), item.get("description"), item.get("parameters"), at=at))
        check_unique(specs, lambda i: f"tools[{i}].name")
    except ClientToolError as exc:
        raise ResponsesInputError(str(exc), param=exc.param, code=exc.code) from None
    return tuple(specs)


def responses_tool_choice(raw: Any) -> ToolChoice | None:
    """The Responses `tool_choice`: `auto`, `none`, `required` or `{"type": "function", "name"}`."""
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        return ToolChoice(mode=raw)
    if not isinstance(raw, dict) or raw.get("type") != "function":
        raise ResponsesInputError(
            "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
            param="tool_choice",
            code="invalid_tool_choice",
        )
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ResponsesInputError(
            "tool_choice.name must be a non-empty string", param="tool_choice.name", code="invalid_tool_choice"
        )
    return ToolChoice(mode="function", name=name)


def responses_output(text: Any) -> tuple[OutputSpec | None, dict[str, Any]]:
    """`text.format` (`text`, `json_object`, or `json_schema` with `name`, `schema`,
    `strict`) as an output spec, and the format to echo."""
    if text is None:
        return None, {"type": "text"}
    if not isinstance(text, dict):
        raise ResponsesInputError("text must be an object", param="text")
    fmt = text.get("format")
    if fmt is None:
        return None, {"type": "text"}
    if not isinstance(fmt, dict):
        raise ResponsesInputError("text.format must be an object", param="text.format")
    # The Responses format is chat's `response_format` with the json_schema fields inlined.
    as_chat: Any = fmt
    if fmt.get("type") == "json_schema":
        as_chat = {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
    try:
        spec = output_from_response_format(as_chat, param="text.format")
    except SchemaError as exc:
        param = (exc.param or "text.format").replace(".json_schema", "")
        raise ResponsesInputError(
            str(exc).replace("text.format.json_schema", "text.format"), param=param, code="invalid_text_format"
        ) from None
    return spec, dict(fmt)


def responses_metadata(raw: Any) -> dict[str, str]:
    """`metadata`: at most 16 string values, keys up to 64 characters, values up to 512."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ResponsesInputError("metadata must be an object of strings", param="metadata")
    if len(raw) > METADATA_MAX_KEYS:
        raise ResponsesInputError(f"metadata has {len(raw)} keys; the limit is {METADATA_MAX_KEYS}", param="metadata")
    for key, value in raw.items():
        if len(key) > METADATA_KEY_MAX:
            raise ResponsesInputError(
                f"metadata key {key[:20]!r}... is longer than {METADATA_KEY_MAX} characters", param="metadata"
            )
        if not isinstance(value, str) or len(value) > METADATA_VALUE_MAX:
            raise ResponsesInputError(
                f"metadata[{key!r}] must be a string of at most {METADATA_VALUE_MAX} characters",
                param=f"metadata.{key}",
            )
    return dict(raw)


def tool_wire(spec: ToolSpec) -> dict[str, Any]:
    """A client tool as a Responses tool definition (echoed in the response)."""
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
        "strict": False,
    }


def message_item_id(run_id: str, request_id: str) -> str:
    """The answer's item id: one per request, since a run paused for client tools is
    continued by the next request (issue 20) and answers again under the same response id."""
    return MESSAGE_PREFIX + hashlib.sha256(f"{run_id}\n{request_id}".encode()).hexdigest()[:32]


def message_item(item_id: str, text: str, *, status: str = "completed") -> dict[str, Any]:
    """The answer as an output message item."""
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [text_part(text)] if status == "completed" else [],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(call: ToolCall, *, arguments: str | None = None, status: str = "completed") -> dict[str, Any]:
    """A call of a client tool the run waits on, as a `function_call` output item."""
    return {
        "id": f"{CALL_ITEM_PREFIX}{call.id}",
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if arguments is None else arguments,
    }


def output_items(item_id: str, text: str, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """A finished response's output: the answer's message (when it has text), then the calls."""
    items = [message_item(item_id, text)] if text else []
    return [*items, *(call_item(call) for call in calls)]


def response_status(run_status: str) -> ResponseStatus:
    return _STATUSES.get(run_status, "in_progress")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_object(
    *,
    run_id: str,
    model: str,
    created_at: float,
    status: ResponseStatus,
    echo: ResponseEcho,
    output: Sequence[Mapping[str, Any]] = (),
    usage: Mapping[str, Any] | None = None,
    error: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A response object as OpenAI's `Response` reads it."""
    return {
        "id": response_id(run_id),
        "object": "response",
        "created_at": int(created_at),
        "status": status,
        "model": model,
        "output": [dict(item) for item in output],
        "error": dict(error) if error else None,
        "incomplete_details": {"reason": "interrupted"} if status == "incomplete" else None,
        "instructions": echo.instructions,
        "previous_response_id": echo.previous_response_id,
        "metadata": dict(echo.metadata),
        "tools": [dict(t) for t in echo.tools],
        "tool_choice": echo.tool_choice,
        "text": {"format": dict(echo.text_format)},
        "store": echo.store,
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "truncation": "disabled",
        "usage": dict(usage) if usage else None,
    }


class ResponseStream:
    """The server-sent events of one streamed response, numbered in order.

    `start` sends `response.created` and `response.in_progress`; `text` sends the answer's
    deltas (opening its message item and text part first); `finish` closes the text, sends
    each client call as a `function_call` item with its arguments, then
    `response.completed`; `fail` sends `response.failed`.
    """

    def __init__(self, item_id: str) -> None:
        self.item_id = item_id
        self.sequence = 0
        self.text_so_far: list[str] = []
        self._opened = False
        self._outputs = 0  # output items sent so far

    def _event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"

    def start(self, response: Mapping[str, Any]) -> list[str]:
        return [
            self._event("response.created", response=dict(response)),
            self._event("response.in_progress", response=dict(response)),
        ]

    def text(self, delta: str) -> list[str]:
        lines = []
        item_id = self.item_id
        if not self._opened:
            self._opened = True
            lines += [
                self._event(
                    "response.output_item.added", output_index=0, item=message_item(item_id, "", status="in_progress")
                ),
                self._event(
                    "response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=text_part("")
                ),
            ]
        self.text_so_far.append(delta)
        lines.append(
            self._event(
                "response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=delta, logprobs=[]
            )
        )
        return lines

    def finish(self, response: Mapping[str, Any], calls: Sequence[ToolCall]) -> list[str]:
        lines = []
        if self._opened:
            text = "".join(self.text_so_far)
            item_id = self.item_id
            lines += [
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=text_part(text)
                ),
                self._event("response.output_item.done", output_index=0, item=message_item(item_id, text)),
            ]
            self._outputs = 1
        for call in calls:
            index, item_id = self._outputs, f"{CALL_ITEM_PREFIX}{call.id}"
            lines += [
                self._event(
                    "response.output_item.added",
                    output_index=index,
                    item=call_item(call, arguments="", status="in_progress"),
                ),
                self._event(
                    "response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=call.arguments
                ),
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    name=call.name,
                    arguments=call.arguments,
                ),
                self._event("response.output_item.done", output_index=index, item=call_item(call)),
            ]
            self._outputs += 1
        return [*lines, self._event("response.completed", response=dict(response))]

    def fail(self, response: Mapping[str, Any]) -> list[str]:
        return [self._event("response.failed", response=dict(response))]
