"""`POST /agui/<agent>` and `/agui/<agent>/cancel` (SPEC 12.1), over Django's async test client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from ag_ui.core import Event as AguiEvent
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token

from agentsite.composition import run_manager
from runs import models as run_orm
from runs.core.agents.llm import LLMAgent
from runs.core.errors import UsageError
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app import models as orm
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

pytestmark = pytest.mark.django_db(transaction=True)

AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)
QUESTION = "Why does checkout fail TLS handshakes?"
ANSWER = "The intermediate certificate is missing from the chain."


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def bob_token(bob: Any) -> str:
    return Token.objects.get_or_create(user=bob)[0].key


def run_input(thread_id: str, *messages: dict[str, Any], run_id: str = "client-run-1") -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": list(messages) or [{"id": "u1", "role": "user", "content": QUESTION}],
    }


async def post(path: str, body: Any, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    raw = body if isinstance(body, str) else json.dumps(body)
    return await AsyncClient().post(path, data=raw, content_type="application/json", headers=headers)


def parse_sse(chunks: list[bytes]) -> list[dict[str, Any]]:
    """Every `data:` event of the stream, each validated by its `ag_ui.core` model."""
    text = b"".join(chunks).decode()
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = json.loads(block[len("data: ") :])
        AGUI_EVENT.validate_python(data)
        events.append(data)
    return events


async def read_all(response: Any) -> list[dict[str, Any]]:
    return parse_sse([chunk async for chunk in response.streaming_content])


async def read_until(stream: AsyncIterator[bytes], event_type: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async for chunk in stream:
        seen.extend(parse_sse([chunk]))
        if seen and seen[-1]["type"] == event_type:
            return seen
    raise AssertionError(f"the stream ended before {event_type}: {[e['type'] for e in seen]}")


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def slow_answer(words: int = 40, delay_s: float = 0.05) -> ScriptStep:
    return ScriptStep.answer("word " * words, chunk_size=5, delay_s=delay_s)


@sync_to_async
def ledger(session_id: str) -> list[Event]:
    from sessions_app import mapping

    return [mapping.event_from_row(r) for r in orm.Event.objects.filter(session_id=session_id).order_by("seq")]


@sync_to_async
def run_status(run_id: str) -> str:
    return run_orm.Run.objects.get(pk=run_id).status


async def wait_until_ended(run_id: str, timeout_s: float = 5.0) -> str:
    record = await run_manager().await_run(run_id, timeout_s)
    assert record is not None
    return record.status


# -- a full run ---------------------------------------------------------------------------------


async def test_a_run_streams_valid_ag_ui_events_from_run_started_to_run_finished(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of(
        ScriptStep.call("search_logs", {"service": "checkout-api", "query": "tls"}, id="call_logs"),
        ScriptStep.answer(ANSWER, chunk_size=6),
    )
    use_model(model)
    response = await post("/agui/support", run_input("thread-a"), alice_token)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = await read_all(response)
    model.assert_consumed()

    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("RUN_STARTED") == 1 and "RUN_ERROR" not in kinds
    run_id = events[0]["runId"]
    assert events[0]["threadId"] == "thread-a" and events[-1]["runId"] == run_id
    assert await run_status(run_id) == "completed"
    assert kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_ARGS") < kinds.index("TOOL_CALL_END")
    assert kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_START")
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"]) == ("call_logs", "search_logs")
    assert json.loads(next(e for e in events if e["type"] == "TOOL_CALL_ARGS")["delta"])["query"] == "tls"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_logs" and "checkout-api" in result["content"]
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == ANSWER
    assert kinds.count("TEXT_MESSAGE_CONTENT") > 1  # streamed, not sent whole
    # The thread is now alice's session, with the whole run in its ledger.
    stored = await ledger("thread-a")
    assert stored[0].is_user_message and stored[0].text == QUESTION
    assert stored[-1].object == OBJECT_RUNNER_COMPLETION


async def test_session_authentication_works_too(alice: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("Hello."))
    client = AsyncClient()
    await client.aforce_login(alice)
    response = await client.post(
        "/agui/support", data=json.dumps(run_input("thread-cookie")), content_type="application/json"
    )
    assert response.status_code == 200
    assert types(await read_all(response))[-1] == "RUN_FINISHED"


async def test_a_thread_with_state_starts_its_stream_with_a_state_snapshot(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Noted.", "Noted too."))
    service = DjangoSessionService()
    session = await service.create_session(app="agentsite", user_id=str(alice.pk), session_id="stateful")
    await service.append_event(session, Event(author="support", state_delta={"incident": "INC-7", "a/b": 1}))
    events = await read_all(await post("/agui/support", run_input("stateful"), alice_token))
    assert types(events)[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert events[1]["snapshot"] == {"incident": "INC-7", "a/b": 1}
    fresh = await read_all(await post("/agui/support", run_input("stateless"), alice_token))
    assert "STATE_SNAPSHOT" not in types(fresh)


# -- refusals --------------------------------------------------------------------------------------


async def test_without_credentials_the_answer_is_401_in_the_envelope(alice: Any) -> None:
    response = await post("/agui/support", run_input("t"), None)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    wrong = await post("/agui/support", run_input("t"), "not-a-token")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "authentication_failed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runId": "r", "messages": [{"id": "1", "role": "user", "content": "hi"}]}, "threadId"),
        (run_input("t", {"id": "1", "role": "tool", "content": "ok"}), "messages.0.toolCallId"),
        (run_input("t", {"id": "1", "role": "assistant", "content": "hi"}), "messages.0.role"),
        (run_input("t", {"id": "1", "role": "user", "content": 5}), "messages.0.content"),
        (run_input("t", {"id": "1", "role": "user", "content": "   "}), "messages.0.content"),
        ({**run_input("t"), "messages": []}, "messages"),
        ({**run_input("t"), "messages": "hi"}, "messages"),
        ({**run_input("t"), "threadId": "x" * 65}, "threadId"),
    ],
)
async def test_invalid_input_is_422_naming_the_field(alice_token: str, body: dict[str, Any], field: str) -> None:
    response = await post("/agui/support", body, alice_token)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_input", field)
    assert error["message"]


async def test_malformed_json_is_400(alice_token: str) -> None:
    response = await post("/agui/support", "{not json", alice_token)
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_json"


async def test_an_unknown_agent_is_404(alice_token: str) -> None:
    response = await post("/agui/nobody", run_input("t"), alice_token)
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "unknown_agent",
        "message": "agent 'nobody' not found",
        "field": "agent",
    }


async def test_someone_elses_thread_is_404_and_stays_untouched(
    alice_token: str, bob_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Bob's answer."))
    mine = await post("/agui/support", run_input("bobs-thread"), bob_token)
    await read_all(mine)
    response = await post("/agui/support", run_input("bobs-thread"), alice_token)
    assert response.status_code == 404
    assert response.json()["error"]["field"] == "threadId"
    assert len(await ledger("bobs-thread")) == 3  # user, answer, completion: alice added nothing


async def test_a_second_run_on_a_thread_with_an_active_run_is_409(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(slow_answer(words=20), "Second run."))
    first = await post("/agui/support", run_input("busy"), alice_token)
    assert first.status_code == 200
    second = await post("/agui/support", run_input("busy", run_id="client-run-2"), alice_token)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "run_active"
    assert types(await read_all(first))[-1] == "RUN_FINISHED"
    third = await post("/agui/support", run_input("busy", run_id="client-run-3"), alice_token)
    assert third.status_code == 200  # the thread is free again
    assert types(await read_all(third))[-1] == "RUN_FINISHED"


async def test_of_two_simultaneous_posts_on_a_new_thread_one_runs_and_one_is_409(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(slow_answer(words=10), "unused"))
    responses = await asyncio.gather(
        *(post("/agui/support", run_input("race", run_id=f"client-{i}"), alice_token) for i in range(2))
    )
    assert sorted(r.status_code for r in responses) == [200, 409]
    winner = next(r for r in responses if r.status_code == 200)
    assert types(await read_all(winner))[-1] == "RUN_FINISHED"


async def test_get_is_405(alice_token: str) -> None:
    response = await AsyncClient().get("/agui/support", headers={"Authorization": f"Bearer {alice_token}"})
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"


# -- cancel, disconnect, deadline --------------------------------------------------------------


async def test_cancel_ends_the_stream_with_run_finished_not_run_error(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(slow_answer(words=200)))
    response = await post("/agui/support", run_input("to-cancel"), alice_token)
    stream = response.streaming_content.__aiter__()
    seen = await read_until(stream, "TEXT_MESSAGE_CONTENT")
    run_id = seen[0]["runId"]

    cancel = await post("/agui/support/cancel", {"threadId": "to-cancel", "runId": run_id}, alice_token)
    assert cancel.status_code == 202
    assert cancel.json() == {"threadId": "to-cancel", "runId": run_id, "status": "cancelling"}
    rest = parse_sse([chunk async for chunk in stream])
    kinds = types(seen + rest)
    assert kinds[-1] == "RUN_FINISHED" and "RUN_ERROR" not in kinds
    assert rest[-1]["outcome"] == {"type": "cancelled"}
    assert kinds.index("TEXT_MESSAGE_END") < kinds.index("RUN_FINISHED")  # open streams closed first
    assert await run_status(run_id) == "cancelled"


async def test_cancel_of_a_thread_without_an_active_run_is_404(
    alice_token: str, bob_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Done.", "Done again."))
    await read_all(await post("/agui/support", run_input("finished"), alice_token))
    idle = await post("/agui/support/cancel", {"threadId": "finished"}, alice_token)
    assert idle.status_code == 404 and idle.json()["error"]["code"] == "run_not_found"
    unknown = await post("/agui/support/cancel", {"threadId": "no-such-thread"}, alice_token)
    assert unknown.status_code == 404
    foreign = await post("/agui/support/cancel", {"threadId": "finished"}, bob_token)
    assert foreign.status_code == 404 and foreign.json()["error"]["field"] == "threadId"
    missing = await post("/agui/support/cancel", {}, alice_token)
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "threadId"


async def test_a_client_that_disconnects_does_not_stop_the_run(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(slow_answer(words=30, delay_s=0.02)))
    response = await post("/agui/support", run_input("walk-away"), alice_token)
    stream = response.streaming_content.__aiter__()
    run_id = (await read_until(stream, "RUN_STARTED"))[0]["runId"]
    await stream.aclose()  # the client goes away
    assert await wait_until_ended(run_id) == "completed"
    assert (await ledger("walk-away"))[-1].extensions["status"] == "completed"


async def test_a_run_past_its_deadline_is_stopped_and_ends_with_run_error(
    alice_token: str, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_AGUI_RUN_TIMEOUT_S = 1
    use_model(ScriptedModel.of(slow_answer(words=400, delay_s=0.05)))
    response = await post("/agui/support", run_input("too-slow"), alice_token)
    events = await asyncio.wait_for(read_all(response), 10)
    assert types(events)[-1] == "RUN_ERROR"
    assert events[-1]["code"] == "timeout"
    assert types(events).count("RUN_ERROR") == 1


# -- client-side tools ------------------------------------------------------------------------


async def _thread_waiting_for_a_client_tool(user: Any, thread_id: str) -> None:
    """An earlier run whose model called `confirm_restart`, a tool the client runs."""
    service = DjangoSessionService()
    session = await service.create_session(app="agentsite", user_id=str(user.pk), session_id=thread_id, agent="support")
    await service.append_event(session, Event(author="user", message=Message(role="user", content="Restart payments?")))
    await service.append_event(
        session,
        Event(
            id="m-call",
            author="support",
            message=Message(
                role="assistant",
                tool_calls=(ToolCall(id="call_confirm", name="confirm_restart", arguments="{}"),),
            ),
            extensions={"message_id": "m-call"},
        ),
    )
    await service.append_event(
        session,
        Event(author="agentsite", object=OBJECT_RUNNER_COMPLETION, done=True, extensions={"status": "completed"}),
    )


async def test_client_side_tool_results_continue_the_conversation(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of("Restarting payments now.")
    use_model(model)
    await _thread_waiting_for_a_client_tool(alice, "client-tools")
    body = run_input(
        "client-tools",
        {"id": "u1", "role": "user", "content": "Restart payments?"},
        {
            "id": "m-call",
            "role": "assistant",
            "toolCalls": [
                {"id": "call_confirm", "type": "function", "function": {"name": "confirm_restart", "arguments": "{}"}}
            ],
        },
        {"id": "tool-msg-1", "role": "tool", "toolCallId": "call_confirm", "content": "approved by the operator"},
    )
    response = await post("/agui/support", body, alice_token)
    assert response.status_code == 200, response.content
    events = await read_all(response)
    kinds = types(events)
    assert kinds[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert events[1] == {
        **events[1],
        "messageId": "tool-msg-1",
        "toolCallId": "call_confirm",
        "content": "approved by the operator",
    }
    assert kinds.count("TOOL_CALL_RESULT") == 1 and kinds[-1] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Restarting payments now."

    # The model saw the call and its result, in order, and the result is in the ledger.
    seen = [(m.role, m.tool_call_id, m.content) for m in model.requests[0].messages if m.role != "system"]
    assert seen[-2:] == [("assistant", None, ""), ("tool", "call_confirm", "approved by the operator")]
    stored = [e for e in await ledger("client-tools") if e.is_tool_result]
    assert [(e.author, e.message.tool_name, e.text) for e in stored if e.message] == [
        ("support", "confirm_restart", "approved by the operator")
    ]


async def test_a_tool_result_that_answers_no_pending_call_is_422(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    await _thread_waiting_for_a_client_tool(alice, "client-tools-bad")
    body = run_input(
        "client-tools-bad",
        {"id": "t1", "role": "tool", "toolCallId": "call_confirm", "content": "yes"},
        {"id": "t2", "role": "tool", "toolCallId": "call_unknown", "content": "?"},
    )
    response = await post("/agui/support", body, alice_token)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "messages.1.toolCallId"
    assert not [e for e in await ledger("client-tools-bad") if e.is_tool_result]  # nothing persisted


# -- the Runner side of client-side tool results ------------------------------------------------


async def test_runner_start_refuses_tool_results_that_answer_no_pending_call() -> None:
    service = InMemorySessionService()
    model = ScriptedModel.of(ScriptStep.call("confirm", {}, id="c1"), "asked", "Thanks, done.")
    runner = Runner(app="t", agents=[LLMAgent(name="a", model=model)], session_service=service)
    first = await runner.start(user_id="u", message="go", stream=True)
    [e async for e in first.events()]  # the unknown tool's error result answers c1 ...
    key = SessionKey(app="t", user_id="u", session_id=first.session_id)
    session = await service.get_session(key)
    assert session is not None
    # ... so a second result for c1 is refused, and so is one for a call nobody made.
    with pytest.raises(UsageError, match="already has a result"):
        await runner.start(
            user_id="u",
            session_id=first.session_id,
            tool_results=[Message(role="tool", content="x", tool_call_id="c1")],
        )
    with pytest.raises(UsageError, match="answers no tool call"):
        await runner.start(
            user_id="u",
            session_id=first.session_id,
            tool_results=[Message(role="tool", content="x", tool_call_id="nope")],
        )
    with pytest.raises(UsageError, match="not both"):
        await runner.start(
            user_id="u", message="hi", tool_results=[Message(role="tool", content="x", tool_call_id="c1")]
        )
    with pytest.raises(UsageError, match="tool_call_id"):
        await runner.start(user_id="u", tool_results=[Message(role="user", content="x")])
    assert len(await service.list_events(key, limit=100)) == len(session.events)  # nothing written


async def test_a_new_threads_earlier_messages_are_stored_as_earlier_turns_before_the_run(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of("Port 6432.")
    use_model(model)
    history = [
        {"id": "s", "role": "system", "content": "client instructions are not history"},
        {"id": "u0", "role": "user", "content": "The staging database listens on 6432."},
        {
            "id": "a0",
            "role": "assistant",
            "content": "",
            "toolCalls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {"name": "lookup_ticket", "arguments": '{"ticket_id": "INC-6432"}'},
                },
            ],
        },
        {"id": "t0", "role": "tool", "content": "noted", "toolCallId": "call_x"},
        {"id": "a1", "role": "assistant", "content": "Noted."},
        {"id": "u1", "role": "user", "content": "Which port was it?"},
    ]
    response = await post("/agui/support", run_input("thread-seeded", *history), alice_token)
    assert response.status_code == 200
    await read_all(response)
    model.assert_consumed()

    stored = await ledger("thread-seeded")
    seeded = [e for e in stored if e.extensions.get("seed")]
    assert [(e.role, e.text) for e in seeded] == [
        ("user", "The staging database listens on 6432."),
        ("assistant", ""),
        ("tool", "noted"),
        ("assistant", "Noted."),
    ]
    current = next(e for e in stored if e.text == "Which port was it?")
    assert not current.extensions.get("seed") and current.invocation_id not in {e.invocation_id for e in seeded}
    assert seeded[-1].done  # one completed earlier turn
    # The model saw the history as its own earlier turn (same agent), then the question.
    sent = model.requests[0].messages
    assert [m.role for m in sent if m.role != "system"] == ["user", "assistant", "tool", "assistant", "user"]


# -- SPEC 1.2.1 ------------------------------------------------------------------------------------


async def test_spec_1_2_1_a_message_with_an_empty_or_missing_role_and_a_payload_is_a_user_message(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of(ANSWER)
    use_model(model)
    body = run_input(
        "thread-no-role",
        {"id": "u0", "content": "I run checkout-api."},
        {"id": "a0", "role": "assistant", "content": "Noted."},
        {"id": "u1", "role": "", "content": QUESTION},
    )

    events = await read_all(await post("/agui/support", body, alice_token))

    assert types(events)[-1] == "RUN_FINISHED"
    stored = await ledger("thread-no-role")
    current = next(e for e in stored if e.is_user_message and not e.extensions.get("seed"))
    assert (current.author, current.role, current.text) == ("user", "user", QUESTION)
    sent = [(m.role, m.content) for m in model.requests[0].messages if m.role != "system"]
    assert sent == [("user", "I run checkout-api."), ("assistant", "Noted."), ("user", QUESTION)]


async def test_spec_1_2_1_an_empty_role_without_a_payload_is_422_naming_the_message(
    alice: Any, alice_token: str
) -> None:
    response = await post(
        "/agui/support", run_input("thread-empty", {"id": "u1", "role": "", "content": ""}), alice_token
    )
    assert response.status_code == 422
    assert response.json()["error"]["field"].startswith("messages.0")
