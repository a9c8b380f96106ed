"""The Responses API's wire format (runs.core.responses): input items as the chat grammar,
options refused naming the parameter, and the streamed events in order. Plain Python: no
database, no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runs.core.responses import (
    ResponseEcho,
    ResponsesInputError,
    ResponseStream,
    input_messages,
    response_object,
    responses_output,
    responses_tool_choice,
    responses_tools,
)
from sessions_app.core.events import ToolCall


def test_an_assistant_message_and_the_function_calls_after_it_are_one_assistant_turn() -> None:
    got = input_messages(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
        ]
    )
    assert [m["role"] for m in got.messages] == ["user", "assistant", "tool", "tool"]
    assert got.origins == (0, 2, 5, 6)  # the reasoning item is dropped, the calls join item 2
    assert [c["id"] for c in got.messages[1]["tool_calls"]] == ["c1", "c2"]
    assert got.messages[1]["content"] == [{"type": "text", "text": "Checking."}]
    assert got.messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "noon"}


def test_a_function_call_without_a_message_before_it_is_an_assistant_turn_of_its_own() -> None:
    got = input_messages(
        [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
    )
    assert got.messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        pytest.param("  ", "input", id="blank"),
        pytest.param([{"type": "function_call", "call_id": "", "name": "f"}], "input[0].call_id", id="call-without-id"),
        pytest.param(
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}],
            "input[0].arguments",
            id="arguments-not-text",
        ),
        pytest.param(
            [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}],
            "input[0].output[0]",
            id="image-in-a-tool-result",
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
            "input[0].content[0].file_data",
            id="file-by-id",
        ),
        pytest.param([{"type": "web_search_call", "id": "ws"}], "input[0].type", id="hosted-tool-item"),
    ],
)
def test_input_that_cannot_be_honoured_names_the_item(raw: Any, param: str) -> None:
    with pytest.raises(ResponsesInputError) as caught:
        input_messages(raw)
    assert caught.value.param == param


def test_tools_tool_choice_and_text_format_name_their_fields() -> None:
    [spec] = responses_tools([{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    assert spec.name == "f"
    for raw, param in (
        (["x"], "tools[0]"),
        ([{"type": "function", "name": "a b"}], "tools[0].name"),
        ([{"type": "function", "name": "f"}, {"type": "function", "name": "f"}], "tools[1].name"),
    ):
        with pytest.raises(ResponsesInputError) as caught:
            responses_tools(raw)
        assert caught.value.param == param
    assert responses_tool_choice({"type": "function", "name": "f"}).name == "f"  # type: ignore[union-attr]
    with pytest.raises(ResponsesInputError) as caught:
        responses_tool_choice({"type": "file_search"})
    assert caught.value.param == "tool_choice"
    spec_out, echoed = responses_output({"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}})
    assert spec_out is not None and spec_out.name == "r" and echoed["type"] == "json_schema"
    with pytest.raises(ResponsesInputError) as caught:
        responses_output({"format": {"type": "json_schema", "name": "r"}})
    assert caught.value.param == "text.format.schema"


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line.split("data: ", 1)[1]) for line in lines]


def test_the_stream_numbers_its_events_and_closes_the_text_before_the_calls() -> None:
    stream = ResponseStream("msg_1")
    begun = response_object(run_id="r1", model="support", created_at=0, status="in_progress", echo=ResponseEcho())
    lines = [*stream.start(begun), *stream.text("Check"), *stream.text("ing.")]
    done = response_object(run_id="r1", model="support", created_at=0, status="completed", echo=ResponseEcho())
    lines += stream.finish(done, [ToolCall(id="c1", name="get_weather", arguments='{"city": "Oslo"}')])
    events = _events(lines)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[6]["text"] == "Checking." and events[9]["output_index"] == 1
    assert events[12]["item"] == {
        "id": "fc_c1",
        "type": "function_call",
        "status": "completed",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert all(line.startswith(f"event: {e['type']}\n") for line, e in zip(lines, events, strict=True))


def test_the_echo_survives_the_ledger_and_a_run_made_elsewhere_has_the_defaults() -> None:
    echo = ResponseEcho(instructions="Be brief.", metadata={"k": "v"}, text_format={"type": "json_object"}, store=False)
    again = ResponseEcho.from_value(json.loads(json.dumps(echo.to_dict())))
    assert again == echo and again.json_output
    assert ResponseEcho.from_value(None) == ResponseEcho() and not ResponseEcho().json_output
