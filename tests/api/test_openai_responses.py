"""Issue 25, item 2: the Responses API (`POST /v1/responses`, `GET /v1/responses/<id>`)
with the official `openai` client; the scripted upstream records what the agent's model
received."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pydantic
import pytest

from agentsite.asgi import application
from agentsite.runtime import run_manager
from runs.core.llm.base import Model
from tests.api.test_attachments import PNG, data_url
from tests.support.openai_asgi import agents_on, client_for, runs_of, sessions_of, stored_events, token_of
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city, from the client's service.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Incident(pydantic.BaseModel):
    host: str
    expired: bool
    severity: str


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def _system_text(request: dict[str, Any]) -> str:
    return "\n".join(
        m["content"] for m in request["messages"] if m["role"] == "system" and isinstance(m["content"], str)
    )


async def test_create_answers_with_a_message_usage_metadata_and_the_instructions_reach_the_upstream(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.answer("INC-1042 is a certificate expiry.", usage=(30, 7)))
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    raw = await client.responses.with_raw_response.create(
        model="support",
        input="What is INC-1042?",
        instructions="Answer in one sentence.",
        metadata={"ticket": "INC-1042"},
    )
    response = raw.parse()
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text == "INC-1042 is a certificate expiry."
    [item] = response.output
    assert (item.type, item.role) == ("message", "assistant")  # type: ignore[union-attr]
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (30, 7)
    assert response.metadata == {"ticket": "INC-1042"} and response.instructions == "Answer in one sentence."
    assert raw.headers["X-Session-Id"]
    # Added to the agent's own instruction, not in its place.
    system = _system_text(openai_server.requests[0])
    assert "Answer in one sentence." in system and system.index("Answer in one sentence.") > 0
    assert openai_server.requests[0]["messages"][-1] == {"role": "user", "content": "What is INC-1042?"}
    openai_server.assert_consumed()


async def test_streamed_events_come_in_the_responses_order_and_end_with_the_completed_response(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.answer("The certificate expired.", chunk_size=5))
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    stream = await client.responses.create(model="support", input="Why is payments down?", stream=True)
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 2  # streamed as the upstream streamed it
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "The certificate expired."  # type: ignore[union-attr]
    completed = events[-1].response  # type: ignore[union-attr]
    assert (completed.status, completed.output_text) == ("completed", "The certificate expired.")
    assert completed.usage is not None and completed.usage.total_tokens > 0


async def test_previous_response_id_continues_the_same_session(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Noted: the ticket is INC-7.", "You asked about INC-7.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    first = await client.responses.create(model="support", input="Remember ticket INC-7.")
    second = await client.responses.create(
        model="support", input="Which ticket did I mention?", previous_response_id=first.id
    )
    assert second.output_text == "You asked about INC-7." and second.previous_response_id == first.id
    assert len(await sessions_of(alice)) == 1
    assert len({r.session_id for r in await runs_of(alice)}) == 1
    # The second model call saw the first turn.
    said = [(m["role"], m["content"]) for m in openai_server.requests[1]["messages"] if m["role"] != "system"]
    assert said[-3:] == [
        ("user", "Remember ticket INC-7."),
        ("assistant", "Noted: the ticket is INC-7."),
        ("user", "Which ticket did I mention?"),
    ]


async def test_a_client_function_tool_is_called_answered_and_the_response_completes(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.call("get_weather", {"city": "Paris"}, id="call_w1"), "It is 18C in Paris.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    first = await client.responses.create(
        model="support",
        input="Weather in Paris?",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.call_id, call.name, json.loads(call.arguments)) == ("call_w1", "get_weather", {"city": "Paris"})
    assert openai_server.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "get_weather" in {t["function"]["name"] for t in openai_server.requests[0]["tools"]}
    # While the run waits, the stored response is the call.
    waiting = await client.responses.retrieve(first.id)
    assert [(i.type, getattr(i, "call_id", None)) for i in waiting.output] == [("function_call", "call_w1")]

    second = await client.responses.create(
        model="support",
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        input=[{"type": "function_call_output", "call_id": "call_w1", "output": "18C, sunny"}],
        metadata={"step": "2"},
    )
    assert (second.status, second.output_text) == ("completed", "It is 18C in Paris.")
    assert not [item for item in second.output if item.type == "function_call"]
    # The results continued the same run (issue 20): the same response id, showing the latest answer.
    assert second.id == first.id
    stored = await client.responses.retrieve(second.id)
    assert (stored.output_text, stored.metadata) == ("It is 18C in Paris.", {"step": "2"})
    call_message, result = openai_server.requests[1]["messages"][-2:]
    assert [c["id"] for c in call_message["tool_calls"]] == ["call_w1"]
    assert (result["role"], result["tool_call_id"], result["content"]) == ("tool", "call_w1", "18C, sunny")
    openai_server.assert_consumed()


async def test_streamed_a_stateless_client_resends_its_items_and_the_session_continues(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    """The Agents SDK's default: no previous_response_id, the whole history resent."""
    openai_server.script(ServerStep.calls(("get_weather", {"city": "Oslo"}, "call_o1"), text="Checking."), "Cold: -3C.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    question = {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]}

    stream = await client.responses.create(model="support", input=[question], tools=[WEATHER_TOOL], stream=True)  # type: ignore[list-item]
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert (done.name, json.loads(done.arguments)) == ("get_weather", {"city": "Oslo"})  # type: ignore[union-attr]
    first = events[-1].response  # type: ignore[union-attr]
    assert first.output_text == "Checking."

    resent = [
        question,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": "call_o1", "output": "-3C"},
    ]
    raw = await client.responses.with_raw_response.create(model="support", input=resent, tools=[WEATHER_TOOL])  # type: ignore[arg-type,list-item]
    second = raw.parse()
    assert second.output_text == "Cold: -3C." and raw.headers["X-Session-Match"] == "history"
    assert len(await sessions_of(alice)) == 1  # found by the resent history, nothing seeded again
    openai_server.assert_consumed()


async def test_text_format_json_schema_is_parsed_and_validated(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    good = {"host": "payments.internal", "expired": True, "severity": "high"}
    openai_server.script('{"host": "payments.internal"}', json.dumps(good))  # the first is refused and retried
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    response = await client.responses.parse(
        model="support", input="Is the payments certificate expired?", text_format=Incident
    )
    assert response.output_parsed == Incident(**good)
    sent = openai_server.requests[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Incident"
    assert "'expired' is a required property" in openai_server.requests[1]["messages"][-1]["content"]


async def test_retrieve_returns_the_owners_response_and_another_users_id_is_not_found(
    alice: Any, bob: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Stored answer.", "Not stored.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    created = await client.responses.create(model="support", input="hello", metadata={"k": "v"})

    again = await client.responses.retrieve(created.id)
    assert (again.id, again.status, again.output_text, again.metadata) == (
        created.id,
        "completed",
        "Stored answer.",
        {"k": "v"},
    )
    assert again.usage == created.usage

    with pytest.raises(openai.NotFoundError) as caught:
        await (await client_for(bob)).responses.retrieve(created.id)
    assert caught.value.body["code"] == "response_not_found"  # type: ignore[index]

    unstored = await client.responses.create(model="support", input="forget this", store=False)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(unstored.id)


async def test_a_failed_run_is_a_422_not_retried_and_a_failed_event_when_streamed(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.error(400, "upstream refused"), ServerStep.error(400, "upstream refused"))
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    with pytest.raises(openai.UnprocessableEntityError):
        await client.responses.create(model="support", input="hello")
    stream = await client.responses.create(model="support", input="hello again", stream=True)
    events = [event async for event in stream]
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and events[-1].response.error is not None  # type: ignore[union-attr]
    failed = await client.responses.retrieve(events[-1].response.id)  # type: ignore[union-attr]
    assert failed.status == "failed"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"input": "hi"}, "model", id="no-model"),
        pytest.param({"model": "support", "input": ""}, "input", id="empty-input"),
        pytest.param({"model": "support", "input": []}, "input", id="no-items"),
        pytest.param(
            {"model": "support", "input": [{"role": "robot", "content": "hi"}]}, "input[0].role", id="bad-role"
        ),
        pytest.param(
            {"model": "support", "input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0].type",
            id="item-reference",
        ),
        pytest.param(
            {"model": "support", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "input[0].content[0].type",
            id="bad-part",
        ),
        pytest.param(
            {"model": "support", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
            id="image-file-id",
        ),
        pytest.param(
            {
                "model": "support",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "look"},
                            {"type": "input_image", "image_url": "data:image/png;base64,@@@"},
                        ],
                    }
                ],
            },
            "input[0].content[1].image_url",
            id="image-does-not-decode",
        ),
        pytest.param(
            {
                "model": "support",
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "nope", "output": "x"},
                    {"role": "user", "content": "again"},
                ],
            },
            "input[1].call_id",
            id="result-for-no-call",
        ),
        pytest.param(
            {"model": "support", "input": [{"role": "assistant", "content": "hi"}]}, "input[0]", id="last-is-not-user"
        ),
        pytest.param(
            {"model": "support", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type", id="hosted-tool"
        ),
        pytest.param(
            {"model": "support", "input": "hi", "tools": [{"type": "function", "name": "lookup_ticket"}]},
            "tools[0].name",
            id="tool-name-clash",
        ),
        pytest.param(
            {"model": "support", "input": "hi", "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice.name",
            id="choice-names-no-tool",
        ),
        pytest.param(
            {
                "model": "support",
                "input": "hi",
                "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}},
            },
            "text.format.schema",
            id="bad-schema",
        ),
        pytest.param(
            {"model": "support", "input": "hi", "metadata": {str(i): "v" for i in range(17)}},
            "metadata",
            id="too-much-metadata",
        ),
        pytest.param(
            {"model": "support", "input": "hi", "previous_response_id": "chatcmpl-1"},
            "previous_response_id",
            id="not-a-response-id",
        ),
        pytest.param({"model": "support", "input": "hi", "background": True}, "background", id="background"),
        pytest.param({"model": "support", "input": "hi", "stream": "yes"}, "stream", id="stream-not-bool"),
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter_and_stores_nothing(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    body: dict[str, Any],
    param: str,
) -> None:
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.post("/responses", cast_to=dict, body=body)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert await sessions_of(alice) == [] and await runs_of(alice) == []
    assert openai_server.requests == []


async def test_a_session_header_that_is_not_the_previous_responses_session_is_a_400(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("First.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    first = await client.responses.create(model="support", input="hello")
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="support",
            input="again",
            previous_response_id=first.id,
            extra_headers={"X-Session-Id": "another-session"},
        )
    assert (caught.value.body["param"], caught.value.body["code"]) == ("X-Session-Id", "session_mismatch")  # type: ignore[index]
    assert len(await runs_of(alice)) == 1


async def test_unknown_previous_response_and_another_users_are_404(
    alice: Any, bob: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Alice's answer.")
    agents_on(openai_server, use_model)
    mine = await (await client_for(alice)).responses.create(model="support", input="hello")
    bobs = await client_for(bob)
    for previous in (mine.id, "resp_does-not-exist"):
        with pytest.raises(openai.NotFoundError) as caught:
            await bobs.responses.create(model="support", input="hi", previous_response_id=previous)
        assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert await sessions_of(bob) == []
    # Alice's session was not touched.
    [run] = await runs_of(alice)
    said = [e.text for e in await stored_events(run.session_id) if e.message is not None and e.message.role == "user"]
    assert said == ["hello"]


async def test_a_request_repeated_with_its_idempotency_key_gets_the_first_response_and_makes_one_run(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Only once.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    first = await client.responses.create(model="support", input="hello", extra_headers={"Idempotency-Key": "k-1"})
    raw = await client.responses.with_raw_response.create(
        model="support", input="hello", extra_headers={"Idempotency-Key": "k-1"}
    )
    again = raw.parse()
    assert raw.headers["Idempotent-Replayed"] == "true"
    assert (again.id, again.output_text) == (first.id, "Only once.")
    assert len(await runs_of(alice)) == 1
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model="support", input="something else", extra_headers={"Idempotency-Key": "k-1"})
    assert caught.value.body["code"] == "idempotency_key_reused"  # type: ignore[index]


async def test_a_streamed_json_answer_is_one_delta_of_the_validated_value(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    good = {"host": "payments.internal", "expired": True, "severity": "high"}
    openai_server.script(ServerStep.answer(json.dumps(good), chunk_size=3))
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    stream = await client.responses.create(
        model="support",
        input="Is it expired?",
        stream=True,
        text={"format": {"type": "json_schema", "name": "incident", "schema": Incident.model_json_schema()}},
    )
    events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]  # type: ignore[union-attr]
    assert len(deltas) == 1 and json.loads(deltas[0]) == good
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.text is not None and completed.text.format.type == "json_schema"


async def test_an_input_image_reaches_the_upstream_as_an_image_part(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("A transparent pixel.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    response = await client.responses.create(
        model="support",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in this image?"},
                    {"type": "input_image", "image_url": data_url(PNG), "detail": "low"},
                ],
            }
        ],
    )
    assert response.output_text == "A transparent pixel."
    user = openai_server.requests[0]["messages"][-1]
    assert user["content"][0] == {"type": "text", "text": "What is in this image?"}
    assert user["content"][1]["image_url"]["url"] == data_url(PNG)


class HangingUpTransport(httpx.AsyncBaseTransport):
    """The ASGI app behind a client that gives up after `patience_s` and hangs up, as a
    server sees it: `http.disconnect`, on which Django cancels the view (httpx's
    ASGITransport cancels its own call instead, which the view outlives)."""

    def __init__(self, patience_s: float) -> None:
        self.patience_s = patience_s
        self.attempts = 0
        self.abandoned: list[asyncio.Task[None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        body, hung_up, answered = await request.aread(), asyncio.Event(), asyncio.Event()
        start: dict[str, Any] = {}
        chunks: list[bytes] = []
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await hung_up.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    answered.set()

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": "http",
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "root_path": "",
            "headers": list(request.headers.raw),
            "client": ("127.0.0.1", 50000),
            "server": ("localhost", 80),
        }
        task = asyncio.create_task(application(scope, receive, send))
        try:
            await asyncio.wait_for(answered.wait(), self.patience_s)
        except TimeoutError:
            hung_up.set()
            self.abandoned.append(task)
            raise httpx.ReadTimeout("gave up waiting", request=request) from None
        hung_up.set()
        await task
        return httpx.Response(start["status"], headers=start.get("headers", []), content=b"".join(chunks))


@pytest.mark.parametrize("surface", ["responses", "chat"])
async def test_a_client_that_gives_up_while_the_run_starts_does_not_cancel_it_and_its_retry_joins(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None], surface: str
) -> None:
    """A slow start (a cold server, a loaded database) outlasting the client's timeout: the
    client hangs up and retries under the same Idempotency-Key; the run still starts, and
    the retry gets its answer (before, the hang-up cancelled the start and every retry
    replayed the cancelled run: 422)."""
    openai_server.script("Started anyway.")
    agents_on(openai_server, use_model)
    runner = run_manager().runner
    admit = runner.admission

    async def slow_admission(user_id: str) -> None:
        await asyncio.sleep(0.8)  # longer than the client waits
        if admit is not None:
            await admit(user_id)

    runner.admission = slow_admission
    transport = HangingUpTransport(patience_s=0.5)
    client = openai.AsyncOpenAI(
        base_url="http://localhost/v1",
        api_key=await token_of(alice),
        max_retries=4,
        http_client=httpx.AsyncClient(transport=transport),
    )
    key = {"Idempotency-Key": f"slow-start-{surface}"}
    if surface == "responses":
        answer = (await client.responses.create(model="support", input="hello", extra_headers=key)).output_text
    else:
        completion = await client.chat.completions.create(
            model="support", messages=[{"role": "user", "content": "hello"}], extra_headers=key
        )
        answer = completion.choices[0].message.content
    await asyncio.wait_for(asyncio.gather(*transport.abandoned, return_exceptions=True), 10)
    assert answer == "Started anyway."
    assert transport.attempts >= 2
    assert [r.status for r in await runs_of(alice)] == ["completed"]
