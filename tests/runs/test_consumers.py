"""The session websocket (`runs/surfaces/websocket/consumers.py`), through the ASGI application with Channels'
`WebsocketCommunicator`: authentication, close codes, client frames, fan-out and replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from ag_ui.core import Event as AguiEvent
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from agentsite.composition import run_manager
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app import services as session_services

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")  # a cookie socket's Origin must be the Host's own origin
AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)
TIMEOUT = 5


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(autouse=True)
async def _fresh_channel_layer() -> AsyncIterator[None]:
    """The in-memory layer is process-wide: start each test without members of older loops."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        # Redis: groups are per session id, so tests cannot meet; and flushing would touch
        # connection pools that belong to the loops of earlier tests.
        yield
        return
    await layer.flush()
    yield
    await layer.flush()


@pytest.fixture
def alice_cookie(alice: Any) -> bytes:
    client = Client()
    client.force_login(alice)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def alice_session(alice: Any) -> str:
    return session_services.session_create(user=alice, agent="support").id


@pytest.fixture
def bob_session(bob: Any) -> str:
    return session_services.session_create(user=bob, agent="support").id


def tool_then_answer(answer: str = "The certificate expired on 2024-01-01.", **answer_kwargs: Any) -> ScriptedModel:
    return ScriptedModel.of(
        ScriptStep.call("search_logs", {"query": "tls"}, id="call_logs"),
        ScriptStep.answer(answer, chunk_size=6, **answer_kwargs),
    )


async def open_socket(path: str, *headers: tuple[bytes, bytes], origin: bool = True) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, path, headers=[*([ORIGIN, HOST] if origin else []), *headers])
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected, "the handshake was refused"
    return communicator


async def receive(communicator: WebsocketCommunicator) -> dict[str, Any]:
    frame = await communicator.receive_json_from(timeout=TIMEOUT)
    if frame["type"] not in ("run.accepted", "error"):
        AGUI_EVENT.validate_python(frame)  # every other frame is an AG-UI event
    return frame


async def receive_until(communicator: WebsocketCommunicator, event_type: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != event_type:
        frames.append(await receive(communicator))
    return frames


async def close_code(communicator: WebsocketCommunicator) -> int:
    output = await communicator.receive_output(timeout=TIMEOUT)
    assert output["type"] == "websocket.close"
    return int(output["code"])


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


def seqs(frames: list[dict[str, Any]]) -> set[int]:
    return {f["metadata"]["seq"] for f in frames if "seq" in (f.get("metadata") or {})}


# -- authentication and access ----------------------------------------------------------------


async def test_a_cookie_session_runs_the_agent_and_sees_the_whole_turn(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    model = tool_then_answer()
    use_model(model)
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    accepted = await receive(socket)
    assert accepted["type"] == "run.accepted" and accepted["run_id"]
    frames = await receive_until(socket, "RUN_FINISHED")
    model.assert_consumed()
    await socket.disconnect()

    assert frames[0] == {**frames[0], "type": "RUN_STARTED", "threadId": alice_session, "runId": accepted["run_id"]}
    user = frames[1:4]
    assert kinds(user) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
    assert user[0]["role"] == "user" and user[1]["delta"] == "Why does TLS fail?"
    assert {"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"} <= set(kinds(frames))
    answer = "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer.endswith("The certificate expired on 2024-01-01.")
    assert frames[-1]["runId"] == accepted["run_id"]


async def test_a_token_sockets_turn_makes_no_hop_to_channels_database_thread(
    alice_token: str, alice_session: str, use_model: Callable[[Model], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Channels hops to its thread-sensitive thread before every handler to close that
    # thread's stale connections, and its cookie stack to look the session's user up; the
    # consumer queries only on the database pool, and a token decides the user.
    import channels.auth
    import channels.consumer

    hops: list[str] = []

    async def counted() -> None:
        hops.append("close_old_connections")

    session_user = channels.auth.get_user

    async def looked_up(scope: Any) -> Any:
        hops.append("session user")
        return await session_user(scope)

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    monkeypatch.setattr(channels.auth, "get_user", looked_up)
    model = tool_then_answer()
    use_model(model)
    socket = await open_socket(f"/ws/sessions/{alice_session}/?token={alice_token}")
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    assert (await receive(socket))["type"] == "run.accepted"
    frames = await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert "TOOL_CALL_RESULT" in kinds(frames)
    assert hops == []


@pytest.mark.parametrize("how", ["query", "header"])
async def test_a_token_authenticates_a_socket(
    how: str, alice_token: str, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Hello."))
    if how == "query":
        socket = await open_socket(f"/ws/sessions/{alice_session}/?token={alice_token}")
    else:
        socket = await open_socket(
            f"/ws/sessions/{alice_session}/", (b"authorization", f"Bearer {alice_token}".encode())
        )
    await socket.send_json_to({"type": "run", "message": "hi"})
    assert (await receive(socket))["type"] == "run.accepted"
    assert kinds(await receive_until(socket, "RUN_FINISHED"))[-1] == "RUN_FINISHED"
    await socket.disconnect()


async def test_close_codes_say_why_a_socket_was_refused(
    alice_cookie: bytes, alice_token: str, alice_session: str, bob_session: str
) -> None:
    cases = [
        (f"/ws/sessions/{alice_session}/", (), 4401),  # no credentials
        (f"/ws/sessions/{alice_session}/?token=wrong", (b"cookie", alice_cookie), 4401),  # a bad token decides
        ("/ws/sessions/no-such-session/", (b"cookie", alice_cookie), 4404),
        (f"/ws/sessions/{bob_session}/", (b"cookie", alice_cookie), 4404),  # not yours = not there
        (f"/ws/sessions/{bob_session}/?token={alice_token}", (), 4404),
        (f"/ws/sessions/{alice_session}/?after_seq=-1", (b"cookie", alice_cookie), 4400),
        (f"/ws/sessions/{alice_session}/?after_seq=x", (b"cookie", alice_cookie), 4400),
    ]
    for path, header, code in cases:
        socket = await open_socket(path, *([header] if header else []))
        assert await close_code(socket) == code, path


async def test_a_foreign_origin_is_refused(alice_cookie: bytes, alice_session: str) -> None:
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{alice_session}/",
        headers=[(b"origin", b"https://evil.example"), HOST, (b"cookie", alice_cookie)],
    )
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert not connected


# -- client frames -----------------------------------------------------------------------------


async def test_malformed_frames_get_an_error_frame_and_the_socket_stays_open(
    alice_cookie: bytes, alice_session: str, bob: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Still here."))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    bad_frames: list[tuple[str | bytes, str, str | None]] = [
        ("not json", "malformed_json", None),
        ("[1, 2]", "invalid_frame", None),
        (json.dumps({"message": "hi"}), "invalid_frame", "type"),
        (json.dumps({"type": "dance"}), "unknown_type", "type"),
        (json.dumps({"type": "run"}), "invalid_frame", "message"),
        (json.dumps({"type": "run", "message": "   "}), "invalid_frame", "message"),
        (json.dumps({"type": "run", "message": 42}), "invalid_frame", "message"),
        (json.dumps({"type": "run", "message": "hi", "agent": 7}), "invalid_frame", "agent"),
        (json.dumps({"type": "run", "message": "hi", "agent": "nobody"}), "unknown_agent", "agent"),
        (json.dumps({"type": "cancel"}), "invalid_frame", "run_id"),
        (json.dumps({"type": "cancel", "run_id": "no-such-run"}), "not_found", "run_id"),
        (b"\x00binary", "invalid_frame", None),
    ]
    for frame, code, field in bad_frames:
        if isinstance(frame, bytes):
            await socket.send_to(bytes_data=frame)
        else:
            await socket.send_to(text_data=frame)
        answer = await receive(socket)
        assert answer["type"] == "error", frame
        assert answer["error"]["code"] == code, frame
        assert answer["error"].get("field") == field, frame
        assert answer["error"]["message"]
    # Still open and working.
    await socket.send_json_to({"type": "run", "message": "are you there?"})
    assert (await receive(socket))["type"] == "run.accepted"
    assert kinds(await receive_until(socket, "RUN_FINISHED"))[-1] == "RUN_FINISHED"
    await socket.disconnect()


async def test_a_cancel_frame_ends_the_run_with_run_finished(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(ScriptStep.answer("word " * 300, chunk_size=5, delay_s=0.02)))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "talk for a while"})
    run_id = (await receive(socket))["run_id"]
    await receive_until(socket, "TEXT_MESSAGE_CONTENT")
    await socket.send_json_to({"type": "cancel", "run_id": run_id})
    rest = await receive_until(socket, "RUN_FINISHED")
    assert rest[-1]["outcome"] == {"type": "cancelled"} and "RUN_ERROR" not in kinds(rest)
    record = await run_manager().await_run(run_id, TIMEOUT)
    assert record is not None and record.status == "cancelled"
    # Cancelling a run that ended is refused, and the socket stays usable.
    await socket.send_json_to({"type": "cancel", "run_id": run_id})
    assert (await receive(socket))["error"]["code"] == "run_not_active"
    await socket.disconnect()


# -- fan-out, replay, detachment ------------------------------------------------------------------


async def test_two_sockets_on_a_session_receive_the_same_events_in_the_same_order(
    alice_cookie: bytes, alice_token: str, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(tool_then_answer())
    first = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    second = await open_socket(f"/ws/sessions/{alice_session}/?token={alice_token}")
    await first.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    assert (await receive(first))["type"] == "run.accepted"
    seen_first = await receive_until(first, "RUN_FINISHED")
    seen_second = await receive_until(second, "RUN_FINISHED")
    assert seen_first == seen_second
    assert "TEXT_MESSAGE_CONTENT" in kinds(seen_second) and "TOOL_CALL_RESULT" in kinds(seen_second)
    await first.disconnect()
    await second.disconnect()


async def test_replay_shows_the_ledger_with_the_same_ids_as_live(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(tool_then_answer())
    live = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await live.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    await receive(live)
    live_frames = await receive_until(live, "RUN_FINISHED")
    await live.disconnect()

    replay = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    replay_frames = await receive_until(replay, "RUN_FINISHED")
    await replay.disconnect()

    def ids(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
        wanted = {
            "RUN_STARTED": "runId",
            "TEXT_MESSAGE_START": "messageId",
            "TOOL_CALL_START": "toolCallId",
            "TOOL_CALL_RESULT": "messageId",
            "RUN_FINISHED": "runId",
        }
        return [(f["type"], f[wanted[f["type"]]]) for f in frames if f["type"] in wanted]

    assert ids(replay_frames) == ids(live_frames)
    text = "".join(f["delta"] for f in replay_frames if f["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "".join(f["delta"] for f in live_frames if f["type"] == "TEXT_MESSAGE_CONTENT")


async def test_reconnecting_with_after_seq_loses_nothing_and_duplicates_nothing(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(tool_then_answer("word " * 60, delay_s=0.01))
    first = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await first.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    await receive(first)
    before = await receive_until(first, "TOOL_CALL_RESULT")
    before += [await receive(first) for _ in range(4)]  # into the streamed answer
    await first.disconnect()
    resume_at = max(seqs(before))

    second = await open_socket(f"/ws/sessions/{alice_session}/?after_seq={resume_at}", (b"cookie", alice_cookie))
    after = await receive_until(second, "RUN_FINISHED")
    await second.disconnect()
    everything = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    reference = await receive_until(everything, "RUN_FINISHED")
    await everything.disconnect()

    assert "RUN_STARTED" not in kinds(after)  # the client saw this run start
    assert seqs(before).isdisjoint(seqs(after))  # nothing twice
    assert seqs(before) | seqs(after) == seqs(reference)  # nothing lost
    for key in ("toolCallId",):
        starts = [f[key] for f in before + after if f["type"] == "TOOL_CALL_START"]
        assert len(starts) == len(set(starts)) == 1
    answer_id = next(
        f["messageId"] for f in reference if f["type"] == "TEXT_MESSAGE_START" and f["role"] == "assistant"
    )
    resumed = "".join(
        f["delta"] for f in after if f.get("messageId") == answer_id and f["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert resumed == "word " * 60  # the answer cut off by the disconnect comes back whole


async def test_a_run_goes_on_after_the_socket_that_started_it_closes(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(tool_then_answer(delay_s=0.01))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    run_id = (await receive(socket))["run_id"]
    await socket.disconnect()
    record = await run_manager().await_run(run_id, TIMEOUT)
    assert record is not None and record.status == "completed"
    later = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    frames = await receive_until(later, "RUN_FINISHED")
    assert frames[-1]["runId"] == run_id  # its completion event is in the ledger
    await later.disconnect()


async def test_a_completion_the_channel_layer_drops_still_ends_the_run_on_the_socket(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full inbox or a Redis blip loses live messages, and nothing comes after the last
    one to reveal the gap: the socket re-reads the ledger once the stream goes quiet."""
    from runs.fanout import ChannelLayerSink
    from runs.surfaces.websocket import consumers

    publish = ChannelLayerSink.publish
    dropped: list[int | None] = []

    async def lossy(self: ChannelLayerSink, record: Any, event: Any) -> None:
        if event.is_runner_completion:
            dropped.append(event.seq)
            return
        await publish(self, record, event)

    monkeypatch.setattr(ChannelLayerSink, "publish", lossy)
    monkeypatch.setattr(consumers, "LEDGER_POLL_S", 0.2)
    use_model(tool_then_answer())
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    run_id = (await receive(socket))["run_id"]
    frames = await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert len(dropped) == 1 and frames[-1]["runId"] == run_id
    assert frames[-1]["metadata"]["seq"] == dropped[0]
    reference = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    replayed = await receive_until(reference, "RUN_FINISHED")
    await reference.disconnect()
    assert seqs(frames) == seqs(replayed)


async def test_a_frame_sent_after_the_client_went_away_is_dropped_not_raised() -> None:
    from runs.surfaces.websocket.consumers import SessionConsumer

    consumer = SessionConsumer()
    sent: list[dict[str, Any]] = []

    async def closed_protocol(message: dict[str, Any]) -> None:
        sent.append(message)
        raise ConnectionError("Attempt to send on a closed protocol")  # what the server raises

    consumer.base_send = closed_protocol
    await consumer.send(text_data='{"type": "RUN_STARTED"}')  # does not raise
    await consumer.send(text_data='{"type": "RUN_FINISHED"}')  # not even tried: the client is gone
    assert [m["text"] for m in sent] == ['{"type": "RUN_STARTED"}']


# -- the run's user message (issue 23) ---------------------------------------------------------


def _count_ledger_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The `after_seq` of every ledger page the sockets read from now on, recorded once the
    page is read."""
    from runs.surfaces.websocket import replay as ws_replay

    reads: list[int] = []
    read = ws_replay._events_after

    async def counted(session_id: str, after_seq: int, limit: int) -> Any:
        page = await read(session_id, after_seq, limit)
        reads.append(after_seq)
        return page

    monkeypatch.setattr(ws_replay, "_events_after", counted)
    return reads


async def caught_up(reads: list[int], sockets: int) -> None:
    """Wait until that many sockets have read their connect catch-up (a socket accepts first,
    then joins its group, then catches up), as counted by `_count_ledger_reads`."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while len(reads) < sockets:
        assert asyncio.get_running_loop().time() < deadline, "the sockets never caught up"
        await asyncio.sleep(0.01)


def _user_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = {f["messageId"] for f in frames if f["type"] == "TEXT_MESSAGE_START" and f["role"] == "user"}
    return [f for f in frames if f.get("messageId") in ids]


async def test_a_run_started_on_the_socket_shows_its_user_message_without_reading_it_back(
    alice_cookie: bytes, alice_session: str, use_model: Callable[[Model], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user message the start saved goes out as saved, no ledger read for it, and as
    the ledger replays it."""
    reads = _count_ledger_reads(monkeypatch)
    use_model(tool_then_answer())
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    await receive(socket)
    shown = await receive_until(socket, "TEXT_MESSAGE_END")
    assert reads == [0]  # the connect's catch-up only (the frames are handled after it): not read back
    frames = shown + await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()
    replay = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    replayed = await receive_until(replay, "RUN_FINISHED")
    await replay.disconnect()

    user = _user_frames(frames)
    assert kinds(user) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
    assert user[1]["delta"] == "Why does TLS fail?" and seqs(user) == {1}
    assert user == _user_frames(replayed)


async def test_a_saved_event_the_socket_lacks_before_its_run_comes_from_the_ledger_in_order(
    alice: Any,
    alice_cookie: bytes,
    alice_session: str,
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An event saved on the session after the socket's catch-up and never published: the
    run's user message does not follow the last seq sent, so the socket reads the ledger
    and shows both, in seq order."""
    from django.conf import settings

    from sessions_app.backends import DjangoSessionService
    from sessions_app.core.events import Event, Message
    from sessions_app.core.session import SessionKey

    reads = _count_ledger_reads(monkeypatch)
    use_model(tool_then_answer())
    socket = await open_socket(f"/ws/sessions/{alice_session}/", (b"cookie", alice_cookie))
    # The note must come after the connect's catch-up, which runs once the socket is open:
    # saved before it, the catch-up would show it and the run would have nothing to read.
    await caught_up(reads, 1)
    service = DjangoSessionService()
    key = SessionKey(app=settings.AGENTSITE_APP, user_id=str(alice.pk), session_id=alice_session)
    session = await service.get_session(key)
    assert session is not None
    note = Event(author="support", message=Message(role="assistant", content="Noted before the run."))
    await service.append_events(session, [note])
    read_before_run = len(reads)
    await socket.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    await receive(socket)
    frames = await receive_until(socket, "RUN_FINISHED")
    await socket.disconnect()

    assert len(reads) > read_before_run
    shown = [(f["type"], f["metadata"]["seq"]) for f in frames if f["type"] == "TEXT_MESSAGE_END"]
    assert shown[:2] == [("TEXT_MESSAGE_END", 1), ("TEXT_MESSAGE_END", 2)]
    assert _user_frames(frames)[1]["delta"] == "Why does TLS fail?"
    seen = [f["metadata"]["seq"] for f in frames if "seq" in (f.get("metadata") or {})]
    assert seen == sorted(seen)
