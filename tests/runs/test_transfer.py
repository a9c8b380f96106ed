"""Agent transfer (SPEC 2.2, 11.2; issue 19 item 3) through the Runner: `transfer_to_agent`
is offered to an agent with sub-agents, the transfer is an `agent.transfer` event in the
ledger and the AG-UI stream, and the target answers in the same run on its own branch."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from ag_ui.core import CustomEvent, EventType
from asgiref.sync import sync_to_async

from runs.core.agents.graph import GraphAgent, InMemoryCheckpointStore, NodeContext, StateGraph, StateSchema
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.protocols.agui import TRANSFER_EVENT, AguiTranslator
from runs.core.routing import ROUTE_STATE_KEY
from runs.core.runner import Runner
from runs.core.tools.transfer import OBJECT_TRANSFER
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"


def make_runner(agents: Sequence[Any]) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    return Runner(app=APP, agents=agents, session_service=service), service


async def turn(runner: Runner, message: str, **kwargs: Any) -> tuple[list[Event], Any]:
    handle = await runner.start(user_id="alice", message=message, stream=True, **kwargs)
    events = [e async for e in handle.events()]
    return events, await handle.wait()


def support_desk(
    *, troubleshoot_steps: Sequence[Any], routed: bool = False
) -> tuple[LLMAgent, ScriptedModel, ScriptedModel]:
    support_model = ScriptedModel.of(
        ScriptStep.call("transfer_to_agent", {"agent_name": "troubleshoot", "message": "TLS errors on payments"}),
    )
    troubleshoot_model = ScriptedModel.of(*troubleshoot_steps)
    troubleshoot = LLMAgent(
        name="troubleshoot", model=troubleshoot_model, description="diagnoses outages", await_user_reply=routed
    )
    support = LLMAgent(name="support", model=support_model, sub_agents=[troubleshoot])
    return support, support_model, troubleshoot_model


async def test_a_transfer_is_in_the_ledger_and_the_target_answers_on_its_own_branch() -> None:
    support, support_model, troubleshoot_model = support_desk(troubleshoot_steps=["The certificate expired yesterday."])
    runner, service = make_runner([support])
    _events, record = await turn(runner, "payments fail TLS handshakes")
    support_model.assert_consumed()
    troubleshoot_model.assert_consumed()

    assert record.status == "completed" and record.answer == "The certificate expired yesterday."
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=record.session_id), limit=100)
    [transfer] = [e for e in stored if e.object == OBJECT_TRANSFER]
    assert transfer.author == "support" and transfer.branch == "support"
    assert transfer.extensions["transfer"] == {
        "from": "support",
        "to": "troubleshoot",
        "branch": "support/troubleshoot",
        "message": "TLS errors on payments",
    }
    # The call has its result before the hand-over; the target answers after it, on its branch.
    steps = [(e.author, e.object, e.role, e.branch) for e in stored if e.message is not None]
    assert steps == [
        ("user", "chat.completion", "user", "support"),
        ("support", "chat.completion", "assistant", "support"),
        ("support", "tool.response", "tool", "support"),
        ("support", OBJECT_TRANSFER, "assistant", "support"),
        ("troubleshoot", "chat.completion", "assistant", "support/troubleshoot"),
    ]
    assert all(e.request_id == record.request_id for e in stored if e.message is not None)
    # The target's model saw the user's message and the note.
    sent = troubleshoot_model.requests[0].messages
    assert any("payments fail TLS handshakes" in m.content for m in sent)
    assert any("TLS errors on payments" in m.content for m in sent)
    # Only one model call per agent: the transfer line counts no model call.
    assert record.model_calls == 2


async def test_a_transfer_shows_in_the_agui_stream() -> None:
    support, _, _ = support_desk(troubleshoot_steps=["Expired certificate."])
    runner, _ = make_runner([support])
    events, record = await turn(runner, "payments fail TLS handshakes")
    translator = AguiTranslator(thread_id=record.session_id)
    out = [a for e in events for a in translator.translate(e, run_id=record.id)]
    kinds = [a.type for a in out]
    [custom] = [a for a in out if isinstance(a, CustomEvent) and a.name == TRANSFER_EVENT]
    assert custom.value["to"] == "troubleshoot" and custom.value["branch"] == "support/troubleshoot"
    assert kinds[0] == EventType.RUN_STARTED and kinds[-1] == EventType.RUN_FINISHED
    # The hand-over comes before the target's answer.
    texts = [a.delta for a in out if a.type == EventType.TEXT_MESSAGE_CONTENT]
    assert texts.index("Transferring control to agent: troubleshoot\nTLS errors on payments") < len(texts) - 1
    assert out.index(custom) < max(i for i, a in enumerate(out) if a.type == EventType.TEXT_MESSAGE_CONTENT)


async def test_transfer_is_offered_only_to_agents_with_sub_agents() -> None:
    support, support_model, troubleshoot_model = support_desk(troubleshoot_steps=["ok"])
    runner, _ = make_runner([support])
    await turn(runner, "x")
    offered = {t.name: t for t in support_model.requests[0].tools}
    assert offered["transfer_to_agent"].parameters["properties"]["agent_name"]["enum"] == ["troubleshoot"]
    assert "diagnoses outages" in offered["transfer_to_agent"].description
    assert "transfer_to_agent" not in {t.name for t in troubleshoot_model.requests[0].tools}


async def test_a_transfer_to_an_unknown_agent_is_an_error_the_model_can_correct() -> None:
    target_model = ScriptedModel.of("unused")
    support_model = ScriptedModel.of(
        ScriptStep.call("transfer_to_agent", {"agent_name": "billing"}), "I will answer myself."
    )
    support = LLMAgent(
        name="support", model=support_model, sub_agents=[LLMAgent(name="troubleshoot", model=target_model)]
    )
    runner, _service = make_runner([support])
    events, record = await turn(runner, "x")
    assert record.answer == "I will answer myself."
    [result] = [e for e in events if e.is_tool_result]
    assert "agent_name must be one of ['troubleshoot'], got 'billing'" in result.text
    assert not any(e.object == OBJECT_TRANSFER for e in events)
    assert not target_model.requests


async def test_a_reply_to_a_question_of_the_transfer_target_goes_straight_to_it() -> None:
    support, support_model, troubleshoot_model = support_desk(
        troubleshoot_steps=[ScriptStep.call("ask_user", {"question": "Which host?"})],
        routed=True,
    )
    runner, service = make_runner([support])
    _, record = await turn(runner, "payments fail TLS handshakes")
    assert record.answer == "Which host?"
    session = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=record.session_id))
    assert session is not None and session.state[ROUTE_STATE_KEY]["path"] == "support/troubleshoot"

    troubleshoot_model.extend([ScriptStep.answer("api-3's certificate expired.")])
    events, record2 = await turn(runner, "api-3", session_id=record.session_id)
    support_model.assert_consumed()  # support was not asked again
    assert record2.answer == "api-3's certificate expired."
    assert {e.branch for e in events if e.message is not None and not e.partial} == {"support/troubleshoot"}


# -- over AG-UI ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_over_agui_the_transfer_is_a_custom_event_and_in_the_ledger(alice: Any) -> None:
    from django.conf import settings
    from django.test import AsyncClient
    from rest_framework.authtoken.models import Token

    from agentsite.composition import build_runner, run_manager
    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService

    support, support_model, troubleshoot_model = support_desk(troubleshoot_steps=["The certificate expired."])
    run_manager().reset(
        lambda: Runner(
            app=settings.AGENTSITE_APP,
            agents=[support],
            session_service=DjangoSessionService(),
            run_store=DjangoRunStore(),
        )
    )
    try:
        token = (await sync_to_async(Token.objects.get_or_create)(user=alice))[0].key
        body = {
            "threadId": "thread-transfer",
            "runId": "client-1",
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "messages": [{"id": "u1", "role": "user", "content": "payments fail TLS"}],
        }
        response = await AsyncClient().post(
            "/agui/support",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200
        text = b"".join([chunk async for chunk in response.streaming_content]).decode()
        frames = [json.loads(block[len("data: ") :]) for block in text.split("\n\n") if block.strip()]
    finally:
        run_manager().reset(build_runner)
    support_model.assert_consumed()
    troubleshoot_model.assert_consumed()
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    [custom] = [f for f in frames if f["type"] == "CUSTOM" and f["name"] == TRANSFER_EVENT]
    assert custom["value"]["to"] == "troubleshoot" and custom["value"]["from"] == "support"
    assert "The certificate expired." in "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT")
    stored = await service_events(settings.AGENTSITE_APP, str(alice.pk), "thread-transfer")
    assert [e.object for e in stored].count(OBJECT_TRANSFER) == 1


async def service_events(app: str, user_id: str, session_id: str) -> list[Event]:
    from sessions_app.backends import DjangoSessionService

    return await DjangoSessionService().list_events(
        SessionKey(app=app, user_id=user_id, session_id=session_id), limit=100
    )


async def test_a_transfer_to_a_graph_that_pauses_is_answered_by_the_next_message() -> None:
    effects: list[str] = []
    graph = StateGraph("approve", StateSchema.of(decision="overwrite"))

    def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"decision": ctx.interrupt({"question": "Restart the service?"})}

    graph.add_node("ask", ask)
    graph.add_node("act", lambda s: effects.append(f"act:{s['decision']}") or None)
    graph.set_entry_point("ask").add_edge("ask", "act").set_finish_point("act")
    target = GraphAgent(
        name="runbook",
        graph=graph,
        checkpoints=InMemoryCheckpointStore(),
        await_user_reply=True,
        description="restarts services",
    )
    support_model = ScriptedModel.of(ScriptStep.call("transfer_to_agent", {"agent_name": "runbook"}))
    runner, _ = make_runner([LLMAgent(name="support", model=support_model, sub_agents=[target])])

    events, record = await turn(runner, "restart payments")
    assert record.answer == "Restart the service?"
    assert [e.branch for e in events if e.object == "graph.interrupt"] == ["support/runbook"]
    _, record2 = await turn(runner, "yes", session_id=record.session_id)
    assert record2.status == "completed" and effects == ["act:yes"]
    support_model.assert_consumed()  # the reply went to the graph, not back to support's model


@pytest.mark.django_db(transaction=True)
async def test_over_the_websocket_the_transfer_is_a_custom_frame(alice: Any) -> None:
    from channels.layers import InMemoryChannelLayer, get_channel_layer
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from rest_framework.authtoken.models import Token

    from agentsite.asgi import application
    from agentsite.composition import build_runner, run_manager
    from runs.backends import DjangoRunStore
    from sessions_app import services as session_services
    from sessions_app.backends import DjangoSessionService

    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        await layer.flush()  # process-wide: no members of older tests' loops
    support, support_model, troubleshoot_model = support_desk(troubleshoot_steps=["The certificate expired."])
    run_manager().reset(
        lambda: Runner(
            app=settings.AGENTSITE_APP,
            agents=[support],
            session_service=DjangoSessionService(),
            run_store=DjangoRunStore(),
        )
    )
    try:
        token = (await sync_to_async(Token.objects.get_or_create)(user=alice))[0].key
        session_id = (await sync_to_async(session_services.session_create)(user=alice, agent="support")).id
        socket = WebsocketCommunicator(
            application,
            f"/ws/sessions/{session_id}/",
            headers=[(b"authorization", f"Bearer {token}".encode())],
        )
        connected, _ = await socket.connect(timeout=10)
        assert connected
        await socket.send_json_to({"type": "run", "message": "payments fail TLS"})
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR", "error"):
            frames.append(await socket.receive_json_from(timeout=10))
        await socket.disconnect()
    finally:
        run_manager().reset(build_runner)
    support_model.assert_consumed()
    troubleshoot_model.assert_consumed()
    assert frames[-1]["type"] == "RUN_FINISHED"
    [custom] = [f for f in frames if f["type"] == "CUSTOM" and f["name"] == TRANSFER_EVENT]
    assert custom["value"] == {
        "from": "support",
        "to": "troubleshoot",
        "branch": "support/troubleshoot",
        "message": "TLS errors on payments",
    }
