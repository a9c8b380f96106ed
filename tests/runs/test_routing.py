"""Await-user-reply routing (SPEC 1.2 step 6, issue 19 item 2) through the Runner: an agent
that asks the user gets the reply, a chain continues from the agent that asked, an explicit
agent choice clears the route, a stale or invalid route is cleared and ignored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from runs.core.agents.composite import OBJECT_PARALLEL_RESULTS, ChainAgent, CycleAgent, ParallelAgent
from runs.core.agents.graph import GraphAgent, InMemoryCheckpointStore, NodeContext, StateGraph, StateSchema
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.routing import ROUTE_EXTENSION, ROUTE_STATE_KEY
from runs.core.runner import Runner
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"


def make_runner(
    agents: Sequence[Any], service: InMemorySessionService | None = None
) -> tuple[Runner, InMemorySessionService]:
    service = service or InMemorySessionService()
    return Runner(app=APP, agents=agents, session_service=service), service


async def turn(runner: Runner, message: str, **kwargs: Any) -> tuple[list[Event], Any]:
    handle = await runner.start(user_id="alice", message=message, stream=True, **kwargs)
    events = [e async for e in handle.events()]
    return events, await handle.wait()


async def state(service: InMemorySessionService, session_id: str) -> Mapping[str, Any]:
    session = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=session_id))
    assert session is not None
    return session.state


async def route_notes(service: InMemorySessionService, session_id: str) -> list[Mapping[str, Any]]:
    events = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=session_id), limit=500)
    return [e.extensions[ROUTE_EXTENSION] for e in events if ROUTE_EXTENSION in e.extensions]


def answering(events: list[Event]) -> list[str]:
    """The authors of the complete assistant messages (not tool calls) of a run, in order."""
    return [
        e.author
        for e in events
        if e.message is not None and not e.partial and e.role == "assistant" and not e.is_tool_call
    ]


def pipeline() -> tuple[ChainAgent, ScriptedModel, ScriptedModel, ScriptedModel]:
    first = ScriptedModel.of("I collected the order details.")
    second = ScriptedModel.of(ScriptStep.call("ask_user", {"question": "Which region should I deploy to?"}))
    third = ScriptedModel.of("Deployment logged.")
    chain = ChainAgent(
        name="pipeline",
        agents=[
            LLMAgent(name="collect", model=first),
            LLMAgent(name="deploy", model=second, await_user_reply=True),
            LLMAgent(name="log", model=third),
        ],
    )
    return chain, first, second, third


async def test_a_chain_continues_at_the_agent_that_asked_after_the_users_reply() -> None:
    chain, first, second, third = pipeline()
    runner, service = make_runner([chain])

    asked, record = await turn(runner, "ship order 42")
    # The chain stopped after the question: `log` did not run; the question is the answer.
    assert answering(asked) == ["collect", "deploy"]
    assert record.status == "completed" and record.answer == "Which region should I deploy to?"
    route = (await state(service, record.session_id))[ROUTE_STATE_KEY]
    assert route["path"] == "pipeline/deploy" and route["kind"] == "ask_user" and route["run_id"] == record.id
    first.assert_consumed()
    third.extend([ScriptStep.answer("Deployment logged.")])  # one more for the turn after the reply

    second.extend([ScriptStep.answer("Deploying order 42 to eu-west.")])
    replied, record2 = await turn(runner, "eu-west", session_id=record.session_id)
    # `collect` did not run again (its script is empty: a call would fail the run).
    assert answering(replied) == ["deploy", "log"]
    assert record2.status == "completed" and record2.answer == "Deployment logged."
    assert {e.branch for e in replied if e.author == "deploy"} == {"pipeline/deploy"}
    # `deploy` saw its own question and the reply.
    sent = second.requests[-1].messages
    assert [m.content for m in sent if m.role == "user"][-1] == "eu-west"
    assert (await state(service, record.session_id))[ROUTE_STATE_KEY] is None
    notes = await route_notes(service, record.session_id)
    assert notes == [
        {"outcome": "consumed", "reason": "the reply goes to 'pipeline/deploy'", "path": "pipeline/deploy"}
    ]
    first.assert_consumed()
    second.assert_consumed()


async def test_the_route_is_used_once() -> None:
    chain, first, second, third = pipeline()
    runner, _service = make_runner([chain])
    _, record = await turn(runner, "ship order 42")
    second.extend([ScriptStep.answer("Deploying to eu-west.")])
    await turn(runner, "eu-west", session_id=record.session_id)
    first.extend([ScriptStep.answer("New order collected.")])
    second.extend([ScriptStep.answer("Deployed.")])
    third.extend([ScriptStep.answer("Logged.")])
    events, _ = await turn(runner, "ship order 43", session_id=record.session_id)
    assert answering(events) == ["collect", "deploy", "log"]  # from the start again


async def test_naming_the_routes_own_root_agent_keeps_the_route() -> None:
    chain, _first, second, _ = pipeline()
    runner, _service = make_runner([chain, LLMAgent(name="general", model=ScriptedModel.of())])
    _, record = await turn(runner, "ship order 42")
    second.extend([ScriptStep.answer("Deploying to eu-west.")])
    replied, _ = await turn(runner, "eu-west", session_id=record.session_id, agent="pipeline")
    assert answering(replied)[0] == "deploy"


async def test_an_explicit_choice_of_another_agent_clears_the_route() -> None:
    chain, _, second, _ = pipeline()
    general_model = ScriptedModel.of("Hello from general.")
    runner, service = make_runner([chain, LLMAgent(name="general", model=general_model)])
    _, record = await turn(runner, "ship order 42")

    events, record2 = await turn(runner, "something else", session_id=record.session_id, agent="general")
    assert answering(events) == ["general"] and record2.answer == "Hello from general."
    assert (await state(service, record.session_id))[ROUTE_STATE_KEY] is None
    assert await route_notes(service, record.session_id) == [
        {"outcome": "cleared", "reason": "the request chose agent 'general'", "path": "pipeline/deploy"}
    ]
    second.assert_consumed()


async def test_a_route_to_a_removed_agent_is_cleared_and_ignored() -> None:
    chain, _, _, _ = pipeline()
    runner, service = make_runner([chain])
    _, record = await turn(runner, "ship order 42")
    await runner.close()

    # The next deployment has no `deploy` agent in the chain any more.
    collect_model = ScriptedModel.of("Collected again.")
    trimmed = ChainAgent(name="pipeline", agents=[LLMAgent(name="collect", model=collect_model)])
    runner2, _ = make_runner([trimmed], service)
    events, record2 = await turn(runner2, "eu-west", session_id=record.session_id)
    assert answering(events) == ["collect"] and record2.status == "completed"
    assert (await state(service, record.session_id))[ROUTE_STATE_KEY] is None
    assert await route_notes(service, record.session_id) == [
        {"outcome": "cleared", "reason": "no agent at 'pipeline/deploy'", "path": "pipeline/deploy"}
    ]


async def test_an_invalid_route_value_is_cleared_and_ignored() -> None:
    model = ScriptedModel.of("Hi.")
    runner, service = make_runner([LLMAgent(name="general", model=model)])
    session = await service.create_session(app=APP, user_id="alice", state={ROUTE_STATE_KEY: {"path": ""}})
    events, record = await turn(runner, "hello", session_id=session.id)
    assert answering(events) == ["general"] and record.status == "completed"
    assert (await state(service, session.id))[ROUTE_STATE_KEY] is None
    [note] = await route_notes(service, session.id)
    assert note["outcome"] == "cleared" and note["reason"].startswith("invalid route")


async def test_ask_user_is_offered_only_when_the_agent_turns_routing_on() -> None:
    plain = ScriptedModel.of("Done.")
    routed = ScriptedModel.of("Done.")
    runner, _ = make_runner(
        [LLMAgent(name="plain", model=plain), LLMAgent(name="routed", model=routed, await_user_reply=True)]
    )
    await turn(runner, "x", agent="plain")
    await turn(runner, "x", agent="routed")
    assert "ask_user" not in {t.name for t in plain.requests[0].tools}
    assert "ask_user" in {t.name for t in routed.requests[0].tools}


async def test_an_agent_asking_without_routing_records_no_route() -> None:
    # The model calls a tool it was not offered: an error result, no route, the model goes on.
    model = ScriptedModel.of(ScriptStep.call("ask_user", {"question": "Which one?"}), "I will pick one myself.")
    runner, service = make_runner([LLMAgent(name="plain", model=model)])
    _events, record = await turn(runner, "x")
    assert record.answer == "I will pick one myself."
    assert ROUTE_STATE_KEY not in await state(service, record.session_id)


async def test_a_cycle_starts_its_first_iteration_at_the_agent_that_asked() -> None:
    worker = ScriptedModel.of("Step one done.")
    checker = ScriptedModel.of(ScriptStep.call("ask_user", {"question": "Is the result right?"}))
    cycle = CycleAgent(
        name="loop",
        max_iterations=2,
        agents=[
            LLMAgent(name="work", model=worker),
            LLMAgent(name="check", model=checker, await_user_reply=True),
        ],
    )
    runner, _ = make_runner([cycle])
    asked, record = await turn(runner, "go")
    assert answering(asked) == ["work", "check"]
    checker.extend([ScriptStep.answer("Confirmed.")])
    worker.extend([ScriptStep.answer("Step two done.")])
    checker.extend([ScriptStep.answer("Confirmed again.")])
    replied, _ = await turn(runner, "yes", session_id=record.session_id)
    assert answering(replied) == ["check", "work", "check"]


async def test_a_parallel_agent_runs_only_the_branch_that_asked() -> None:
    asking = ScriptedModel.of(ScriptStep.call("ask_user", {"question": "Which account?"}))
    other = ScriptedModel.of("Inventory checked.")
    fanout = ParallelAgent(
        name="fanout",
        agents=[
            LLMAgent(name="billing", model=asking, await_user_reply=True),
            LLMAgent(name="inventory", model=other),
        ],
    )
    runner, service = make_runner([fanout])
    _, record = await turn(runner, "check order 7")
    assert (await state(service, record.session_id))[ROUTE_STATE_KEY]["path"] == "fanout/billing"

    asking.extend([ScriptStep.answer("Account 12 is billed.")])
    replied, _ = await turn(runner, "account 12", session_id=record.session_id)
    assert answering(replied) == ["billing"]  # inventory answered in the first turn
    [results] = [e for e in replied if e.object == OBJECT_PARALLEL_RESULTS]
    assert [r["agent"] for r in results.extensions["results"]] == ["billing"]
    assert {e.filter_key for e in replied if e.author == "billing" and e.message is not None} == {f"{APP}/billing"}
    other.assert_consumed()


# -- graphs ---------------------------------------------------------------------------------


def approval_graph(effects: list[str]) -> StateGraph:
    graph = StateGraph("approve", StateSchema.of(decision="overwrite"))

    def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        effects.append("ask")
        return {"decision": ctx.interrupt({"question": "Publish the report?"})}

    graph.add_node("ask", ask)
    graph.add_node("publish", lambda s: effects.append(f"publish:{s['decision']}") or None)
    graph.set_entry_point("ask").add_edge("ask", "publish").set_finish_point("publish")
    return graph


async def test_a_graph_interrupt_routes_the_next_message_to_resume_it_inside_a_chain() -> None:
    effects: list[str] = []
    store = InMemoryCheckpointStore()
    intro = ScriptedModel.of("Report drafted.")
    chain = ChainAgent(
        name="flow",
        agents=[
            LLMAgent(name="draft", model=intro),
            GraphAgent(name="approve", graph=approval_graph(effects), checkpoints=store, await_user_reply=True),
        ],
    )
    runner, service = make_runner([chain])
    _asked, record = await turn(runner, "write the report")
    assert record.answer == "Publish the report?"
    route = (await state(service, record.session_id))[ROUTE_STATE_KEY]
    assert route["path"] == "flow/approve" and route["kind"] == "graph_interrupt" and route["checkpoint_id"]

    _replied, record2 = await turn(runner, "yes", session_id=record.session_id)
    assert record2.status == "completed"
    assert effects == ["ask", "ask", "publish:yes"]  # resumed with the reply; `draft` did not run again
    intro.assert_consumed()
    assert (await state(service, record.session_id))[ROUTE_STATE_KEY] is None


async def test_a_forged_route_to_another_sessions_checkpoint_starts_the_graph_afresh() -> None:
    effects: list[str] = []
    store = InMemoryCheckpointStore()
    runner, service = make_runner(
        [GraphAgent(name="approve", graph=approval_graph(effects), checkpoints=store, await_user_reply=True)]
    )
    bobs = await runner.start(user_id="bob", message="go", stream=True)
    [e async for e in bobs.events()]
    bob_session = await service.get_session(SessionKey(app=APP, user_id="bob", session_id=bobs.session_id))
    assert bob_session is not None
    stolen = bob_session.state[ROUTE_STATE_KEY]
    # Session state is the client's to write (PATCH .../state/): alice plants bob's route.
    mine = await service.create_session(app=APP, user_id="alice", state={ROUTE_STATE_KEY: stolen})
    _, record = await turn(runner, "yes", session_id=mine.id)
    assert record.answer == "Publish the report?"  # a fresh run that asks again, in alice's session
    assert effects == ["ask", "ask"]  # bob's graph did not go on to publish
    waiting = await store.get(stolen["checkpoint_id"])
    assert waiting is not None and waiting.waiting  # still bob's to answer


async def test_a_routed_reply_finds_the_question_outside_the_loaded_window() -> None:
    effects: list[str] = []
    service = InMemorySessionService()
    graph = GraphAgent(
        name="approve", graph=approval_graph(effects), checkpoints=InMemoryCheckpointStore(), await_user_reply=True
    )
    runner = Runner(app=APP, agents=[graph], session_service=service, history_event_limit=1)
    _, record = await turn(runner, "go")
    _, record2 = await turn(runner, "yes", session_id=record.session_id)
    assert effects == ["ask", "ask", "publish:yes"] and record2.status == "completed"


async def test_a_graph_without_routing_records_no_route() -> None:
    runner, service = make_runner(
        [GraphAgent(name="approve", graph=approval_graph([]), checkpoints=InMemoryCheckpointStore())]
    )
    _, record = await turn(runner, "go")
    assert ROUTE_STATE_KEY not in await state(service, record.session_id)


# -- over REST --------------------------------------------------------------------------------


@pytest.fixture
def use_agents() -> Iterator[Callable[[Sequence[Any]], None]]:
    """Make the process's run manager serve `agents` on the Django backends."""
    from django.conf import settings

    from agentsite.composition import build_runner, run_manager
    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService

    def use(agents: Sequence[Any]) -> None:
        run_manager().reset(
            lambda: Runner(
                app=settings.AGENTSITE_APP,
                agents=agents,
                session_service=DjangoSessionService(),
                run_store=DjangoRunStore(),
            )
        )

    yield use
    run_manager().reset(build_runner)


@pytest.mark.django_db(transaction=True)
def test_over_rest_the_reply_continues_the_chain_at_the_agent_that_asked(
    alice_api: Any,
    bob_api: Any,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    chain, first, second, third = pipeline()
    use_agents([chain])
    asked = alice_api.post("/api/runs/", {"message": "ship order 42", "wait": True}, format="json")
    assert asked.status_code == 201, asked.content
    assert asked.json()["answer"] == "Which region should I deploy to?"
    session_id = asked.json()["session_id"]
    state = alice_api.get(f"/api/sessions/{session_id}/").json()["state"]
    assert state[ROUTE_STATE_KEY]["path"] == "pipeline/deploy"

    second.extend([ScriptStep.answer("Deploying to eu-west.")])
    replied = alice_api.post(
        "/api/runs/", {"message": "eu-west", "session_id": session_id, "wait": True}, format="json"
    )
    assert replied.status_code == 201, replied.content
    assert replied.json()["answer"] == "Deployment logged."
    first.assert_consumed()
    second.assert_consumed()
    third.assert_consumed()
    events = alice_api.get(f"/api/sessions/{session_id}/events/", {"limit": 200}).json()["results"]
    authors = [e["author"] for e in events if e["role"] == "assistant" and not e.get("tool_calls")]
    # Turn 1: collect, deploy's question; turn 2: deploy's answer, log. `collect` once.
    assert authors == ["collect", "deploy", "deploy", "log"]
    assert alice_api.get(f"/api/sessions/{session_id}/").json()["state"][ROUTE_STATE_KEY] is None
    # Someone else's session stays theirs: bob cannot post into it, so cannot take the route.
    assert bob_api.post("/api/runs/", {"message": "x", "session_id": session_id}, format="json").status_code == 404


# -- the demo graph's pause, answered by the next message on each surface (issue 19, item 4) ---


APPROVED = "Approved: this report is final."


async def paused_demo_run(token: str) -> dict[str, Any]:
    """A troubleshoot run waiting for approval, started over REST."""
    from django.test import AsyncClient

    response = await AsyncClient().post(
        "/api/runs/",
        data=json.dumps({"message": "payments TLS handshake failures", "agent": "troubleshoot", "wait": True}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed" and run["answer"].startswith("Approve this incident report?")
    return run


@pytest.fixture
def alice_token(alice: Any) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def demo_runner(use_model: Callable[[Any], None], settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # no post-run extraction asks the empty script
    use_model(ScriptedModel.of())


@pytest.mark.django_db(transaction=True)
async def test_over_v1_the_next_message_on_the_session_resumes_the_paused_graph(
    alice_token: str, demo_runner: None
) -> None:
    from django.test import AsyncClient

    run = await paused_demo_run(alice_token)
    response = await AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps({"model": "troubleshoot", "messages": [{"role": "user", "content": "approve"}]}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {alice_token}", "X-Session-Id": run["session_id"]},
    )
    assert response.status_code == 200, response.content
    assert response["X-Session-Id"] == run["session_id"]
    assert response.json()["choices"][0]["message"]["content"].endswith(APPROVED)


@pytest.mark.django_db(transaction=True)
async def test_over_agui_the_next_message_on_the_thread_resumes_the_paused_graph(
    alice_token: str, demo_runner: None
) -> None:
    from django.test import AsyncClient

    run = await paused_demo_run(alice_token)
    body = {
        "threadId": run["session_id"],
        "runId": "client-2",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u2", "role": "user", "content": "approve"}],
    }
    response = await AsyncClient().post(
        "/agui/troubleshoot",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {alice_token}"},
    )
    assert response.status_code == 200
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    frames = [json.loads(block[len("data: ") :]) for block in text.split("\n\n") if block.strip()]
    assert frames[-1]["type"] == "RUN_FINISHED" and frames[-1].get("outcome") in (None, {"type": "success"})
    assert APPROVED in "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.django_db(transaction=True)
async def test_over_the_websocket_the_next_message_resumes_the_paused_graph(
    alice_token: str, demo_runner: None
) -> None:
    from channels.layers import InMemoryChannelLayer, get_channel_layer
    from channels.testing import WebsocketCommunicator

    from agentsite.asgi import application

    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        await layer.flush()  # process-wide: no members of older tests' loops
    run = await paused_demo_run(alice_token)
    socket = WebsocketCommunicator(
        application,
        f"/ws/sessions/{run['session_id']}/",
        headers=[(b"authorization", f"Bearer {alice_token}".encode())],
    )
    connected, _ = await socket.connect(timeout=10)
    assert connected
    await socket.send_json_to({"type": "run", "message": "approve"})
    frames: list[dict[str, Any]] = []
    accepted: str | None = None
    # The socket first replays the session (the paused run); read until the new run ends.
    while not (
        frames
        and frames[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR", "error")
        and frames[-1].get("runId", accepted) == accepted
    ):
        frames.append(await socket.receive_json_from(timeout=10))
        if frames[-1]["type"] == "run.accepted":
            accepted = frames[-1]["run_id"]
    await socket.disconnect()
    assert accepted is not None and frames[-1]["type"] == "RUN_FINISHED"
    live = frames[next(i for i, f in enumerate(frames) if f["type"] == "RUN_STARTED" and f["runId"] == accepted) :]
    assert APPROVED in "".join(f["delta"] for f in live if f["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.django_db(transaction=True)
async def test_over_a2a_the_next_message_on_the_context_resumes_the_paused_graph(
    alice_token: str, demo_runner: None
) -> None:
    from tests.security.support import a2a, a2a_message, rpc

    run = await paused_demo_run(alice_token)
    response = await a2a(
        "troubleshoot", rpc("SendMessage", a2a_message("approve", context_id=run["session_id"])), alice_token
    )
    assert response.status_code == 200, response.text[:300]
    task = response.json()["result"]["task"]
    assert task["contextId"] == run["session_id"] and task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert APPROVED in json.dumps(task)
