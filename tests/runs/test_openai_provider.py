"""OpenAIModel over real HTTP against ScriptedOpenAIServer, plus the context-window catalog."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from runs.core.errors import ModelError, TransientModelError
from runs.core.llm.base import Model, ModelRequest, ModelResponse, ToolSpec
from runs.core.llm.catalog import FALLBACK_CONTEXT_WINDOW, context_window_for, known_context_window
from runs.core.llm.openai_provider import OpenAIModel
from sessions_app.core.events import Message, ToolCall, Usage
from tests.support.openai_server import EXHAUSTED_MESSAGE, ScriptedOpenAIServer, ServerStep

MakeModel = Callable[..., OpenAIModel]

HELLO = ModelRequest(messages=(Message(role="user", content="Say hello."),))


@pytest.fixture
async def make_model(openai_server: ScriptedOpenAIServer) -> AsyncIterator[MakeModel]:
    """Builds OpenAIModels aimed at the scripted server, with tiny backoffs; closes them after."""
    built: list[OpenAIModel] = []

    def make(**overrides: Any) -> OpenAIModel:
        options: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "base_url": openai_server.base_url,
            "api_key": "sk-test",
            "timeout_s": 5.0,
            "max_retries": 2,
            "backoff_base_s": 0.001,
            "backoff_max_s": 0.01,
        }
        options.update(overrides)
        model = OpenAIModel(**options)
        built.append(model)
        return model

    yield make
    for model in built:
        await model.aclose()


async def collect(model: OpenAIModel, request: ModelRequest) -> list[ModelResponse]:
    return [response async for response in model.generate(request)]


def final_of(responses: list[ModelResponse]) -> ModelResponse:
    finals = [r for r in responses if not r.partial]
    assert len(finals) == 1, f"expected exactly one final response, got {len(finals)}"
    assert responses[-1] is finals[0], "the final response must come last"
    return finals[0]


# -- streaming ---------------------------------------------------------------------------------


async def test_streamed_text_arrives_as_partial_deltas_then_one_final_message_with_usage(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.answer("The quick brown fox jumps.", chunk_size=5, usage=(12, 7)))
    model = make_model()

    responses = await collect(model, HELLO)

    partials = [r for r in responses if r.partial]
    assert len(partials) >= 3
    assert [r.delta for r in partials] == ["The q", "uick ", "brown", " fox ", "jumps", "."]
    final = final_of(responses)
    assert final.message == Message(role="assistant", content="The quick brown fox jumps.")
    assert final.finish_reason == "stop"
    assert final.usage == Usage(prompt_tokens=12, completion_tokens=7)
    assert final.model == "gpt-4o-mini"
    assert {r.id for r in responses} == {final.id} and final.id.startswith("chatcmpl-")
    body = openai_server.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    openai_server.assert_consumed()


@pytest.mark.parametrize("interleave", [False, True], ids=["one-call-after-the-other", "interleaved"])
async def test_parallel_tool_calls_split_across_chunks_are_assembled(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
    interleave: bool,
) -> None:
    weather_args = {"city": "Paris", "unit": "celsius", "note": 'quotes " and braces {}'}
    time_args = {"tz": "Europe/Paris"}
    openai_server.script(
        ServerStep.calls(
            ("get_weather", weather_args, "call_weather"),
            ("get_time", time_args, "call_time"),
            fragment_size=3,
            interleave=interleave,
        )
    )
    model = make_model()

    responses = await collect(model, HELLO)

    assert [r for r in responses if r.partial] == []  # tool-call fragments are not text deltas
    final = final_of(responses)
    assert final.finish_reason == "tool_calls"
    assert final.message is not None and final.message.content == ""
    assert final.message.tool_calls == (
        ToolCall(id="call_weather", name="get_weather", arguments=json.dumps(weather_args)),
        ToolCall(id="call_time", name="get_time", arguments=json.dumps(time_args)),
    )
    assert json.loads(final.message.tool_calls[0].arguments) == weather_args
    openai_server.assert_consumed()


async def test_text_before_tool_calls_is_streamed_and_kept_in_the_final_message(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.calls(("lookup", {"q": "x"}, "call_1"), text="Let me check."))
    model = make_model()

    responses = await collect(model, HELLO)

    assert "".join(r.delta for r in responses if r.partial) == "Let me check."
    final = final_of(responses)
    assert final.message == Message(
        role="assistant",
        content="Let me check.",
        tool_calls=(ToolCall(id="call_1", name="lookup", arguments='{"q": "x"}'),),
    )


async def test_request_carries_messages_tools_and_tool_call_ids(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script("It is sunny in Paris.")
    model = make_model(api_key="sk-secret")
    weather = ToolSpec(
        name="get_weather",
        description="Current weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    request = ModelRequest(
        messages=(
            Message(role="system", content="You are terse."),
            Message(role="user", content="Weather in Paris?"),
            Message(
                role="assistant",
                tool_calls=(ToolCall(id="call_abc", name="get_weather", arguments='{"city": "Paris"}'),),
            ),
            Message(role="tool", content='{"sky": "sunny"}', tool_call_id="call_abc", tool_name="get_weather"),
        ),
        tools=(weather,),
        temperature=0.2,
        max_tokens=100,
    )

    await collect(model, request)

    body = openai_server.requests[0]
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": '{"sky": "sunny"}'},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 100
    headers = {name.lower(): value for name, value in openai_server.received[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-secret"


async def test_tools_are_omitted_when_the_request_has_none(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script("hi")

    await collect(make_model(), HELLO)

    assert "tools" not in openai_server.requests[0]
    assert "temperature" not in openai_server.requests[0]


async def test_reasoning_models_get_max_completion_tokens(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script("hi")

    await collect(make_model(model="o3-mini"), ModelRequest(messages=HELLO.messages, max_tokens=50))

    assert openai_server.requests[0]["max_completion_tokens"] == 50
    assert "max_tokens" not in openai_server.requests[0]


# -- retries -----------------------------------------------------------------------------------


async def test_rate_limited_request_is_retried_then_succeeds(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    openai_server.script(ServerStep.error(429, "Rate limit reached", headers={"Retry-After": "0"}), "Hello!")
    model = make_model(max_retries=3)

    with caplog.at_level(logging.INFO, logger="runs.core.llm.openai_provider"):
        responses = await collect(model, HELLO)

    assert final_of(responses).message == Message(role="assistant", content="Hello!")
    assert len(openai_server.requests) == 2
    openai_server.assert_consumed()
    retries = [r for r in caplog.records if r.name == "runs.core.llm.openai_provider" and r.levelno == logging.INFO]
    assert len(retries) == 1 and "429" in retries[0].getMessage()


async def test_retry_after_header_sets_the_wait(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.error(429, headers={"retry-after-ms": "400"}), "Hello!")
    model = make_model(backoff_base_s=0.001, backoff_max_s=5)

    started = time.monotonic()
    await collect(model, HELLO)

    assert time.monotonic() - started >= 0.4
    openai_server.assert_consumed()


async def test_retry_after_header_is_capped_at_backoff_max(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.error(503, headers={"Retry-After": "60"}), "Hello!")
    model = make_model(backoff_max_s=0.05)

    started = time.monotonic()
    await collect(model, HELLO)

    assert time.monotonic() - started < 5
    openai_server.assert_consumed()


async def test_server_errors_exhaust_retries_and_raise_transient_error(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(*[ServerStep.error(500, "The server had an error")] * 3)
    model = make_model(max_retries=2)

    with pytest.raises(TransientModelError) as caught:
        await collect(model, HELLO)

    assert caught.value.status_code == 500
    assert "3 attempt" in str(caught.value) and "500" in str(caught.value)
    assert len(openai_server.requests) == 3
    openai_server.assert_consumed()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_refused_request_raises_model_error_without_retry(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
    status: int,
) -> None:
    openai_server.script(
        ServerStep.error(status, "Invalid 'messages[0].content': string too long.", code="string_above_max_length"),
        "never requested",
    )
    model = make_model(max_retries=3)

    with pytest.raises(ModelError) as caught:
        await collect(model, HELLO)

    assert type(caught.value) is ModelError  # not the retryable TransientModelError
    assert "Invalid 'messages[0].content': string too long." in str(caught.value)
    assert caught.value.status_code == status
    assert caught.value.code == "string_above_max_length"
    assert len(openai_server.requests) == 1
    assert openai_server.remaining == 1


async def test_timed_out_request_is_retried(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.delay(3.0, then=ServerStep.answer("too late")), "on time")
    model = make_model(timeout_s=0.3)

    started = time.monotonic()
    responses = await collect(model, HELLO)

    assert final_of(responses).message == Message(role="assistant", content="on time")
    assert time.monotonic() - started < 3.0  # the client gave up on the slow answer
    assert len(openai_server.requests) == 2
    openai_server.assert_consumed()


async def test_timeouts_exhaust_retries_and_raise_transient_error(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.delay(3.0), ServerStep.delay(3.0))
    model = make_model(timeout_s=0.2, max_retries=1)

    with pytest.raises(TransientModelError) as caught:
        await collect(model, HELLO)

    assert "timed out" in str(caught.value)
    assert caught.value.status_code is None
    assert len(openai_server.requests) == 2


async def test_stream_that_breaks_after_text_raises_transient_error_and_is_not_retried(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.broken_stream("Hello world, this breaks", after_chunks=3), "never requested")
    model = make_model(max_retries=3)
    received: list[ModelResponse] = []

    with pytest.raises(TransientModelError) as caught:
        async for response in model.generate(HELLO):
            received.append(response)

    assert [r.delta for r in received] == ["Hell", "o wo"]  # streamed before the break, never repeated
    assert all(r.partial for r in received)
    assert "after text was streamed" in str(caught.value)
    assert len(openai_server.requests) == 1
    assert openai_server.remaining == 1


async def test_stream_that_breaks_before_any_text_is_retried(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.broken_stream("lost", after_chunks=1), "second try")
    model = make_model()

    responses = await collect(model, HELLO)

    assert "".join(r.delta for r in responses if r.partial) == "second try"
    assert final_of(responses).message == Message(role="assistant", content="second try")
    assert len(openai_server.requests) == 2
    openai_server.assert_consumed()


async def test_stream_without_any_choice_raises_model_error(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    usage_only = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3},
    }
    openai_server.script(ServerStep.stream_events(usage_only), "never requested")
    model = make_model()

    with pytest.raises(ModelError) as caught:
        await collect(model, HELLO)

    assert type(caught.value) is ModelError
    assert "without any choice" in str(caught.value)
    assert len(openai_server.requests) == 1


async def test_error_event_inside_the_stream_raises_model_error_naming_it(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    error_event = {"error": {"message": "Content policy violation", "type": "invalid_request_error", "code": "policy"}}
    openai_server.script(ServerStep.stream_events(error_event), "never requested")
    model = make_model()

    with pytest.raises(ModelError) as caught:
        await collect(model, HELLO)

    assert type(caught.value) is ModelError
    assert "Content policy violation" in str(caught.value)
    assert caught.value.code == "policy"
    assert len(openai_server.requests) == 1


# -- non-streaming -----------------------------------------------------------------------------


async def test_non_stream_request_returns_one_final_message(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.answer("A plain answer.", usage=(9, 4)))
    model = make_model()

    responses = await collect(model, ModelRequest(messages=HELLO.messages, stream=False))

    assert len(responses) == 1
    final = final_of(responses)
    assert final.message == Message(role="assistant", content="A plain answer.")
    assert final.usage == Usage(prompt_tokens=9, completion_tokens=4)
    assert final.finish_reason == "stop"
    body = openai_server.requests[0]
    assert body["stream"] is False
    assert "stream_options" not in body


async def test_non_stream_request_returns_tool_calls(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.calls(("a", {"x": 1}, "call_a"), ("b", {}, "call_b")))
    model = make_model()

    responses = await collect(model, ModelRequest(messages=HELLO.messages, stream=False))

    final = final_of(responses)
    assert final.finish_reason == "tool_calls"
    assert final.message is not None
    assert final.message.tool_calls == (
        ToolCall(id="call_a", name="a", arguments='{"x": 1}'),
        ToolCall(id="call_b", name="b", arguments="{}"),
    )


async def test_non_stream_server_error_is_retried(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script(ServerStep.error(502, "Bad gateway"), "recovered")
    model = make_model()

    responses = await collect(model, ModelRequest(messages=HELLO.messages, stream=False))

    assert final_of(responses).message == Message(role="assistant", content="recovered")
    assert len(openai_server.requests) == 2


# -- the model contract and the catalog ---------------------------------------------------------


def test_openai_model_satisfies_the_model_protocol() -> None:
    model = OpenAIModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key=None)
    assert isinstance(model, Model)


def test_model_info_uses_the_catalog_unless_overridden() -> None:
    catalog = OpenAIModel(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key=None)
    override = OpenAIModel(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key=None, context_window=4096)

    assert catalog.info().context_window == 128_000
    assert catalog.info().name == "gpt-4o-mini"
    assert catalog.info().provider == "openai"
    assert override.info().context_window == 4096


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("gpt-4o", 128_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4-turbo", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5-turbo", 16_385),
        ("o1", 200_000),
        ("o1-mini", 128_000),
        ("o3-mini", 200_000),
        ("o4-mini", 200_000),
        ("deepseek-chat", 64_000),
        ("deepseek-reasoner", 64_000),
    ],
)
def test_known_models_have_their_catalog_window(name: str, window: int) -> None:
    assert context_window_for(name, None) == window


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("gpt-4o-2024-08-06", 128_000),
        ("gpt-4-0613", 8_192),  # "gpt-4", not the longer "gpt-4o" family
        ("gpt-4-turbo-2024-04-09", 128_000),
        ("gpt-4.1-mini-2025-04-14", 1_047_576),
        ("qwen2.5:7b", 32_768),
        ("qwen-plus-latest", 131_072),  # "qwen-plus" beats the shorter "qwen"
        ("Qwen/Qwen2.5-7B-Instruct", 32_768),
        ("llama3.1:8b", 131_072),
        ("llama3:8b", 8_192),
        ("meta-llama/Llama-3.3-70B-Instruct", 131_072),
    ],
)
def test_unlisted_names_match_the_longest_known_prefix(name: str, window: int) -> None:
    assert context_window_for(name, None) == window


@pytest.mark.parametrize("name", ["my-private-model", "", "claude-opus"])
def test_unknown_model_falls_back_to_8192(name: str) -> None:
    assert known_context_window(name) is None
    assert context_window_for(name, None) == FALLBACK_CONTEXT_WINDOW == 8192


def test_override_wins_over_the_catalog() -> None:
    assert context_window_for("gpt-4.1", 32_000) == 32_000
    assert context_window_for("my-private-model", 65_536) == 65_536


def test_non_positive_override_is_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        context_window_for("gpt-4o", 0)


# -- the test double itself -----------------------------------------------------------------------


async def test_request_after_the_script_ran_out_fails_fast_and_is_reported(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script("only answer")
    model = make_model(max_retries=3)
    await collect(model, HELLO)

    with pytest.raises(ModelError, match="script is exhausted"):
        await collect(model, HELLO)

    assert len(openai_server.requests) == 2  # not retried
    with pytest.raises(AssertionError, match="after the script ran out"):
        openai_server.assert_consumed()
    assert EXHAUSTED_MESSAGE.startswith("ScriptedOpenAIServer")


def test_unconsumed_steps_fail_assert_consumed() -> None:
    with ScriptedOpenAIServer("never requested") as server, pytest.raises(AssertionError, match="1 scripted step"):
        server.assert_consumed()


async def test_tool_result_without_a_preceding_call_is_refused_like_openai(
    openai_server: ScriptedOpenAIServer,
    make_model: MakeModel,
) -> None:
    openai_server.script("never requested")
    request = ModelRequest(
        messages=(Message(role="user", content="hi"), Message(role="tool", content="{}", tool_call_id="call_ghost"))
    )

    with pytest.raises(ModelError, match="must be a response to a preceeding message"):
        await collect(make_model(), request)

    assert openai_server.remaining == 1  # a refused request consumes no step


def test_server_streams_tool_call_arguments_in_several_fragments() -> None:
    with ScriptedOpenAIServer(ServerStep.call("get_weather", {"city": "Paris"}, id="call_1")) as server:
        raw = _post(
            server,
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )

    payloads = [line[len("data: ") :] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    fragments = [
        call["function"]["arguments"]
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", ())
    ]
    assert len([f for f in fragments if f]) > 1
    assert "".join(fragments) == '{"city": "Paris"}'
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_server_lists_models() -> None:
    with ScriptedOpenAIServer(models=("gpt-4o", "gpt-4o-mini")) as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            listed = json.load(response)

    assert [m["id"] for m in listed["data"]] == ["gpt-4o", "gpt-4o-mini"]
    assert listed["object"] == "list"


def _post(server: ScriptedOpenAIServer, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read()
