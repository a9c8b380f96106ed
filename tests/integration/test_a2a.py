"""The A2A endpoints, driven by the `a2a-sdk` client (and by our A2AAgent) against a live Daphne."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict
from rest_framework.authtoken.models import Token

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.surfaces.a2a.agent import OBJECT_A2A_STATUS, A2AAgent, A2ATool
from sessions_app.core.events import OBJECT_CHUNK, Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from tests.support.daphne import LiveServer, live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"
COMPLETED, WORKING, CANCELED = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_WORKING,
    TaskState.TASK_STATE_CANCELED,
)


@pytest.fixture
def server(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    with live_daphne(tmp_path) as live:
        yield live


@pytest.fixture
def slow_server(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    """Daphne whose model (a scripted OpenAI endpoint) takes half a minute to answer."""
    with (
        ScriptedOpenAIServer(ServerStep.answer("slow words " * 400, chunk_size=4, chunk_delay_s=0.01)) as model,
        live_daphne(
            tmp_path,
            env={"AGENTSITE_MODEL": "scripted-slow", "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test"},
        ) as live,
    ):
        yield live


def token_for(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def agent_url(server: LiveServer, agent: str = "support") -> str:
    return f"{server.url}/a2a/{agent}"


class TokenCredentials(CredentialService):
    """Hands the SDK's AuthInterceptor our API token for the card's bearer scheme."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token


@asynccontextmanager
async def connected(
    server: LiveServer, token: str, *, agent: str = "support", streaming: bool = True
) -> AsyncIterator[Client]:
    """An SDK client from the agent's (public) card, authenticated the way the card says."""
    card = await resolve_card(server, agent)
    async with httpx.AsyncClient(timeout=60) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        yield factory.create(card, interceptors=[AuthInterceptor(TokenCredentials(token))])


async def resolve_card(server: LiveServer, agent: str = "support") -> AgentCard:
    async with httpx.AsyncClient() as http:
        return await A2ACardResolver(http, agent_url(server, agent)).get_agent_card()


def user_message(text: str, *, context_id: str = "", metadata: dict[str, Any] | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)], context_id=context_id)
    if metadata:
        message.metadata.update(metadata)
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def text_of(parts: Any) -> str:
    return "".join(part.text for part in parts if part.HasField("text"))


def is_text(response: StreamResponse) -> bool:
    """A progress update carrying the model's text as it comes."""
    if not response.HasField("status_update"):
        return False
    progress = MessageToDict(response.status_update.metadata).get("agentsite_progress")
    return isinstance(progress, dict) and progress.get("kind") == "text_delta"


def api(server: LiveServer, user: Any, path: str) -> Any:
    response = httpx.get(f"{server.url}{path}", headers={"Authorization": f"Bearer {token_for(user)}"})
    assert response.status_code == 200, response.text
    return response.json()


def rpc(
    server: LiveServer, body: Any, *, token: str | None = None, agent: str = "support", version: str | None = "1.0"
) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if version:
        headers["A2A-Version"] = version
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(agent_url(server, agent), content=content, headers=headers, timeout=60)


# -- discovery ----------------------------------------------------------------------------------


def test_the_public_card_describes_the_agent_its_tools_streaming_and_bearer_auth(server: LiveServer) -> None:
    card = asyncio.run(resolve_card(server))
    assert card.name == "support" and "certificates" in card.description
    assert {i.url for i in card.supported_interfaces} == {agent_url(server)}
    assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
    skills = {skill.id: list(skill.tags) for skill in card.skills}
    tools = {name for name, tags in skills.items() if tags == ["tool"]}
    assert skills["support"] == ["default"]
    # One skill per tool of the agent: its own, and those over recall, memory and artifacts.
    assert {
        "search_logs",
        "lookup_ticket",
        "inspect_certificate",
        "session_search",
        "memory_search",
        "artifact_save",
    } <= tools
    assert set(skills) == tools | {"support"}
    assert card.capabilities.streaming
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme.lower() == "bearer"
    assert "bearer" in card.security_requirements[0].schemes
    # A 0.3 client asks for its own card shape (without the header it gets the 1.0 card).
    legacy = httpx.get(f"{agent_url(server)}/.well-known/agent-card.json", headers={"A2A-Version": "0.3"}).json()
    assert legacy["url"] == agent_url(server) and legacy["protocolVersion"].startswith("0.3")


# -- send, get, stream, cancel ---------------------------------------------------------------------


def test_send_runs_the_agent_and_answers_with_the_completed_task(server: LiveServer, alice: Any) -> None:
    token = token_for(alice)

    async def main() -> tuple[Task, Task, Task]:
        async with connected(server, token, streaming=False) as client:
            [first] = await send(
                client, user_message(TLS_QUESTION, metadata={"customer": "acme", "tier": 2, "app:banner": "spoof"})
            )
            task = first.task
            [second] = await send(client, user_message("Look up ticket INC-1042", context_id=task.context_id))
            stored = await client.get_task(GetTaskRequest(id=task.id))
        return task, second.task, stored

    task, follow_up, stored = asyncio.run(main())
    assert task.status.state == COMPLETED
    # The answer once: the task's one artifact; no status message, no progress in the history.
    [artifact] = task.artifacts
    answer = text_of(artifact.parts)
    assert "expired" in answer and artifact.metadata.fields["final"].bool_value
    assert not task.status.HasField("message")
    assert stored.status.state == COMPLETED and [text_of(a.parts) for a in stored.artifacts] == [answer]
    assert [text_of(m.parts) for m in stored.history] == [TLS_QUESTION]

    # contextId is the session: both turns are in its ledger, the metadata in its state.
    session_id = task.context_id
    assert follow_up.context_id == session_id and follow_up.id != task.id
    run_id = task.metadata.fields["agentsite_run_id"].string_value
    assert api(server, alice, f"/api/runs/{run_id}/")["status"] == "completed"
    session = api(server, alice, f"/api/sessions/{session_id}/")
    assert session["state"]["customer"] == "acme" and session["state"]["tier"] == 2
    events = api(server, alice, f"/api/sessions/{session_id}/events/?limit=500")["results"]
    assert [e["text"] for e in events if e["role"] == "user"] == [TLS_QUESTION, "Look up ticket INC-1042"]
    assert events[0]["state_delta"] == {"customer": "acme", "tier": 2}  # a client never writes `app:` state
    assert any(e["role"] == "tool" and e.get("tool_name") == "inspect_certificate" for e in events)


def test_stream_sends_the_task_progress_then_the_answer_once_and_completion(server: LiveServer, alice: Any) -> None:
    token = token_for(alice)

    async def main() -> list[StreamResponse]:
        async with connected(server, token) as client:
            return await send(client, user_message(TLS_QUESTION))

    responses = asyncio.run(main())
    assert responses[0].HasField("task") and responses[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    statuses = [r.status_update for r in responses if r.HasField("status_update")]
    assert statuses[0].status.state == WORKING and statuses[0].metadata.fields["agentsite_run_id"].string_value
    # Progress (tool calls and results, the text as it comes) is status metadata, not a message.
    assert not any(s.status.HasField("message") for s in statuses)
    progress = [MessageToDict(s.metadata)["agentsite_progress"] for s in statuses[1:-1]]
    calls = [c["name"] for p in progress if p["kind"] == "tool_calls" for c in p["calls"]]
    assert "inspect_certificate" in calls
    assert statuses[-1].status.state == COMPLETED and responses[-1].HasField("status_update")
    [artifact] = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    answer = text_of(artifact.artifact.parts)
    assert artifact.last_chunk and "expired" in answer
    final_id = artifact.artifact.artifact_id
    assert "".join(p["text"] for p in progress if p["kind"] == "text_delta" and p["messageId"] == final_id) == answer


def test_cancel_stops_the_task_and_its_run(slow_server: LiveServer, alice: Any) -> None:
    token = token_for(alice)

    async def main() -> tuple[Task, list[StreamResponse], Task]:
        async with connected(slow_server, token, agent="general") as client:
            stream = client.send_message(user_message("Tell me a long story"))
            seen = [await anext(stream)]
            while not is_text(seen[-1]):  # the model is talking: the run is live
                seen.append(await anext(stream))
            cancelled = await client.cancel_task(CancelTaskRequest(id=seen[0].task.id))
            seen.extend([response async for response in stream])
            stored = await client.get_task(GetTaskRequest(id=seen[0].task.id))
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=seen[0].task.id))
        return cancelled, seen, stored

    cancelled, seen, stored = asyncio.run(main())
    assert cancelled.status.state == CANCELED and stored.status.state == CANCELED
    assert MessageToDict(stored.metadata)["agentsite_progress"] is None  # it waits for nothing now
    assert seen[-1].HasField("status_update") and seen[-1].status_update.status.state == CANCELED
    run_id = stored.metadata.fields["agentsite_run_id"].string_value
    run = api(slow_server, alice, f"/api/runs/{run_id}/")
    assert run["status"] == "cancelled"
    events = api(slow_server, alice, f"/api/sessions/{stored.context_id}/events/?limit=500")["results"]
    assert events[-1]["object"] == "runner.completion"


# -- errors, in A2A's format ------------------------------------------------------------------------


def test_protocol_errors_are_json_rpc_errors(server: LiveServer, alice: Any) -> None:
    token = token_for(alice)
    bad_json = rpc(server, b"{not json", token=token)
    assert bad_json.status_code == 200 and bad_json.json()["error"]["code"] == -32700
    unknown_method = rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "Teleport", "params": {}}, token=token)
    assert unknown_method.json() == {"jsonrpc": "2.0", "id": 1, "error": unknown_method.json()["error"]}
    assert unknown_method.json()["error"]["code"] == -32601
    get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "no-such-task"}}
    assert rpc(server, get, token=token).json()["error"]["code"] == -32001  # TaskNotFoundError
    assert rpc(server, get, token=token, version=None).json()["error"]["code"] == -32009  # no A2A-Version: 0.3
    empty = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "  "}]}},
    }
    assert rpc(server, empty, token=token).json()["error"]["code"] == -32602
    too_big = rpc(server, b"[" + b" " * 1_100_000 + b"]", token=token)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == -32600
    chunked = httpx.post(
        agent_url(server),
        content=iter([b"[" + b" " * 700_000, b" " * 700_000 + b"]"]),
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
    )
    # Sent without a length, refused as the body passes the limit, the same way.
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == -32600
    spoofed = httpx.get(f"{agent_url(server)}/.well-known/agent-card.json", headers={"Host": "evil.example"})
    assert spoofed.status_code == 400  # as Django refuses a Host outside ALLOWED_HOSTS


def test_unknown_agents_are_404_and_missing_or_wrong_tokens_401(server: LiveServer, alice: Any) -> None:
    send_body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}},
    }
    unknown = rpc(server, send_body, token=token_for(alice), agent="nope")
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    assert httpx.get(f"{agent_url(server, 'nope')}/.well-known/agent-card.json").status_code == 404

    missing = rpc(server, send_body)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == -32600 and "Bearer" in missing.json()["error"]["message"]
    wrong = rpc(server, send_body, token="not-a-token")
    assert wrong.status_code == 401 and "token" in wrong.json()["error"]["message"].lower()

    async def with_wrong_token() -> None:
        async with connected(server, "not-a-token") as client:
            await send(client, user_message("hi"))

    with pytest.raises(A2AClientError, match="401"):
        asyncio.run(with_wrong_token())


def test_someone_elses_context_and_tasks_are_not_found(server: LiveServer, alice: Any, bob: Any) -> None:
    alice_token, bob_token = token_for(alice), token_for(bob)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            alices = await stack.enter_async_context(connected(server, alice_token, streaming=False))
            bobs = await stack.enter_async_context(connected(server, bob_token, streaming=False))
            general = await stack.enter_async_context(connected(server, alice_token, agent="general", streaming=False))
            await check(alices, bobs, general)

    async def check(alices: Client, bobs: Client, general: Client) -> None:
        [response] = await send(alices, user_message("Look up ticket INC-1042"))
        task = response.task
        with pytest.raises(InvalidParamsError, match="not found"):
            await send(bobs, user_message("let me in", context_id=task.context_id))
        with pytest.raises(TaskNotFoundError):
            await bobs.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bobs.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await send(
                bobs,
                SendMessageRequest(
                    message=Message(
                        role=Role.ROLE_USER, message_id="m-bob", task_id=task.id, parts=[Part(text="continue")]
                    )
                ),
            )
        with pytest.raises(TaskNotFoundError):  # a task belongs to the agent that ran it
            await general.get_task(GetTaskRequest(id=task.id))

    asyncio.run(main())
    assert api(server, bob, "/api/sessions/")["results"] == []  # bob's refused messages left nothing behind


def test_a2a_0_3_callers_use_the_old_method_names(server: LiveServer, alice: Any) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "r1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "m-03",
                "parts": [{"kind": "text", "text": "Look up ticket INC-1042"}],
            }
        },
    }
    result = rpc(server, body, token=token_for(alice), version=None).json()["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "completed"


# -- our A2AAgent and A2ATool against the live server -------------------------------------------------


def remote_support(server: LiveServer, user: Any, name: str = "remote_support") -> A2AAgent:
    return A2AAgent(name=name, url=agent_url(server), token=token_for(user), description="Troubleshoots production.")


def test_a2a_agent_runs_the_remote_agent_as_one_of_ours(server: LiveServer, alice: Any) -> None:
    agent = remote_support(server, alice)
    sessions = InMemorySessionService()
    runner = Runner(app="client", agents=[agent], session_service=sessions)

    async def main() -> tuple[list[Event], list[Event], Any]:
        first = [e async for e in runner.run(user_id="u1", message=TLS_QUESTION)]
        [session] = await sessions.list_sessions(app="client", user_id="u1")
        second = [e async for e in runner.run(user_id="u1", session_id=session.id, message="And ticket INC-1187?")]
        return first, second, await sessions.get_session(SessionKey(app="client", user_id="u1", session_id=session.id))

    first, second, session = asyncio.run(main())
    chunks = [e for e in first if e.object == OBJECT_CHUNK and e.partial]
    assert chunks and all(e.author == "remote_support" for e in chunks)
    assert any(e.object == OBJECT_A2A_STATUS and "inspect_certificate" in e.text for e in first)
    [answer] = [e for e in first if e.message is not None and e.message.role == "assistant" and not e.partial]
    assert "expired" in answer.text and answer.done
    assert "".join(e.text for e in chunks) == answer.text
    assert first[-1].is_runner_completion and first[-1].extensions["status"] == "completed"
    assert second[-1].extensions["status"] == "completed"

    # The remote conversation continued: one remote session (the context id kept in our state).
    remote_session = session.state[agent.context_key]
    remote = api(server, alice, f"/api/sessions/{remote_session}/events/?limit=500")["results"]
    assert [e["text"] for e in remote if e["role"] == "user"] == [TLS_QUESTION, "And ticket INC-1187?"]
    assert [e.text for e in session.events if e.role == "user"] == [TLS_QUESTION, "And ticket INC-1187?"]


def test_a2a_tool_lets_a_model_ask_the_remote_agent(server: LiveServer, alice: Any) -> None:
    tool = A2ATool(remote_support(server, alice, name="support"))
    assert tool.name == "ask_support" and tool.spec().parameters["required"] == ["question"]
    model = ScriptedModel.of(ScriptStep.call("ask_support", {"question": TLS_QUESTION}), "The remote says: renew it.")
    runner = Runner(
        app="client",
        agents=[LLMAgent(name="boss", model=model, tools=[tool])],
        session_service=InMemorySessionService(),
    )

    async def main() -> list[Event]:
        return [e async for e in runner.run(user_id="u1", message="Find out why TLS fails on payments")]

    events = asyncio.run(main())
    model.assert_consumed()
    [result] = [e for e in events if e.is_tool_result]
    assert "expired" in result.text and result.message is not None and result.message.tool_name == "ask_support"
    assert result.state_delta.get("a2a:support:context_id")
    assert events[-1].extensions["status"] == "completed"


def test_a2a_agent_reports_an_unreachable_or_refusing_remote_as_a_failed_run(server: LiveServer, alice: Any) -> None:
    wrong_token = A2AAgent(name="remote", url=agent_url(server), token="not-a-token")
    runner = Runner(app="client", agents=[wrong_token], session_service=InMemorySessionService())

    async def main() -> list[Event]:
        return [e async for e in runner.run(user_id="u1", message="hi")]

    events = asyncio.run(main())
    [error] = [e for e in events if e.is_error and not e.is_runner_completion]
    assert error.error is not None and error.error.type == "a2a_error" and "401" in error.error.message
    assert events[-1].extensions["status"] == "failed"


def test_cancelling_our_run_cancels_the_remote_task(slow_server: LiveServer, alice: Any) -> None:
    token = token_for(alice)
    agent = A2AAgent(name="remote_general", url=agent_url(slow_server, "general"), token=token)
    runner = Runner(app="client", agents=[agent], session_service=InMemorySessionService())

    async def main() -> tuple[str, Task]:
        handle = await runner.start(user_id="u1", message="Tell me a long story", stream=True)
        task_id = ""
        async for event in handle.events():
            if event.object == OBJECT_CHUNK and not task_id:  # the remote is answering: stop it
                task_id = event.extensions["a2a"]["task_id"]
                runner.cancel(handle.run_id)
        record = await handle.wait()
        assert record.status == "cancelled"
        async with connected(slow_server, token, agent="general") as client:
            for _ in range(50):  # the remote cancel is sent in the background
                task = await client.get_task(GetTaskRequest(id=task_id))
                if task.status.state == CANCELED:
                    break
                await asyncio.sleep(0.1)
        return task_id, task

    task_id, task = asyncio.run(main())
    assert task_id and task.status.state == CANCELED
