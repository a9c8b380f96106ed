"""The exact frames a socket receives for one run (issue 23): every field, in order, each
frame's keys in their order, so a change to how frames are translated, rendered or sent
cannot alter what a client receives unnoticed. Ids and times differ per run and are named
by their first appearance; live text deltas are joined per message (how many a batch merges
depends on timing, the text they carry does not)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from runs.core.llm.base import Model
from tests.runs.test_consumers import (  # noqa: F401  # fixtures, used by name
    TIMEOUT,
    _fresh_channel_layer,
    alice_session,
    alice_token,
    open_socket,
    tool_then_answer,
)

pytestmark = pytest.mark.django_db(transaction=True)

IDS = ("threadId", "runId", "messageId", "toolCallId", "parentMessageId", "run_id")


async def texts_until_finished(socket: WebsocketCommunicator) -> list[str]:
    texts: list[str] = []
    while not texts or json.loads(texts[-1])["type"] != "RUN_FINISHED":
        texts.append(await socket.receive_from(timeout=TIMEOUT))
    return texts


def normalized(texts: list[str]) -> list[str]:
    """Each frame's JSON with its ids named by first appearance and its timestamp checked and
    blanked; consecutive live deltas of one message joined; a tool result's content cut."""
    names: dict[str, str] = {}
    frames: list[dict[str, Any]] = []
    for text in texts:
        frame = json.loads(text)
        for key in IDS:
            if key in frame:
                frame[key] = names.setdefault(frame[key], f"<id{len(names) + 1}>")
        if frame["type"] == "TOOL_CALL_RESULT":  # the tool's output: its start, and whole JSON
            assert isinstance(json.loads(frame["content"]), dict)
            frame["content"] = frame["content"][:40] + "..."
        if "timestamp" in frame:
            assert isinstance(frame["timestamp"], int) and frame["timestamp"] > 0
            frame["timestamp"] = "<ts>"
        previous = frames[-1] if frames else None
        if (
            previous is not None
            and frame["type"] == previous["type"] == "TEXT_MESSAGE_CONTENT"
            and "metadata" not in frame
            and "metadata" not in previous
            and frame["messageId"] == previous["messageId"]
        ):
            previous["delta"] += frame["delta"]
            continue
        frames.append(frame)
    return [json.dumps(frame) for frame in frames]


PINNED = [
    '{"type": "run.accepted", "run_id": "<id1>"}',
    '{"type": "RUN_STARTED", "timestamp": "<ts>", "metadata": {"seq": 1}, "threadId": "<id2>", "runId": "<id1>"}',
    '{"type": "TEXT_MESSAGE_START", "timestamp": "<ts>", "metadata": {"seq": 1}, "messageId": "<id3>", "role": "user"}',
    '{"type": "TEXT_MESSAGE_CONTENT", "timestamp": "<ts>", "metadata": {"seq": 1}, "messageId": "<id3>", "delta": "Why does TLS fail?"}',
    '{"type": "TEXT_MESSAGE_END", "timestamp": "<ts>", "metadata": {"seq": 1}, "messageId": "<id3>"}',
    '{"type": "STEP_STARTED", "timestamp": "<ts>", "metadata": {"seq": 2}, "stepName": "model"}',
    '{"type": "TOOL_CALL_START", "timestamp": "<ts>", "metadata": {"seq": 2}, "toolCallId": "<id4>", "toolCallName": "search_logs", "parentMessageId": "<id5>"}',
    '{"type": "TOOL_CALL_ARGS", "timestamp": "<ts>", "metadata": {"seq": 2}, "toolCallId": "<id4>", "delta": "{\\"query\\": \\"tls\\"}"}',
    '{"type": "TOOL_CALL_END", "timestamp": "<ts>", "metadata": {"seq": 2}, "toolCallId": "<id4>"}',
    '{"type": "STEP_FINISHED", "timestamp": "<ts>", "metadata": {"seq": 2}, "stepName": "model"}',
    '{"type": "STEP_STARTED", "timestamp": "<ts>", "metadata": {"seq": 3}, "stepName": "search_logs"}',
    '{"type": "TOOL_CALL_RESULT", "timestamp": "<ts>", "metadata": {"seq": 3}, "messageId": "<id6>", "toolCallId": "<id4>", "content": "{\\"service\\": null, \\"query\\": \\"tls\\", \\"level...", "role": "tool"}',
    '{"type": "STEP_FINISHED", "timestamp": "<ts>", "metadata": {"seq": 3}, "stepName": "search_logs"}',
    '{"type": "STEP_STARTED", "timestamp": "<ts>", "stepName": "model"}',
    '{"type": "TEXT_MESSAGE_START", "timestamp": "<ts>", "messageId": "<id7>", "role": "assistant"}',
    '{"type": "TEXT_MESSAGE_CONTENT", "timestamp": "<ts>", "messageId": "<id7>", "delta": "The certificate expired on 2024-01-01, renew it."}',
    '{"type": "TEXT_MESSAGE_END", "timestamp": "<ts>", "metadata": {"seq": 4}, "messageId": "<id7>"}',
    '{"type": "STEP_FINISHED", "timestamp": "<ts>", "metadata": {"seq": 4}, "stepName": "model"}',
    '{"type": "RUN_FINISHED", "timestamp": "<ts>", "metadata": {"seq": 5}, "threadId": "<id2>", "runId": "<id1>"}',
]


async def test_a_socket_receives_exactly_these_frames_for_a_run(
    alice_token: str,  # noqa: F811
    alice_session: str,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    use_model(tool_then_answer("The certificate expired on 2024-01-01, renew it."))
    socket = await open_socket(f"/ws/sessions/{alice_session}/?token={alice_token}", origin=False)
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    texts = await texts_until_finished(socket)
    assert await socket.receive_nothing(0.2)
    await socket.disconnect()

    # Compact JSON, as pydantic and the control frames' json.dumps write it.
    assert [t for t in texts if t != json.dumps(json.loads(t), separators=(",", ":"), ensure_ascii=False)] == [
        texts[0]  # run.accepted: json.dumps' default separators
    ]
    assert normalized(texts) == PINNED
