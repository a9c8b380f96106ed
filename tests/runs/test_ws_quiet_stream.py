"""A socket's quiet stream (issue 23): no ledger re-read while this process vouches that
nothing was missed, and still a re-read at the normal pace when the layer dropped an event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from channels.layers import get_channel_layer
from django.test import Client

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION
from tests.runs.test_consumers import open_socket, receive, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

POLL_S = 0.25
PAUSE_S = 1.5  # a model step this long: quiet past several polls


@pytest.fixture
def alice_cookie(alice: Any) -> bytes:
    client = Client()
    client.force_login(alice)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def alice_session(alice: Any) -> str:
    return session_services.session_create(user=alice, agent="support").id


@pytest.fixture
def ledger_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The after_seq of each ledger read a socket makes (its catch-ups)."""
    from runs.surfaces.websocket import consumers

    reads: list[int] = []
    read = session_selectors.events_after

    def counted(*, session_id: str, after_seq: int, limit: int) -> Any:
        reads.append(after_seq)
        return read(session_id=session_id, after_seq=after_seq, limit=limit)

    monkeypatch.setattr(session_selectors, "events_after", counted)
    monkeypatch.setattr(consumers, "LEDGER_POLL_S", POLL_S)
    return reads


def slow_answer() -> ScriptedModel:
    # One chunk after a pause: the stream is quiet for PAUSE_S mid-run.
    return ScriptedModel.of(ScriptStep.answer("The certificate expired.", chunk_size=100, delay_s=PAUSE_S))


async def test_a_quiet_run_of_this_process_costs_no_ledger_re_read(
    alice_cookie: bytes,
    alice_session: str,
    use_model: Callable[[Model], None],
    ledger_reads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runs.surfaces.websocket import consumers

    # However slow this machine makes the pause, it stays short of the re-read every vouched
    # stream still gets.
    monkeypatch.setattr(consumers, "VOUCHED_POLLS", 1000)
    use_model(slow_answer())
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    assert (await receive(socket))["type"] == "run.accepted"
    frames = await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert "TEXT_MESSAGE_CONTENT" in [f["type"] for f in frames]
    # The replay at connect only: the run's user message (saved, not broadcast) goes out as
    # its start saved it (issue 23: before, read back once); the quiet pause, several polls
    # long, reads nothing (before: re-reads after 1, 3 and 6 polls).
    assert ledger_reads == [0]


async def test_a_completion_the_layer_drops_is_caught_up_at_the_normal_pace(
    alice_cookie: bytes,
    alice_session: str,
    use_model: Callable[[Model], None],
    ledger_reads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink published the completion (and noted it); the layer lost it on the way."""
    from runs.fanout import ChannelLayerSink

    layer = get_channel_layer()
    dropped: list[int] = []

    class Lossy:
        def __getattr__(self, name: str) -> Any:
            return getattr(layer, name)

        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            items = []
            for run_id, data in message.get("items") or []:
                if data.get("done") and data.get("object") == OBJECT_RUNNER_COMPLETION:
                    dropped.append(data["seq"])
                else:
                    items.append([run_id, data])
            if items or "items" not in message:
                await layer.group_send(group, {**message, **({"items": items} if "items" in message else {})})

    monkeypatch.setattr(ChannelLayerSink, "layer", property(lambda self: Lossy()))
    use_model(ScriptedModel.of(ScriptStep.answer("The certificate expired.")))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    run_id = (await receive(socket))["run_id"]
    frames = await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert len(dropped) == 1
    assert frames[-1]["runId"] == run_id and frames[-1]["metadata"]["seq"] == dropped[0]
