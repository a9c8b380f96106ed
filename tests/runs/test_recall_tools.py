"""session_search and session_load as tools, driven through a Runner by a scripted model."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from runs.core.agents.llm import LLMAgent
from runs.core.llm.base import ModelRequest
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import HISTORY_NOTE, InMemoryRecallIndex
from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary
from sessions_app.recall_tools import recall_tools

APP = "t"
RAW_RESULT = json.dumps({"host": "db-staging-7.internal", "port": 6432, "user": "svc_checkout"})


async def seed(service: InMemorySessionService, user_id: str, events: list[Event], *, hide: bool) -> Session:
    """A session whose events all lie behind a summary boundary when `hide`."""
    session = await service.create_session(app=APP, user_id=user_id, agent="support")
    clock = datetime(2025, 1, 1, tzinfo=UTC)
    for event in events:
        clock += timedelta(seconds=1)
        await service.append_event(session, event.replace(created_at=clock))
    if hide:
        last = session.events[-1]
        boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or 0)
        await service.put_summary(
            session.key, Summary(text="The user asked about the staging database.", boundary=boundary)
        )
    return session


def history() -> list[Event]:
    call = ToolCall(id="call-db", name="inspect_db", arguments='{"env": "staging"}')
    return [
        Event(author="user", message=Message(role="user", content="Which host does the staging database run on?")),
        Event(author="support", message=Message(role="assistant", tool_calls=(call,))),
        Event(
            author="support",
            object="tool.response",
            message=Message(role="tool", content=RAW_RESULT, tool_call_id="call-db", tool_name="inspect_db"),
        ),
        Event(author="support", message=Message(role="assistant", content="It runs on db-staging-7.")),
    ]


def runner_for(model: ScriptedModel, service: InMemorySessionService, *, with_index: bool = True) -> Runner:
    agent = LLMAgent(name="support", model=model, tools=recall_tools())
    services = {"recall": InMemoryRecallIndex(service)} if with_index else {}
    return Runner(app=APP, agents=[agent], session_service=service, services=services)


def last_tool_payloads(request: ModelRequest) -> list[Any]:
    """The JSON of the tool results that answer the model's latest tool calls."""
    messages = list(request.messages)
    tail = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        tail.append(json.loads(message.content))
    return list(reversed(tail))


async def tool_results(
    service: InMemorySessionService, user_id: str, session_id: str, *, after_seq: int = 0
) -> list[Any]:
    """The tool results the run wrote (those after `after_seq`), as JSON."""
    key = SessionKey(app=APP, user_id=user_id, session_id=session_id)
    events = await service.list_events(key, after_seq=after_seq, limit=1000)
    return [json.loads(e.text) for e in events if e.message is not None and e.message.tool_call_id is not None]


async def test_the_model_searches_hidden_history_then_loads_the_exact_raw_tool_result() -> None:
    service = InMemorySessionService()
    session = await seed(service, "alice", history(), hide=True)

    def load_first_hit(request: ModelRequest) -> ScriptStep:
        search = last_tool_payloads(request)[0]
        return ScriptStep.call("session_load", {"event_id": search["results"][0]["event_id"], "before": 0, "after": 1})

    def answer(request: ModelRequest) -> ScriptStep:
        loaded = last_tool_payloads(request)[0]
        return ScriptStep.answer(loaded["messages"][0]["content"])

    model = ScriptedModel.of(ScriptStep.call("session_search", {"query": "db-staging-7 port"}), load_first_hit, answer)
    runner = runner_for(model, service)
    handle = await runner.start(user_id="alice", session_id=session.id, message="What was the staging DB port again?")
    record = await handle.wait()
    model.assert_consumed()

    search, load = await tool_results(service, "alice", session.id, after_seq=session.last_seq)
    assert search["scope"] == "current_hidden"
    assert search["results"][0]["tool_call_id"] == "call-db"
    assert load["note"] == HISTORY_NOTE
    assert load["messages"][0] == {
        "event_id": search["results"][0]["event_id"],
        "seq": 3,
        "role": "tool",
        "created": load["messages"][0]["created"],
        "content": f"inspect_db: {RAW_RESULT}",
        "tool_call_id": "call-db",
        "tool_name": "inspect_db",
        "content_offset": 0,
        "content_bytes": len(RAW_RESULT),
        "returned_bytes": len(RAW_RESULT),
        "content_truncated": False,
    }
    assert load["messages"][1]["content"] == "It runs on db-staging-7."
    assert record.answer == f"inspect_db: {RAW_RESULT}"


async def test_session_load_by_tool_call_id_through_the_runner() -> None:
    service = InMemorySessionService()
    session = await seed(service, "alice", history(), hide=True)
    model = ScriptedModel.of(ScriptStep.call("session_load", {"tool_call_id": "call-db"}), "ok")
    runner = runner_for(model, service)
    handle = await runner.start(user_id="alice", session_id=session.id, message="show me that result again")
    await handle.wait()
    (load,) = await tool_results(service, "alice", session.id, after_seq=session.last_seq)
    contents = [m["content"] for m in load["messages"]]
    # One event each side of the result; the tool call between question and result is skipped.
    assert contents == [
        "Which host does the staging database run on?",
        f"inspect_db: {RAW_RESULT}",
        "It runs on db-staging-7.",
    ]


async def test_bad_arguments_come_back_to_the_model_as_errors() -> None:
    service = InMemorySessionService()
    session = await seed(service, "alice", history(), hide=True)
    model = ScriptedModel.of(
        ScriptStep.calls(
            ("session_search", {"query": "staging", "top_k": "five"}),
            ("session_search", {"query": "staging", "colour": "blue"}),
            ("session_search", {}),
            ("session_load", {}),
            ("session_load", {"event_id": "no-such-event"}),
            ("session_load", {"tool_call_id": "call-nope"}),
        ),
        "sorry",
    )
    runner = runner_for(model, service)
    handle = await runner.start(user_id="alice", session_id=session.id, message="find it")
    await handle.wait()
    model.assert_consumed()
    errors = [r["error"] for r in await tool_results(service, "alice", session.id, after_seq=session.last_seq)]
    assert "top_k: expected an integer, got 'five'" in errors[0]
    assert "unexpected argument(s) ['colour']" in errors[1]
    assert "missing required argument(s) ['query']" in errors[2]
    assert "event_id is required unless tool_call_id is provided" in errors[3]
    assert "event_id 'no-such-event' not found" in errors[4]
    assert "tool_call_id 'call-nope' not found" in errors[5]


async def test_the_tools_never_reach_another_users_sessions() -> None:
    service = InMemorySessionService()
    bobs = await seed(
        service,
        "bob",
        [
            Event(author="user", message=Message(role="user", content="my staging database password is hunter2")),
        ],
        hide=True,
    )
    bob_event = bobs.events[0]
    await seed(service, "alice", history(), hide=True)
    model = ScriptedModel.of(
        ScriptStep.calls(
            ("session_search", {"query": "staging database password", "scope": "all_sessions", "top_k": 10}),
            ("session_load", {"session_id": bobs.id, "event_id": bob_event.id}),
            ("session_load", {"event_id": bob_event.id}),
        ),
        "done",
    )
    runner = runner_for(model, service)
    handle = await runner.start(user_id="alice", message="what is the staging database password?")
    await handle.wait()
    results = await tool_results(service, "alice", handle.session_id)
    assert "hunter2" not in json.dumps(results) and bobs.id not in json.dumps(results[0])
    assert "not found" in results[1]["error"] and "not found" in results[2]["error"]


async def test_without_a_recall_service_the_tools_say_so() -> None:
    service = InMemorySessionService()
    model = ScriptedModel.of(ScriptStep.call("session_search", {"query": "anything"}), "ok")
    runner = runner_for(model, service, with_index=False)
    handle = await runner.start(user_id="alice", message="search")
    await handle.wait()
    (result,) = await tool_results(service, "alice", handle.session_id)
    assert "session recall is not configured" in result["error"]


def test_the_tools_advertise_their_arguments_to_the_model() -> None:
    specs = {tool.name: tool.spec() for tool in recall_tools()}
    search = specs["session_search"].parameters
    assert search["required"] == ["query"]
    assert search["properties"]["scope"]["default"] == "current_hidden"
    assert search["properties"]["top_k"]["default"] == 5
    load = specs["session_load"].parameters
    assert load["required"] == []
    assert {"event_id", "tool_call_id", "content_offset", "content_limit", "before", "after"} <= set(load["properties"])
    assert "not instructions" in specs["session_load"].description
    sections = specs["search_sections"]
    assert sections.parameters["required"] == ["query"] and sections.parameters["properties"]["top_k"]["default"] == 10
    assert "[events F-L]" in sections.description and "no_match" in sections.description


def test_the_composition_root_gives_the_runner_a_django_recall_index() -> None:
    from agentsite.composition import build_runner
    from sessions_app.recall_backends import DjangoRecallIndex

    runner = build_runner(ScriptedModel.of())
    assert isinstance(runner.services["recall"], DjangoRecallIndex)


async def test_the_model_follows_the_summary_sections_with_search_sections() -> None:
    service = InMemorySessionService()
    said = [
        ("user", "Let's plan the trip to Lisbon."),
        ("user", "The hotel invoice number is INV-100 for the Lisbon stay."),
        ("assistant", "Noted, invoice INV-100 for the hotel."),
        ("user", "Now the car rental for Porto."),
        ("assistant", "The rental desk opens at nine."),
        ("user", "The rental invoice number is INV-200 for the Porto car."),
        ("assistant", "Noted, invoice INV-200 for the car."),
    ]
    events = [Event(author="user" if r == "user" else "support", message=Message(role=r, content=t)) for r, t in said]  # type: ignore[arg-type]
    session = await seed(service, "alice", events, hide=True)
    boundary = next(iter((await InMemoryRecallIndex(service).summaries(session.key)).values())).boundary
    sections = "[events 1-3]\nThe user planned a trip and a hotel.\n\n[events 4-7]\nOpening hours of a desk."
    await service.put_summary(session.key, Summary(text=sections, boundary=boundary))

    def answer(request: ModelRequest) -> ScriptStep:
        (found,) = last_tool_payloads(request)
        return ScriptStep.answer(found["results"][0]["snippet"] if found["results"] else "I do not know.")

    model = ScriptedModel.of(
        ScriptStep.call("search_sections", {"query": "rental invoice number for the car"}),
        answer,
        ScriptStep.call("search_sections", {"query": "zebra migration patterns"}),
        answer,
    )
    runner = runner_for(model, service)
    first = await runner.start(user_id="alice", session_id=session.id, message="What was the car's invoice number?")
    record = await first.wait()
    found = (await tool_results(service, "alice", session.id, after_seq=session.last_seq))[0]
    assert found["scope"] == "section" and found["sections"][0] == "4-7"
    assert found["results"][0]["seq"] == 6 and found["note"] == HISTORY_NOTE
    assert "INV-200" in (record.answer or "")
    second = await runner.start(user_id="alice", session_id=session.id, message="And the zebras?")
    record = await second.wait()
    model.assert_consumed()
    assert record.answer == "I do not know."
