"""Steering over the session websocket (SPEC 1.5): `{"type": "message"}` frames into a running
run, through the ASGI application with Channels' `WebsocketCommunicator`, the model being the
local scripted OpenAI-compatible server slowed down."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.runs.test_consumers import (  # noqa: F401  # fixtures, used by name
    AGUI_EVENT,
    TIMEOUT,
    _fresh_channel_layer,
    alice_cookie,
    alice_session,
    open_socket,
)
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

CONTROL = ("run.accepted", "error", "message.queued", "message.withdrawn", "message.consumed", "message.dropped")


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


async def receive(socket: WebsocketCommunicator) -> dict[str, Any]:
    frame = await socket.receive_json_from(timeout=TIMEOUT)
    if frame["type"] not in CONTROL:
        AGUI_EVENT.validate_python(frame)
    return frame


async def receive_until(socket: WebsocketCommunicator, frame_type: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != frame_type:
        frames.append(await receive(socket))
    return frames


async def wait_for(check: Callable[[], Any]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never held")


async def test_a_message_frame_mid_run_reaches_the_next_model_request_of_the_same_run(
    alice_cookie: bytes,  # noqa: F811
    alice_session: str,  # noqa: F811
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
) -> None:
    openai_server.script(
        dataclasses.replace(
            ServerStep.call("lookup_ticket", {"ticket_id": "T-100"}, id="call_1"), chunk_delay_s=0.15, fragment_size=1
        ),
        "Both are open.",
    )
    use_model(OpenAIModel(model="gpt-4o-mini", base_url=openai_server.base_url, api_key="sk-test"))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Is T-100 open?"})
    run_id = (await receive(socket))["run_id"]
    await wait_for(lambda: openai_server.requests)
    await socket.send_json_to({"type": "message", "run_id": run_id, "message": "and T-200?"})
    frames = await receive_until(socket, "message.queued")
    queued = frames[-1]
    assert queued == {"type": "message.queued", "run_id": run_id, "id": queued["id"], "message": "and T-200?"}
    frames += await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert openai_server.requests[1]["messages"][-1] == {"role": "user", "content": "and T-200?"}
    assert openai_server.requests[1]["messages"][-2]["role"] == "tool"
    consumed = next(f for f in frames if f["type"] == "message.consumed")
    assert consumed["id"] == queued["id"] and consumed["state"] == "consumed" and consumed["run_id"] == run_id
    # The user message the queued one became, in the run's stream, after the tool result.
    users = [f for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == consumed["messageId"]]
    assert [f["delta"] for f in users] == ["and T-200?"]
    order = [f["type"] for f in frames]
    assert order.index("TOOL_CALL_RESULT") < frames.index(users[0]) < order.index("RUN_FINISHED")


async def test_bad_message_frames_are_answered_and_a_cancel_reports_the_dropped_ones(
    alice_cookie: bytes,  # noqa: F811
    alice_session: str,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 300, chunk_size=5, delay_s=0.02))
    use_model(model)
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "talk for a while"})
    run_id = (await receive(socket))["run_id"]
    await wait_for(lambda: model.requests)

    async def error_of(frame: dict[str, Any]) -> dict[str, Any]:
        await socket.send_json_to(frame)
        return (await receive_until(socket, "error"))[-1]["error"]

    assert (await error_of({"type": "message", "run_id": "nope", "message": "hi"}))["code"] == "not_found"
    assert (await error_of({"type": "message", "run_id": run_id, "message": "  "}))["code"] == "invalid_frame"
    assert (await error_of({"type": "message", "run_id": run_id}))["field"] == "message"
    assert (await error_of({"type": "message", "message": "hi"}))["field"] == "run_id"

    await socket.send_json_to({"type": "message", "run_id": run_id, "message": "first"})
    kept = (await receive_until(socket, "message.queued"))[-1]
    await socket.send_json_to({"type": "message", "run_id": run_id, "message": "second"})
    taken_back = (await receive_until(socket, "message.queued"))[-1]
    await socket.send_json_to({"type": "withdraw", "run_id": run_id})
    assert (await receive_until(socket, "message.withdrawn"))[-1]["ids"] == [kept["id"], taken_back["id"]]
    await socket.send_json_to({"type": "message", "run_id": run_id, "message": "third"})
    dropped = (await receive_until(socket, "message.queued"))[-1]
    await socket.send_json_to({"type": "cancel", "run_id": run_id})
    rest = await receive_until(socket, "message.dropped")
    assert rest[-2]["type"] == "RUN_FINISHED" and rest[-1]["ids"] == [dropped["id"]]
    assert (await error_of({"type": "message", "run_id": run_id, "message": "late"}))["code"] == "run_not_active"
    await socket.disconnect()
