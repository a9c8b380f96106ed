"""A2A as clients store it (issue 25, items 6 and 7, and structured output), driven by the
`a2a-sdk` client against the ASGI application:

- a pause (a graph waiting for approval, an agent that asked the user) ends its task
  `input-required` with the question, and the next message on the task continues it;
- progress travels as status-update metadata, never as a message a client would store as
  the agent's words; the answer is the task's one artifact, the same sent or streamed;
- a failure ends the task `failed` with the error, no answer;
- `metadata.outputSchema` asks for a structured answer, returned as a data part;
- the pre-0.3 card path answers the card, not 401.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from runs.core.agents.graph import GraphAgent, InMemoryCheckpointStore, StateGraph, StateSchema
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.surfaces.a2a.agent import A2AAgent
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from tests.security.support import a2a, client, rpc

pytestmark = pytest.mark.django_db(transaction=True)

TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"
APPROVED = "Approved: this report is final."
INPUT_REQUIRED, COMPLETED, FAILED, WORKING = (
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_WORKING,
)


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def no_memory(settings: Any) -> Any:
    settings.AGENTSITE_MEMORY_AUTO = False  # no post-run extraction takes a scripted answer
    return settings


@pytest.fixture
def use_agents(no_memory: Any) -> Iterator[Callable[[Sequence[Any]], None]]:
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


@asynccontextmanager
async def connected(token: str, agent: str, *, streaming: bool = False) -> AsyncIterator[Client]:
    """The SDK's client, from the agent's card, over the ASGI application (no socket)."""
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://testserver", timeout=30, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        card_json = (await http.get(f"/a2a/{agent}/.well-known/agent-card.json")).json()
        card = AgentCard()
        from google.protobuf.json_format import ParseDict

        ParseDict(card_json, card, ignore_unknown_fields=True)
        yield ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)


def user_message(
    text: str, *, context_id: str = "", task_id: str = "", metadata: dict[str, Any] | None = None
) -> SendMessageRequest:
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    if metadata:
        message.metadata.update(metadata)
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def text_of(parts: Any) -> str:
    return "".join(part.text for part in parts if part.HasField("text"))


def final_task(responses: list[StreamResponse]) -> Task:
    [response] = responses
    assert response.HasField("task"), response
    return response.task


def metadata(struct: Any) -> dict[str, Any]:
    return MessageToDict(struct)


# -- item 6: a pause is input-required, and the next message on the task answers it ----------


async def test_a_paused_graph_is_input_required_and_the_next_message_on_the_task_completes_it(
    alice_token: str,
    no_memory: Any,
    use_model: Callable[[Any], None],
) -> None:
    use_model(ScriptedModel.of())  # the demo graph asks no model
    async with connected(alice_token, "troubleshoot") as sdk:
        paused = final_task(await send(sdk, user_message("payments TLS handshake failures")))
        answered = final_task(await send(sdk, user_message("approve", context_id=paused.context_id, task_id=paused.id)))
        stored = await sdk.get_task(GetTaskRequest(id=paused.id))

    assert paused.status.state == INPUT_REQUIRED
    question = text_of(paused.status.message.parts)
    assert question.startswith("Approve this incident report?")
    assert metadata(paused.metadata)["agentsite_pause"] == {
        "kind": "graph_interrupt",
        "question": question,
        "routed": True,
    }
    assert list(paused.artifacts) == []  # a question is not an answer

    # The same task continues: the graph resumed (no fresh diagnosis) and completed.
    assert answered.id == paused.id and answered.status.state == COMPLETED
    [artifact] = answered.artifacts
    assert text_of(artifact.parts).endswith(APPROVED)
    assert stored.status.state == COMPLETED
    history = [(Role.Name(m.role), text_of(m.parts)) for m in stored.history]
    assert history == [
        ("ROLE_USER", "payments TLS handshake failures"),
        ("ROLE_AGENT", question),
        ("ROLE_USER", "approve"),
    ]


async def test_a_paused_task_answered_by_a_new_task_on_its_context_ends_naming_that_task(
    alice_token: str,
    no_memory: Any,
    use_model: Callable[[Any], None],
) -> None:
    use_model(ScriptedModel.of())
    async with connected(alice_token, "troubleshoot") as sdk:
        paused = final_task(await send(sdk, user_message("payments TLS handshake failures")))
        answered = final_task(await send(sdk, user_message("approve", context_id=paused.context_id)))
        before = await sdk.get_task(GetTaskRequest(id=paused.id))

    assert answered.id != paused.id and answered.status.state == COMPLETED
    assert text_of(answered.artifacts[0].parts).endswith(APPROVED)
    # The route answered the question: the first task waits for nothing now, and says where it went on.
    assert before.status.state == COMPLETED and list(before.artifacts) == []
    assert metadata(before.metadata)["agentsite_answered_in"] == answered.id
    assert text_of(before.history[-1].parts).startswith("Approve this incident report?")


async def test_a_0_3_caller_sees_input_required(
    alice_token: str, no_memory: Any, use_model: Callable[[Any], None]
) -> None:
    use_model(ScriptedModel.of())
    body = {
        "jsonrpc": "2.0",
        "id": "r1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "m-03",
                "parts": [{"kind": "text", "text": "payments TLS handshake failures"}],
            }
        },
    }
    async with client(alice_token) as http:
        response = await http.post("/a2a/troubleshoot", json=body)
    result = response.json()["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "input-required"
    assert result["status"]["message"]["parts"][0]["text"].startswith("Approve this incident report?")


async def test_an_agent_that_asks_the_user_is_input_required_until_the_reply_on_the_task(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    model = ScriptedModel.of(ScriptStep.call("ask_user", {"question": "Which region?"}), "Deploying to eu-west-1.")
    use_agents([LLMAgent(name="deploy", model=model, await_user_reply=True)])
    async with connected(alice_token, "deploy", streaming=True) as sdk:
        asked = await send(sdk, user_message("Deploy the release"))
        task = asked[0].task
        replied = await send(sdk, user_message("eu-west-1", context_id=task.context_id, task_id=task.id))
    model.assert_consumed()

    [last] = [r.status_update for r in asked[-1:]]
    assert last.status.state == INPUT_REQUIRED and text_of(last.status.message.parts) == "Which region?"
    assert metadata(last.metadata)["agentsite_pause"]["kind"] == "ask_user"
    assert not any(r.HasField("artifact_update") for r in asked)
    assert replied[-1].status_update.status.state == COMPLETED
    [answer] = [r.artifact_update for r in replied if r.HasField("artifact_update")]
    assert answer.task_id == task.id and text_of(answer.artifact.parts) == "Deploying to eu-west-1."


async def test_a_graph_without_routing_is_input_required_and_its_task_resumes_that_run(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    effects: list[str] = []
    graph = StateGraph("approve", StateSchema.of(decision="overwrite"))
    graph.add_node("ask", lambda s, ctx: effects.append("ask") or {"decision": ctx.interrupt({"question": "Publish?"})})
    graph.add_node("publish", lambda s: effects.append(f"publish:{s['decision']}") or None)
    graph.set_entry_point("ask").add_edge("ask", "publish").set_finish_point("publish")
    use_agents([GraphAgent(name="approve", graph=graph, checkpoints=InMemoryCheckpointStore())])  # no routing
    async with connected(alice_token, "approve") as sdk:
        paused = final_task(await send(sdk, user_message("go")))
        answered = final_task(await send(sdk, user_message("yes", context_id=paused.context_id, task_id=paused.id)))

    assert paused.status.state == INPUT_REQUIRED
    assert metadata(paused.metadata)["agentsite_pause"]["routed"] is False
    assert answered.status.state == COMPLETED
    # Resumed (the asking node runs again and its interrupt returns the reply); a fresh start
    # would have paused at `ask` again, never publishing.
    assert effects == ["ask", "ask", "publish:yes"]


async def test_our_a2a_agent_answers_a_remote_pause_on_the_same_remote_task(
    alice_token: str,
    no_memory: Any,
    use_model: Callable[[Any], None],
) -> None:
    use_model(ScriptedModel.of())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {alice_token}"},
        timeout=30,
    ) as http:
        remote = A2AAgent(name="remote", url="http://testserver/a2a/troubleshoot", http_client=http)
        sessions = InMemorySessionService()
        runner = Runner(app="client", agents=[remote], session_service=sessions)
        first = [e async for e in runner.run(user_id="u1", message="payments TLS handshake failures")]
        [session] = await sessions.list_sessions(app="client", user_id="u1")
        paused_task = (await sessions.get_session(SessionKey(app="client", user_id="u1", session_id=session.id))).state[
            remote.task_key
        ]
        second = [e async for e in runner.run(user_id="u1", session_id=session.id, message="approve")]

    [question] = [e for e in first if e.message is not None and e.message.role == "assistant" and not e.partial]
    assert question.text.startswith("Approve this incident report?")
    assert question.extensions["a2a"]["state"] == "TASK_STATE_INPUT_REQUIRED" and paused_task
    [answer] = [e for e in second if e.message is not None and e.message.role == "assistant" and not e.partial]
    assert answer.text.endswith(APPROVED)
    assert answer.extensions["a2a"]["task_id"] == paused_task  # the same remote task went on
    assert answer.extensions["a2a"]["state"] == "TASK_STATE_COMPLETED"


async def test_on_v1_a_paused_run_is_marked_on_the_session_and_run_its_headers_name(
    alice_token: str,
    no_memory: Any,
    use_model: Callable[[Any], None],
) -> None:
    """OpenAI's wire has no paused state: the documented marker (README, 'Answering a
    question or a pause') is the session's route and the run's interrupt."""
    use_model(ScriptedModel.of())
    async with client(alice_token) as http:
        response = await http.post(
            "/v1/chat/completions",
            json={
                "model": "troubleshoot",
                "messages": [{"role": "user", "content": "payments TLS handshake failures"}],
            },
        )
        assert response.status_code == 200, response.text[:300]
        session = (await http.get(f"/api/sessions/{response.headers['X-Session-Id']}/")).json()
        run = (await http.get(f"/api/runs/{response.headers['X-Run-Id']}/")).json()

    question = response.json()["choices"][0]["message"]["content"]
    assert response.json()["choices"][0]["finish_reason"] == "stop" and "Approve this incident report?" in question
    route = session["state"]["await_user_reply"]
    assert route["kind"] == "graph_interrupt" and route["run_id"] == run["id"]
    assert run["interrupt"]


# -- item 7: progress is metadata, the answer is sent once, failures are failed ----------------


async def test_progress_is_status_metadata_and_the_answer_is_one_artifact_when_streamed(alice_token: str) -> None:
    async with connected(alice_token, "support", streaming=True) as sdk:
        responses = await send(sdk, user_message(TLS_QUESTION))
        stored = await sdk.get_task(GetTaskRequest(id=responses[0].task.id))

    statuses = [r.status_update for r in responses if r.HasField("status_update")]
    # No status carries a message a client would store as the agent's words.
    assert all(not s.status.HasField("message") for s in statuses), [s.status.message for s in statuses]
    progress = [metadata(s.metadata)["agentsite_progress"] for s in statuses[1:-1]]
    assert all(s.status.state == WORKING for s in statuses[:-1])
    kinds = [p["kind"] for p in progress]
    assert "tool_calls" in kinds and "tool_result" in kinds and "text_delta" in kinds
    [call] = [
        c for p in progress if p["kind"] == "tool_calls" for c in p["calls"] if c["name"] == "inspect_certificate"
    ]
    assert call["id"] and "Calling inspect_certificate" in next(
        p["summary"] for p in progress if p["kind"] == "tool_calls" and call in p["calls"]
    )

    [artifact_update] = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    answer = text_of(artifact_update.artifact.parts)
    assert "expired" in answer and artifact_update.last_chunk and not artifact_update.append
    deltas = "".join(
        p["text"]
        for p in progress
        if p["kind"] == "text_delta" and p["messageId"] == artifact_update.artifact.artifact_id
    )
    assert deltas == answer  # the live text is the answer's, streamed as progress
    assert statuses[-1].status.state == COMPLETED and metadata(statuses[-1].metadata)["agentsite_progress"] is None

    # The stored task: the question, one artifact with the answer; no progress in the history.
    assert [text_of(m.parts) for m in stored.history] == [TLS_QUESTION]
    assert [text_of(a.parts) for a in stored.artifacts] == [answer]
    assert not stored.status.HasField("message")


async def test_sent_and_streamed_tasks_hold_the_same_single_answer(alice_token: str) -> None:
    async with connected(alice_token, "support") as sdk:
        sent = final_task(await send(sdk, user_message(TLS_QUESTION)))
    async with connected(alice_token, "support", streaming=True) as sdk:
        streamed_id = (await send(sdk, user_message(TLS_QUESTION)))[0].task.id
        streamed = await sdk.get_task(GetTaskRequest(id=streamed_id))

    for task in (sent, streamed):
        assert task.status.state == COMPLETED and not task.status.HasField("message")
        assert [Role.Name(m.role) for m in task.history] == ["ROLE_USER"]
        [artifact] = task.artifacts
        assert "expired" in text_of(artifact.parts) and artifact.name == "answer"
    # The same answer (the offline model stamps each answer with the time, so the first line).
    first_lines = {text_of(task.artifacts[0].parts).splitlines()[0] for task in (sent, streamed)}
    assert len(first_lines) == 1


async def test_a_failed_run_is_a_failed_task_with_the_error_and_no_answer(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    model = ScriptedModel.of(ScriptStep.fail(RuntimeError("upstream exploded")))
    use_agents([LLMAgent(name="fragile", model=model)])
    async with connected(alice_token, "fragile") as sdk:
        task = final_task(await send(sdk, user_message("hello")))

    assert task.status.state == FAILED
    assert list(task.artifacts) == []
    info = metadata(task.metadata)
    assert info["error_type"] and info["error_message"]
    assert info["error_type"] in text_of(task.status.message.parts)


# -- structured output -------------------------------------------------------------------------

SEVERITY = {
    "type": "object",
    "properties": {"severity": {"enum": ["low", "high"]}, "summary": {"type": "string"}},
    "required": ["severity", "summary"],
    "additionalProperties": False,
}


async def test_metadata_output_schema_returns_the_validated_value_as_a_data_part(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    model = ScriptedModel.of('{"severity": "urgent"}', '{"severity": "high", "summary": "cert expired"}')
    use_agents([LLMAgent(name="triage", model=model)])
    async with connected(alice_token, "triage") as sdk:
        task = final_task(
            await send(sdk, user_message("Triage INC-1042", metadata={"outputSchema": SEVERITY, "customer": "acme"}))
        )
    model.assert_consumed()  # the first answer was refused and retried with feedback

    assert task.status.state == COMPLETED
    [artifact] = task.artifacts
    [part] = artifact.parts
    assert part.HasField("data") and part.media_type == "application/json"
    assert MessageToDict(part)["data"] == {"severity": "high", "summary": "cert expired"}
    async with client(alice_token) as http:
        session = (await http.get(f"/api/sessions/{task.context_id}/")).json()
    assert session["state"]["customer"] == "acme" and "outputSchema" not in session["state"]


async def test_our_a2a_agent_reads_a_structured_answer_as_its_json(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    use_agents([LLMAgent(name="triage", model=ScriptedModel.of('{"severity": "low", "summary": "fine"}'))])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {alice_token}"},
        timeout=30,
    ) as http:
        remote = A2AAgent(name="remote", url="http://testserver/a2a/triage", http_client=http)
        updates = [u async for u in remote.exchange("Triage INC-1", metadata={"outputSchema": SEVERITY})]

    assert updates[-1].kind == "final" and json.loads(updates[-1].text) == {"severity": "low", "summary": "fine"}


async def test_an_invalid_output_schema_is_refused_with_32602_naming_it_before_anything_runs(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    model = ScriptedModel.of()
    use_agents([LLMAgent(name="triage", model=model)])
    async with connected(alice_token, "triage") as sdk:
        with pytest.raises(InvalidParamsError, match=r"params\.message\.metadata\.outputSchema"):
            await send(sdk, user_message("Triage", metadata={"outputSchema": {"type": "nonsense"}}))

    raw = {
        "message": {
            "role": "ROLE_USER",
            "messageId": "m1",
            "parts": [{"text": "Triage"}],
            "metadata": {"outputSchema": "not a schema"},
        }
    }
    error = (await a2a("triage", rpc("SendMessage", raw), alice_token)).json()["error"]
    assert error["code"] == -32602 and "outputSchema" in error["message"]
    async with client(alice_token) as http:
        assert (await http.get("/api/sessions/")).json()["results"] == []  # no session, no task, no run


# -- the old card path -------------------------------------------------------------------------


async def test_the_pre_0_3_card_path_answers_the_card_not_401() -> None:
    async with client() as http:
        root = await http.get("/.well-known/agent.json")
        agent = await http.get("/a2a/support/.well-known/agent.json")
        as_1_0 = await http.get("/.well-known/agent.json", headers={"A2A-Version": "1.0"})

    assert root.status_code == 200 and agent.status_code == 200, (root.text[:200], agent.text[:200])
    # Only pre-1.0 clients read this path: the 0.3 shape, unless a version is asked for.
    assert root.json()["name"] == "support" and root.json()["url"] == "http://testserver/a2a/support"
    assert json.loads(agent.text)["protocolVersion"].startswith("0.3")
    assert "supportedInterfaces" in as_1_0.json() and "url" not in as_1_0.json()


# -- SPEC 1.2.1 ----------------------------------------------------------------------------------


async def test_spec_1_2_1_does_not_apply_to_a2a_whose_schema_requires_the_role(
    alice_token: str,
    use_agents: Callable[[Sequence[Any]], None],
) -> None:
    # A2A's `Message.role` is a required enum (user/agent): the SDK refuses a missing or empty
    # role with -32602 naming it before our executor sees the message, so there is no empty
    # role to take as the user's here (SPEC 1.2.1 holds on /v1, AG-UI and the runner).
    model = ScriptedModel.of()
    use_agents([LLMAgent(name="triage", model=model)])
    for message in (
        {"messageId": "m-no-role", "parts": [{"text": TLS_QUESTION}]},
        {"role": "", "messageId": "m-empty-role", "parts": [{"text": TLS_QUESTION}]},
    ):
        error = (await a2a("triage", rpc("SendMessage", {"message": message}), alice_token)).json()["error"]
        assert error["code"] == -32602 and "message.role" in json.dumps(error), error
    assert model.requests == []
    async with client(alice_token) as http:
        assert (await http.get("/api/sessions/")).json()["results"] == []  # nothing ran
