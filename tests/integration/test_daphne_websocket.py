"""The session websocket over a real Daphne server, driven by the `websockets` client.

The server's model is the real OpenAI provider talking to a local scripted
OpenAI-compatible server (`tests/support/openai_server/`): deterministic like the offline
planner, but able to stream slowly, which a cancel and a mid-run disconnect need.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from ag_ui.core import Event as AguiEvent
from asgiref.sync import sync_to_async
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from sessions_app import models as orm
from sessions_app import services as session_services
from tests.support.daphne import LiveServer, live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)
TIMEOUT = 10
ANSWER = "The intermediate certificate is missing from the chain served by checkout-api."


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: Any, model_server: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    # Auto memory off: the scripted model answers only the chat turns these tests script, and
    # an extraction after a run would take one of them (or find the script exhausted).
    env = {
        "AGENTSITE_MODEL": "gpt-4o-mini",
        "OPENAI_BASE_URL": model_server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "AGENTSITE_MEMORY_AUTO": "0",
    }
    with live_daphne(tmp_path_factory.mktemp("daphne"), env=env) as live:
        yield live


@pytest.fixture
def script(model_server: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    """The module's model server; every step a test scripts must be used by its end."""
    yield model_server
    try:
        model_server.assert_consumed()
    finally:
        # The server outlives the test (Daphne knows its port): leave it empty for the next.
        while model_server.remaining:
            model_server._next_step({})
        model_server.unexpected.clear()


@pytest.fixture
def token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def session_id(alice: Any) -> str:
    return session_services.session_create(user=alice, agent="support").id


def socket(server: LiveServer, session_id: str, token: str | None, *, after_seq: int = 0) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return connect(
        f"{server.ws_url}/ws/sessions/{session_id}/?after_seq={after_seq}",
        origin=server.url,  # type: ignore[arg-type]  # an Origin is a str
        additional_headers=headers,
        open_timeout=TIMEOUT,
    )


async def receive(ws: ClientConnection) -> dict[str, Any]:
    frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    if frame["type"] not in ("run.accepted", "error"):
        AGUI_EVENT.validate_python(frame)
    return frame


async def receive_until(ws: ClientConnection, event_type: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != event_type:
        frames.append(await receive(ws))
    return frames


async def receive_until_model_text(ws: ClientConnection) -> list[dict[str, Any]]:
    """Frames up to the first text the model streams: the run's own user message comes first as
    a user TEXT_MESSAGE, before the model is asked, so its content proves nothing was requested."""
    frames: list[dict[str, Any]] = []
    roles: dict[str, str] = {}
    while True:
        frame = await receive(ws)
        frames.append(frame)
        if frame["type"] == "TEXT_MESSAGE_START":
            roles[frame["messageId"]] = frame.get("role", "assistant")
        elif frame["type"] == "TEXT_MESSAGE_CONTENT" and roles.get(frame["messageId"]) == "assistant":
            return frames


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


def seqs(frames: list[dict[str, Any]]) -> set[int]:
    return {f["metadata"]["seq"] for f in frames if "seq" in (f.get("metadata") or {})}


@sync_to_async
def completion_status(session_id: str) -> str | None:
    last = orm.Event.objects.filter(session_id=session_id).order_by("-seq").first()
    if last is None or last.object != "runner.completion":
        return None
    return str(last.payload["extensions"]["status"])


async def wait_for_completion(session_id: str, timeout_s: float = TIMEOUT) -> str:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (status := await completion_status(session_id)) is None:
        assert asyncio.get_running_loop().time() < deadline, "the run did not complete"
        await asyncio.sleep(0.05)
    return status


def tool_then_answer(*, chunk_delay_s: float = 0.0, answer: str = ANSWER) -> tuple[ServerStep, ServerStep]:
    return (
        ServerStep.call("search_logs", {"service": "checkout-api", "query": "tls"}, id="call_logs"),
        ServerStep.answer(answer, chunk_size=8, chunk_delay_s=chunk_delay_s),
    )


async def test_two_sockets_on_one_session_receive_every_event_in_order(
    server: LiveServer, script: ScriptedOpenAIServer, token: str, session_id: str
) -> None:
    script.script(*tool_then_answer())
    async with socket(server, session_id, token) as first, socket(server, session_id, token) as second:
        await first.send(json.dumps({"type": "run", "message": "Why does checkout fail TLS?"}))
        accepted = await receive(first)
        assert accepted["type"] == "run.accepted"
        seen_first = await receive_until(first, "RUN_FINISHED")
        seen_second = await receive_until(second, "RUN_FINISHED")
    assert seen_first == seen_second
    assert seen_first[0]["runId"] == accepted["run_id"]
    assert {"TOOL_CALL_START", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"} <= set(kinds(seen_first))
    text = "".join(f["delta"] for f in seen_first if f["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.endswith(ANSWER)


async def test_a_disconnect_and_a_reconnect_with_after_seq_lose_nothing_and_repeat_nothing(
    server: LiveServer, script: ScriptedOpenAIServer, token: str, session_id: str
) -> None:
    answer = "word " * 40
    script.script(*tool_then_answer(chunk_delay_s=0.02, answer=answer))
    async with socket(server, session_id, token) as first:
        await first.send(json.dumps({"type": "run", "message": "Why does checkout fail TLS?"}))
        await receive(first)
        before = await receive_until(first, "TOOL_CALL_RESULT")
        before += [await receive(first) for _ in range(3)]
    async with socket(server, session_id, token, after_seq=max(seqs(before))) as second:
        after = await receive_until(second, "RUN_FINISHED")
    async with socket(server, session_id, token) as third:
        reference = await receive_until(third, "RUN_FINISHED")

    assert "RUN_STARTED" not in kinds(after)
    assert seqs(before).isdisjoint(seqs(after))
    assert seqs(before) | seqs(after) == seqs(reference)
    assert [f["toolCallId"] for f in before + after if f["type"] == "TOOL_CALL_START"] == ["call_logs"]
    answer_id = [f["messageId"] for f in reference if f["type"] == "TEXT_MESSAGE_START"][-1]
    resumed = "".join(f["delta"] for f in after if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == answer_id)
    assert resumed == answer


async def test_a_cancel_frame_stops_the_run(
    server: LiveServer, script: ScriptedOpenAIServer, token: str, session_id: str
) -> None:
    script.script(ServerStep.answer("word " * 200, chunk_size=5, chunk_delay_s=0.02))
    async with socket(server, session_id, token) as ws:
        await ws.send(json.dumps({"type": "run", "message": "Talk for a while."}))
        run_id = (await receive(ws))["run_id"]
        await receive_until_model_text(ws)  # the model's request is in: the scripted step is used
        await ws.send(json.dumps({"type": "cancel", "run_id": run_id}))
        rest = await receive_until(ws, "RUN_FINISHED")
    assert rest[-1] == {**rest[-1], "runId": run_id, "outcome": {"type": "cancelled"}}
    assert "RUN_ERROR" not in kinds(rest)
    assert await wait_for_completion(session_id) == "cancelled"


async def test_the_run_continues_after_its_socket_closes(
    server: LiveServer, script: ScriptedOpenAIServer, token: str, session_id: str
) -> None:
    script.script(*tool_then_answer(chunk_delay_s=0.02))
    async with socket(server, session_id, token) as ws:
        await ws.send(json.dumps({"type": "run", "message": "Why does checkout fail TLS?"}))
        assert (await receive(ws))["type"] == "run.accepted"
    assert await wait_for_completion(session_id) == "completed"


async def test_refusals_over_a_real_socket(server: LiveServer, token: str, session_id: str, bob: Any) -> None:
    async with socket(server, session_id, None) as anonymous:
        with pytest.raises(ConnectionClosed) as closed:
            await anonymous.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    bobs = await sync_to_async(session_services.session_create)(user=bob, agent="support")
    async with socket(server, bobs.id, token) as foreign:
        with pytest.raises(ConnectionClosed) as closed:
            await foreign.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404  # not yours = not there
    with pytest.raises(InvalidStatus):  # a foreign origin never gets a socket
        async with connect(
            f"{server.ws_url}/ws/sessions/{session_id}/",
            origin="https://evil.example",  # type: ignore[arg-type]
            additional_headers={"Authorization": f"Bearer {token}"},
            open_timeout=TIMEOUT,
        ):
            pass


def test_server_log_has_no_tracebacks(server: LiveServer) -> None:
    assert "Traceback" not in server.output(), server.output()[-4000:]
