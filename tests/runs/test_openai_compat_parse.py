"""Validation of OpenAI chat completion bodies: what we honour and what we refuse."""

from __future__ import annotations

from typing import Any

import pytest

from runs.surfaces.openai_compat import OpenAIError, parse_chat_request


def body(**overrides: Any) -> dict[str, Any]:
    return {"model": "support", "messages": [{"role": "user", "content": "hi"}], **overrides}


def test_the_last_user_message_is_the_input_and_earlier_ones_are_seed() -> None:
    chat = parse_chat_request(
        body(
            messages=[
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "first "}, {"type": "text", "text": "question"}]},
                {"role": "assistant", "content": None},
                {"role": "user", "content": "second question"},
            ]
        )
    )
    assert chat.message.content == "second question"
    assert [(m.role, m.content) for m in chat.seed] == [("system", "be brief"), ("user", "first question")]
    assert chat.stream is False


def test_sampling_parameters_are_accepted_and_ignored() -> None:
    assert parse_chat_request(body(temperature=0.2, top_p=0.9, max_tokens=10, seed=3)).agent == "support"


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"model": ""}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": "  "}]}, "messages[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages[0].content",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].image_url.url",
        ),
        ({"n": 3}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "x y"}}]}, "tools[0].function.name"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 1}}}},
            "response_format.json_schema.schema",
        ),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_what_we_cannot_honour_is_a_400_naming_the_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_chat_request(body(**overrides))
    assert refused.value.status == 400 and refused.value.param == param
