"""The channel-layer sink's batches (runs/fanout.py): a burst goes out as few messages, in
order, text deltas merged; a drop is announced to the sockets by the next message."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.layers import InMemoryChannelLayer

from runs.core.records import RunRecord
from runs.fanout import ChannelLayerSink
from sessions_app.core.events import Event, Message, ToolCall

RECORD = RunRecord(id="r1", app="agentsite", user_id="7", session_id="s1", agent="support", request_id="q1")


def delta(text: str, message_id: str = "m1") -> Event:
    return Event(
        author="support",
        partial=True,
        message=Message(role="assistant", content=text),
        extensions={"message_id": message_id},
    )


def complete(text: str, message_id: str = "m1") -> Event:
    call = ToolCall(id="c1", name="search_logs", arguments="{}")
    return Event(
        author="support",
        seq=3,
        message=Message(role="assistant", content=text, tool_calls=(call,)),
        extensions={"message_id": message_id},
    )


class Recording(InMemoryChannelLayer):
    """Records each group message after a short round trip; `slow_s` makes the first take that long."""

    def __init__(self, slow_s: float = 0.0) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []
        self.slow_s = slow_s

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        slow, self.slow_s = self.slow_s, 0.0
        await asyncio.sleep(slow or 0.001)  # a round trip to the server
        self.sent.append(message)


async def test_a_burst_goes_out_in_order_with_its_deltas_merged() -> None:
    layer = Recording()
    sink = ChannelLayerSink(layer)
    burst = [delta("The "), delta("chain "), delta("is "), delta("other", "m2"), complete("The chain is")]
    for event in burst:
        await sink.publish(RECORD, event)
    await sink.flush()
    items = [item for message in layer.sent for item in message["items"]]
    assert len(layer.sent) <= 2  # the first event leaves at once, the rest together
    assert [run_id for run_id, _ in items] == ["r1"] * len(items)
    texts = [(data["extensions"].get("message_id"), data["partial"], data["message"]["content"]) for _, data in items]
    assert "".join(text for mid, partial, text in texts if partial and mid == "m1") == "The chain is "
    assert [t for t in texts if not t[1]] == [("m1", False, "The chain is")]  # the complete event, after the deltas
    assert texts.index(("m2", True, "other")) < len(texts) - 1  # another message's delta is not merged into m1's
    assert {message["session_id"] for message in layer.sent} == {"s1"}
    assert not any(message.get("gap") for message in layer.sent)


async def test_events_dropped_during_a_pause_are_announced_by_the_next_message() -> None:
    class Failing(Recording):
        fail = True

        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            if self.fail:
                self.fail = False
                raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")
            await super().group_send(group, message)

    layer = Failing()
    sink = ChannelLayerSink(layer, pause_s=0.05)
    await sink.publish(RECORD, delta("lost "))
    await sink.flush()
    await sink.publish(RECORD, delta("dropped too "))  # paused: dropped
    await asyncio.sleep(0.06)
    await sink.publish(RECORD, delta("after"))
    await sink.flush()
    assert [m["items"][0][1]["message"]["content"] for m in layer.sent] == ["after"]
    assert layer.sent[0]["gap"] == ["r1"]  # the runs whose events were dropped
    await sink.publish(RECORD, delta(" and on"))
    await sink.flush()
    assert "gap" not in layer.sent[1]  # said once


async def test_a_slow_send_is_given_up_without_pausing_the_sink() -> None:
    layer = Recording(slow_s=0.2)
    sink = ChannelLayerSink(layer, timeout_s=0.05)
    await sink.publish(RECORD, delta("slow "))
    await sink.flush()
    await sink.publish(RECORD, delta("next"))
    await sink.flush()
    assert [m["items"][0][1]["message"]["content"] for m in layer.sent] == ["next"]
    assert layer.sent[0]["gap"] == ["r1"]  # the slow one may not have arrived
