"""The sink sends a session's events over Redis only while something other than this
process's sockets listens on the session's group (issue 23, `runs.fanout.layer_needed`):
those sockets take the events from the sink (LOCAL), and the layer's copies came back here
only to be skipped.
Both Redis layers (`AGENTSITE_CHANNEL_LAYER` pubsub and lists), each process a layer of its own."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from runs.fanout import LOCAL, PROCESS_ORIGIN, ChannelLayerSink, layer_needed, session_group
from tests.runs.test_fanout_batches import RECORD, delta

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")
SESSION = "s-elsewhere"
PREFIX = "asgi-elsewhere-test"  # keys of their own: a flush at the end touches nothing else


class Socket:
    """A socket of this process: what it takes from the sink."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def take(self, batch: Any) -> None:
        self.texts.extend(event.text for _, event in batch.seal())


def _layer(kind: str) -> Any:
    hosts = [os.environ["REDIS_URL"]]
    if kind == "pubsub":
        return RedisPubSubChannelLayer(hosts=hosts, prefix=PREFIX)
    return RedisChannelLayer(hosts=hosts, prefix=PREFIX)


@pytest.fixture(params=["pubsub", "lists"])
async def layers(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any, list[dict[str, Any]]]]:
    """This process's layer (its group sends recorded) and another process's."""
    here, there = _layer(request.param), _layer(request.param)
    sent: list[dict[str, Any]] = []
    send = here.group_send

    async def recorded(group: str, message: dict[str, Any]) -> None:
        sent.append(message)
        await send(group, message)

    here.group_send = recorded
    yield here, there, sent
    for layer in (here, there):
        await layer.flush()
        if isinstance(layer, RedisChannelLayer):
            await layer.close_pools()


async def test_a_session_watched_only_here_costs_no_send_and_one_watched_elsewhere_is_sent(
    layers: tuple[Any, Any, list[dict[str, Any]]],
) -> None:
    here, there, sent = layers
    group = session_group(SESSION)
    record = replace(RECORD, session_id=SESSION)
    sink = ChannelLayerSink(here)
    socket = Socket()
    own = await here.new_channel()
    await here.group_add(group, own)
    LOCAL.add(SESSION, socket)
    try:
        assert await layer_needed(here, group, 0)  # a listener here that takes nothing from the sink
        assert not await layer_needed(here, group, 1)  # the one listener here is a socket of LOCAL
        await sink.publish(record, delta("only "))
        await sink.flush()
        assert sent == []  # nobody elsewhere: nothing went over Redis

        elsewhere = await there.new_channel()
        await there.group_add(group, elsewhere)
        assert await layer_needed(here, group, 1)
        await sink.publish(record, delta("both "))
        await sink.flush()
        message = await asyncio.wait_for(there.receive(elsewhere), 5)
        assert [item[1]["message"]["content"] for item in message["items"]] == ["both "]
        assert message["origin"] == PROCESS_ORIGIN and len(sent) == 1

        await there.group_discard(group, elsewhere)
        assert not await layer_needed(here, group, 1)
        await sink.publish(record, delta("again"))
        await sink.flush()
        assert len(sent) == 1  # the other process left: no send again
    finally:
        LOCAL.discard(SESSION, socket)
        await here.group_discard(group, own)

    assert socket.texts == ["only ", "both ", "again"]  # this process's socket had every event


async def test_a_session_watched_nowhere_but_elsewhere_is_sent(layers: tuple[Any, Any, list[dict[str, Any]]]) -> None:
    """No socket here (the run's process serves none of the session's sockets): sent."""
    here, there, sent = layers
    group = session_group(SESSION)
    elsewhere = await there.new_channel()
    await there.group_add(group, elsewhere)
    await ChannelLayerSink(here).publish(replace(RECORD, session_id=SESSION), delta("over there"))
    message = await asyncio.wait_for(there.receive(elsewhere), 5)
    await there.group_discard(group, elsewhere)
    assert [item[1]["message"]["content"] for item in message["items"]] == ["over there"] and len(sent) == 1


async def test_an_expired_member_of_another_process_is_not_listening() -> None:
    """The queue layer: a member past the group expiry (a process that died without leaving)
    is not a listener, as Channels' own group send drops it."""
    here = _layer("lists")
    group = session_group(SESSION)
    connection = here.connection(here.consistent_hash(group))
    key = here._group_key(group)
    try:
        await connection.zadd(key, {"specific.gone!abc": 0})  # joined at the epoch
        assert not await layer_needed(here, group, 0)
        await connection.zadd(key, {"specific.gone!abc": int(time.time())})
        assert await layer_needed(here, group, 0)  # the same member, fresh
    finally:
        await connection.delete(key)
        await here.close_pools()
