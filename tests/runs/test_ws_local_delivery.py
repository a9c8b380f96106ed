"""Events of this process's runs reach this process's sockets straight from the sink
(issue 23: `runs.fanout.LOCAL`), not through the channel layer: every socket of the session
gets each event once and in order; the layer's copy (it still carries the events to the
other processes) is skipped here by its origin, and a message of another process is relayed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from runs.core.llm.base import Model
from runs.fanout import (
    EVENT_MESSAGE,
    LOCAL,
    PROCESS_ORIGIN,
    ChannelLayerSink,
    LocalBatch,
    merge_deltas,
    session_group,
)
from sessions_app import selectors as session_selectors
from sessions_app.core.events import Event, Message
from tests.runs.test_consumers import (  # noqa: F401  # fixtures, used by name
    TIMEOUT,
    _count_ledger_reads,
    alice_session,
    alice_token,
    caught_up,
    open_socket,
    receive,
    receive_until,
    tool_then_answer,
)
from tests.runs.test_fanout_batches import RECORD, delta

# -- the registry and the sink (no database) ----------------------------------------------------


class Taker:
    """A socket here: relays each batch it takes at once (sealing it)."""

    def __init__(self, log: list[tuple[str, str, str]], name: str, *, broken: bool = False) -> None:
        self.log, self.name, self.broken = log, name, broken
        self.batches: list[LocalBatch] = []

    def take(self, batch: LocalBatch) -> None:
        if self.broken:
            raise RuntimeError("a socket that fails")
        self.batches.append(batch)
        self.log.extend((self.name, run_id, event.text) for run_id, event in batch.seal())


class Layer(InMemoryChannelLayer):
    def __init__(self, log: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.log = log
        self.sent: list[dict[str, Any]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.log.append(("layer", group, "".join(data["message"]["content"] for _, data in message["items"])))
        self.sent.append(message)


async def test_the_sink_hands_each_event_to_the_sockets_here_in_order_before_the_layer() -> None:
    log: list[tuple[str, str, str]] = []
    layer = Layer(log)
    sink = ChannelLayerSink(layer)
    first, broken, second = Taker(log, "first"), Taker(log, "broken", broken=True), Taker(log, "second")
    for taker in (first, broken, second):
        LOCAL.add("s1", taker)
    try:
        await sink.publish(RECORD, delta("The "))
        await sink.publish(RECORD, delta("chain"))
        LOCAL.discard("s1", second)
        await sink.publish(RECORD, delta("."))
        await sink.flush()
    finally:
        for taker in (first, broken, second):
            LOCAL.discard("s1", taker)

    assert [entry for entry in log if entry[0] == "first"] == [
        ("first", "r1", "The "),
        ("first", "r1", "chain"),
        ("first", "r1", "."),
    ]  # in order, though a socket beside it fails
    assert [entry for entry in log if entry[0] == "second"] == [("second", "r1", "The "), ("second", "r1", "chain")]
    assert log.index(("first", "r1", "The ")) < log.index(next(e for e in log if e[0] == "layer"))  # here first
    assert "".join(entry[2] for entry in log if entry[0] == "layer") == "The chain."  # and still to the others
    assert {message["origin"] for message in layer.sent} == {PROCESS_ORIGIN}
    assert LOCAL.receivers("s1") == ()


def test_sockets_of_a_session_relay_the_same_batches_deltas_merged_once_sealed() -> None:
    log: list[tuple[str, str, str]] = []
    lazy: list[LocalBatch] = []

    class Lazy:
        """A socket that relays later: what joins its batch meanwhile comes with it."""

        def take(self, batch: LocalBatch) -> None:
            lazy.append(batch)

    first, later = Taker(log, "first"), Lazy()
    LOCAL.add("s1", later)
    try:
        for text in ("a", "b", "c"):
            LOCAL.deliver(RECORD, delta(text))
        assert len(lazy) == 1  # one batch so far, unsealed: the deltas joined it
        assert [event.text for _, event in lazy[0].seal()] == ["abc"]  # merged once, when relayed
        LOCAL.deliver(RECORD, delta("d"))  # the batch is sealed: a new one
        LOCAL.add("s1", first)
        LOCAL.deliver(RECORD, delta("e"))  # a socket came: a new batch, for both
        LOCAL.deliver(replace(RECORD, user_id="8"), delta("f"))  # a run of another user (the id changed hands)
    finally:
        LOCAL.discard("s1", first)
        LOCAL.discard("s1", later)

    assert [[event.text for _, event in batch.seal()] for batch in lazy] == [["abc"], ["d"], ["e"], ["f"]]
    assert first.batches == lazy[2:]  # the very same batches: the same frames on both sockets
    assert [batch.user_id for batch in lazy] == ["7", "7", "7", "8"]


def test_deltas_that_waited_together_merge_per_message_and_nothing_else_does() -> None:
    saved = Event(author="support", seq=4, message=Message(role="assistant", content="whole"))
    items = [
        ("r1", delta("a")),
        ("r1", delta("b")),
        ("r1", delta("x", "m2")),
        ("r2", delta("y", "m2")),
        ("r1", saved),
        ("r1", delta("c")),
    ]
    merged = merge_deltas(items)

    assert [(run_id, event.text) for run_id, event in merged] == [
        ("r1", "ab"),
        ("r1", "x"),
        ("r2", "y"),
        ("r1", "whole"),
        ("r1", "c"),
    ]
    assert merged[0][1].id == items[0][1].id and merged[3][1] is saved


# -- through the socket ---------------------------------------------------------------------------


def silence_the_layer_for_sessions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The channel layer carries no session event any more (as if every message were lost):
    what the sockets of this process get, they got from the sink. Returns what was sent."""
    layer = get_channel_layer()
    assert layer is not None
    send = layer.group_send
    sent: list[dict[str, Any]] = []

    async def silent(group: str, message: dict[str, Any]) -> None:
        if message.get("type") == EVENT_MESSAGE:
            sent.append(message)
            return
        await send(group, message)

    monkeypatch.setattr(layer, "group_send", silent)
    return sent


def saved_seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["metadata"]["seq"] for f in frames if "seq" in (f.get("metadata") or {})]


@pytest.mark.django_db(transaction=True)
async def test_every_socket_here_gets_each_event_once_in_order_from_the_sink_alone(
    alice_token: str,  # noqa: F811
    alice_session: str,  # noqa: F811
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = _count_ledger_reads(monkeypatch)
    sent = silence_the_layer_for_sessions(monkeypatch)
    use_model(tool_then_answer("The certificate expired on 2024-01-01, renew it."))
    path = f"/ws/sessions/{alice_session}/?token={alice_token}"
    first, second = await open_socket(path, origin=False), await open_socket(path, origin=False)
    await caught_up(reads, 2)  # else the second's catch-up may already hold the run's user message
    await first.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    assert (await receive(first))["type"] == "run.accepted"
    seen_first = await receive_until(first, "RUN_FINISHED")
    seen_second = await receive_until(second, "RUN_FINISHED")
    assert await first.receive_nothing(0.3) and await second.receive_nothing(0.1)  # nothing twice, late
    await first.disconnect()
    await second.disconnect()

    ledger = [
        e.seq
        for e in await sync_to_async(session_selectors.events_after)(session_id=alice_session, after_seq=0, limit=100)
    ]
    for frames in (seen_first, seen_second):
        seqs = saved_seqs(frames)
        assert seqs == sorted(seqs)  # in order
        # Each saved event's frames once: its seq on consecutive frames only, and all of them.
        runs_of_seqs = [s for index, s in enumerate(seqs) if index == 0 or seqs[index - 1] != s]
        assert runs_of_seqs == ledger
        text = "".join(
            f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT" and "seq" not in (f.get("metadata") or {})
        )
        assert "renew it." in text  # the answer's deltas came live, though the layer carried none
    assert seen_first == seen_second  # the same batches: the same frames, deltas merged alike
    if isinstance(get_channel_layer(), RedisChannelLayer | RedisPubSubChannelLayer):
        assert not sent  # no socket of another process watches: nothing went over Redis
    else:
        assert sent, "a layer that cannot tell who listens elsewhere is still given the events"
    # Each socket's catch-up at connect, and the second's read of the run's user message
    # (saved by the start, never published); no re-read: nothing was missing.
    assert len(reads) == 3
    assert LOCAL.receivers(alice_session) == ()  # both left


@pytest.mark.django_db(transaction=True)
async def test_a_layer_message_of_another_process_is_relayed_and_one_of_this_process_is_skipped(
    alice: Any,
    alice_token: str,  # noqa: F811
    alice_session: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = _count_ledger_reads(monkeypatch)
    socket = await open_socket(f"/ws/sessions/{alice_session}/?token={alice_token}", origin=False)
    await caught_up(reads, 1)
    layer = get_channel_layer()
    assert layer is not None
    group = session_group(alice_session)
    saved = Event(author="support", seq=1, message=Message(role="assistant", content="From elsewhere."))

    def message(origin: str, event: Event) -> dict[str, Any]:
        return {
            "type": EVENT_MESSAGE,
            "session_id": alice_session,
            "user_id": str(alice.pk),
            "origin": origin,
            "items": [["r-elsewhere", event.to_dict()]],
        }

    await layer.group_send(group, message(PROCESS_ORIGIN, delta("Had it from the sink already.")))
    assert await socket.receive_nothing(0.5)
    await layer.group_send(group, message("another-process", saved))
    frames = await receive_until(socket, "TEXT_MESSAGE_END")
    await socket.disconnect()

    assert frames[0]["type"] == "RUN_STARTED" and frames[0]["runId"] == "r-elsewhere"
    content = [f for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT"]
    assert [f["delta"] for f in content] == ["From elsewhere."]  # and not the skipped delta
    assert set(saved_seqs(frames)) == {1}
