"""Regenerate and edit over the session websocket (issue 21): the `regenerate` and `edit`
frames start a new turn as `POST .../regenerate/` and `POST .../events/<id>/edit/` do, and are
refused with REST's codes, through the ASGI application with Channels' `WebsocketCommunicator`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.runs.test_consumers import (  # noqa: F401  # fixtures, used by name
    _fresh_channel_layer,
    alice_cookie,
    alice_session,
    open_socket,
    receive,
    receive_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


def user_messages(frames: list[dict[str, Any]]) -> dict[str, str]:
    """The user messages a run's frames show: ledger event id -> text."""
    ids = [f["messageId"] for f in frames if f["type"] == "TEXT_MESSAGE_START" and f.get("role") == "user"]
    return {
        i: "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == i)
        for i in ids
    }


def ledger_users(client: Any, session_id: str) -> list[dict[str, Any]]:
    events = client.get(f"/api/sessions/{session_id}/events/", {"limit": 500}).json()["results"]
    return [e for e in events if e["role"] == "user"]


async def error_of(socket: WebsocketCommunicator, frame: dict[str, Any]) -> dict[str, Any]:
    await socket.send_json_to(frame)
    answer = await receive(socket)
    assert answer["type"] == "error", answer
    return dict(answer["error"])


async def test_regenerate_and_edit_frames_start_new_turns_that_name_what_they_redo(
    alice_cookie: bytes,  # noqa: F811
    alice_session: str,  # noqa: F811
    alice_api: Any,
    use_model: Callable[[Model], None],
) -> None:
    model = ScriptedModel.of("T-100 is open.", "T-100 is still open.", "T-200 is closed.")
    use_model(model)
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Is T-100 open?"})
    [asked] = user_messages(await receive_until(socket, "RUN_FINISHED"))

    await socket.send_json_to({"type": "regenerate"})
    accepted = await receive(socket)
    assert accepted == {
        "type": "run.accepted",
        "run_id": accepted["run_id"],
        "turn_event_id": accepted["turn_event_id"],
        "regenerates": asked,
    }
    frames = await receive_until(socket, "RUN_FINISHED")
    # The new turn streams on this socket: its user message is the event the answer named.
    assert user_messages(frames) == {accepted["turn_event_id"]: "Is T-100 open?"}
    assert {f["runId"] for f in frames if f["type"] == "RUN_STARTED"} == {accepted["run_id"]}

    await socket.send_json_to({"type": "edit", "event_id": asked, "message": "Is T-200 open?"})
    edited = await receive(socket)
    assert (edited["type"], edited["edit_of"]) == ("run.accepted", asked)
    frames = await receive_until(socket, "RUN_FINISHED")
    assert user_messages(frames) == {edited["turn_event_id"]: "Is T-200 open?"}
    await socket.disconnect()

    assert model.requests[-1].messages[-1].content == "Is T-200 open?"
    users = await sync_to_async(ledger_users)(alice_api, alice_session)
    assert [(u["id"], u.get("regenerates"), u.get("edit_of")) for u in users] == [
        (asked, None, None),
        (accepted["turn_event_id"], asked, None),
        (edited["turn_event_id"], None, asked),
    ]


async def test_bad_redo_frames_get_rest_s_codes_and_the_socket_stays_open(
    alice_cookie: bytes,  # noqa: F811
    alice_session: str,  # noqa: F811
    bob_api: Any,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 50
    use_model(
        ScriptedModel.of(
            "T-100 is open.",
            "Bob's answer.",
            ScriptStep.answer("word " * 200, chunk_size=5, delay_s=0.02),
        )
    )
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))

    assert (await error_of(socket, {"type": "regenerate"}))["code"] == "nothing_to_regenerate"

    await socket.send_json_to({"type": "run", "message": "Is T-100 open?"})
    frames = await receive_until(socket, "RUN_FINISHED")
    [asked] = user_messages(frames)
    answer = next(f["messageId"] for f in frames if f["type"] == "TEXT_MESSAGE_START" and f.get("role") != "user")

    unknown = await error_of(socket, {"type": "edit", "event_id": "no-such-event", "message": "hi"})
    assert (unknown["code"], unknown["field"]) == ("not_found", "event_id")
    assert "no-such-event" in unknown["message"]
    # Another user's message is not in this chat: refused as unknown, and nothing starts.
    bob_run = await sync_to_async(
        lambda: bob_api.post("/api/runs/", {"message": "bob's question", "wait": True}, format="json").json(),
    )()
    bobs = (await sync_to_async(ledger_users)(bob_api, bob_run["session_id"]))[0]["id"]
    foreign = await error_of(socket, {"type": "edit", "event_id": bobs, "message": "hijacked"})
    assert (foreign["code"], foreign["field"]) == ("not_found", "event_id")
    assert [u["text"] for u in await sync_to_async(ledger_users)(bob_api, bob_run["session_id"])] == ["bob's question"]

    not_mine = await error_of(socket, {"type": "edit", "event_id": answer, "message": "hi"})
    assert (not_mine["code"], not_mine["field"]) == ("not_editable", "event_id")
    for frame, field in (
        ({"type": "edit", "event_id": asked, "message": "  "}, "message"),
        ({"type": "edit", "event_id": asked}, "message"),
        ({"type": "edit", "event_id": asked, "message": 7}, "message"),
        ({"type": "edit", "message": "hi"}, "event_id"),
        ({"type": "edit", "event_id": asked, "message": "a\x00b"}, "message"),
    ):
        refused = await error_of(socket, frame)
        assert (refused["code"], refused["field"]) == ("invalid_frame", field), frame
    too_long = await error_of(socket, {"type": "edit", "event_id": asked, "message": "x" * 51})
    assert (too_long["code"], too_long["field"]) == ("message_too_large", "message")

    # While a reply runs: 409's code, for both.
    await socket.send_json_to({"type": "run", "message": "talk for a while"})
    run_id = (await receive(socket))["run_id"]
    await receive_until(socket, "TEXT_MESSAGE_CONTENT")
    assert (await error_of_skipping_events(socket, {"type": "regenerate"}))["code"] == "run_active"
    busy = await error_of_skipping_events(socket, {"type": "edit", "event_id": asked, "message": "again"})
    assert busy["code"] == "run_active"
    await socket.send_json_to({"type": "cancel", "run_id": run_id})
    await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()


async def error_of_skipping_events(socket: WebsocketCommunicator, frame: dict[str, Any]) -> dict[str, Any]:
    """An error frame's error, past the AG-UI events of a run streaming meanwhile."""
    await socket.send_json_to(frame)
    frames = await asyncio.wait_for(receive_until(socket, "error"), timeout=10)
    return dict(frames[-1]["error"])
