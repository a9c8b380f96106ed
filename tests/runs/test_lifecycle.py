"""Heartbeats, the reaper, the channel-layer fan-out and cancels across processes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer

from runs.core.agents.llm import LLMAgent
from runs.core.lifecycle import HOSTNAME, Lifecycle, owner_is_dead
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import InMemoryRunStore, RunRecord
from runs.core.runner import Runner
from runs.fanout import CONTROL_GROUP, ChannelLayerSink, listen_for_cancels, request_cancel, session_group
from sessions_app.core.events import utcnow
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from tests.support.channels import group_joined
from tests.support.waiting import until

APP = "t"
DEAD_OWNER = f"{HOSTNAME}:999999:deadbeef"  # beyond pid_max: no such process


def make_runner(model: ScriptedModel | None = None, *, owner: str = "me", **kwargs: Any) -> Runner:
    agent = LLMAgent(name="support", model=model or ScriptedModel.of())
    return Runner(
        app=APP,
        agents=[agent],
        session_service=InMemorySessionService(),
        run_store=InMemoryRunStore(),
        owner=owner,
        **kwargs,
    )


async def orphan(runner: Runner, *, owner: str, silent_for_s: float) -> RunRecord:
    session = await runner.session_service.create_session(app=APP, user_id="alice")
    at = utcnow() - timedelta(seconds=silent_for_s)
    return await runner.run_store.create(
        RunRecord(
            id=f"run-{owner}-{silent_for_s}",
            app=APP,
            user_id="alice",
            session_id=session.id,
            agent="support",
            request_id=f"req-{owner}-{silent_for_s}",
            owner=owner,
            status="running",
            started_at=at,
            heartbeat_at=at,
        )
    )


def test_owner_liveness_is_decided_only_for_this_host() -> None:
    assert owner_is_dead(DEAD_OWNER) is True
    assert owner_is_dead(f"{HOSTNAME}:1:x") is False  # pid 1 exists
    assert owner_is_dead("elsewhere:999999:x") is False
    assert owner_is_dead("") is False


async def test_runs_of_a_dead_process_are_interrupted_with_a_completion_in_their_ledger() -> None:
    runner = make_runner()
    record = await orphan(runner, owner=DEAD_OWNER, silent_for_s=1)
    reaped = await Lifecycle(runner, stale_after_s=60).reap()
    assert [r.id for r in reaped] == [record.id]
    stored = await runner.run_store.get(record.id)
    assert stored is not None and stored.status == "interrupted" and stored.ended_at is not None
    events = await runner.session_service.list_events(
        SessionKey(app=APP, user_id="alice", session_id=record.session_id)
    )
    assert events[-1].is_runner_completion and events[-1].extensions == {"run_id": record.id, "status": "interrupted"}


async def test_a_silent_run_of_another_host_is_reaped_only_once_stale() -> None:
    runner = make_runner()
    fresh = await orphan(runner, owner="other-host:42:abc", silent_for_s=10)
    stale = await orphan(runner, owner="other-host:43:abc", silent_for_s=120)
    reaped = await Lifecycle(runner, stale_after_s=60).reap()
    assert [r.id for r in reaped] == [stale.id]
    assert (await runner.run_store.get(fresh.id)).status == "running"  # type: ignore[union-attr]  # created above


async def test_live_runs_of_this_process_are_never_reaped_and_get_heartbeats() -> None:
    model = ScriptedModel.of(ScriptStep.answer("slow " * 50, chunk_size=2, delay_s=0.01))
    runner = make_runner(model)
    handle = await runner.start(user_id="alice", message="go")
    lifecycle = Lifecycle(runner, stale_after_s=0)
    assert await lifecycle.reap() == []
    await lifecycle.beat()
    beat = await runner.run_store.get(handle.run_id)
    assert beat is not None and beat.heartbeat_at is not None
    await handle.wait()


async def test_a_finished_run_cannot_be_interrupted() -> None:
    runner = make_runner(ScriptedModel.of("done"))
    handle = await runner.start(user_id="alice", message="go")
    await handle.wait()
    assert await runner.run_store.interrupt(handle.run_id, at=utcnow(), reason="late") is None


@pytest.mark.django_db(transaction=True)
async def test_two_reapers_racing_on_the_database_interrupt_a_run_once(alice: Any) -> None:
    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService

    service = DjangoSessionService()
    session = await service.create_session(app=APP, user_id=str(alice.pk))
    store = DjangoRunStore()
    await store.create(
        RunRecord(
            id="r1",
            app=APP,
            user_id=str(alice.pk),
            session_id=session.id,
            agent="support",
            request_id="q1",
            owner=DEAD_OWNER,
            status="running",
            started_at=utcnow(),
        )
    )
    results = await asyncio.gather(*(store.interrupt("r1", at=utcnow(), reason="dead") for _ in range(4)))
    assert sum(r is not None for r in results) == 1
    assert (await store.get("r1")).status == "interrupted"  # type: ignore[union-attr]  # created above


async def test_every_emitted_event_reaches_the_sessions_group_in_order() -> None:
    layer = get_channel_layer()
    model = ScriptedModel.of(ScriptStep.call("nothing", {}), ScriptStep.answer("all done", chunk_size=3))
    runner = make_runner(model, sinks=[ChannelLayerSink(layer)])
    session = await runner.session_service.create_session(app=APP, user_id="alice")
    channel = await layer.new_channel()
    await layer.group_add(session_group(session.id), channel)
    emitted = [e async for e in runner.run(user_id="alice", session_id=session.id, message="go")]
    received: list[dict[str, Any]] = []
    while not received or received[-1]["items"][-1][1]["object"] != "runner.completion":
        received.append(await asyncio.wait_for(layer.receive(channel), 1))
    items = [event for message in received for _, event in message["items"]]
    assert {m["session_id"] for m in received} == {session.id}
    # Batched, with adjacent text deltas of one message merged: the same events in the same
    # order, the same text.
    assert [e["id"] for e in items if not e["partial"]] == [e.id for e in emitted if not e.partial]
    assert [e["id"] for e in items] == [e.id for e in emitted if e.id in {i["id"] for i in items}]
    assert "".join(e["message"]["content"] for e in items if e["partial"]) == "".join(
        e.text for e in emitted if e.partial
    )
    assert len(items) < len(emitted)


class DeadLayer(InMemoryChannelLayer):
    """A layer whose server is gone: every send fails, slowly, as a refused reconnect does."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.attempts += 1
        await asyncio.sleep(0.05)
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")


async def test_a_dead_layer_costs_one_attempt_per_pause_and_the_run_still_completes() -> None:
    layer = DeadLayer()
    sink = ChannelLayerSink(layer, pause_s=0.3)
    runner = make_runner(ScriptedModel.of(ScriptStep.answer("word " * 40, chunk_size=1)), sinks=[sink])
    emitted = [e async for e in runner.run(user_id="alice", message="go")]
    assert len(emitted) > 40 and emitted[-1].extensions["status"] == "completed"
    assert layer.attempts == 1  # not one slow failure per event
    await asyncio.sleep(0.35)
    await sink.publish(await runner.status(emitted[-1].extensions["run_id"]), emitted[-1])
    assert layer.attempts == 2  # after the pause it tries again


def test_odd_session_ids_still_get_a_valid_group_name() -> None:
    assert session_group("abc-123") == "session.abc-123"
    odd = session_group("a/b c:" + "x" * 200)
    assert odd.startswith("session.h") and len(odd) < 100


async def test_a_cancel_sent_from_another_process_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 300, chunk_size=3, delay_s=0.01))
    owner_runner = make_runner(model, owner="process-a")
    other_runner = make_runner(owner="process-b")
    # The owner listens on a layer of its own (as each process does); in-memory, one shared
    # instance stands in for the other process.
    shared = get_channel_layer()
    own = shared if isinstance(shared, InMemoryChannelLayer) else channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    joined = group_joined(own, CONTROL_GROUP, monkeypatch)
    listener = asyncio.create_task(listen_for_cancels(owner_runner, layer=own))
    await asyncio.wait_for(joined.wait(), 10)
    handle = await owner_runner.start(user_id="alice", message="long")
    await until(lambda: model.requests, "the run asks its model")
    assert await request_cancel(other_runner, handle.run_id) is False  # not ours: broadcast
    record = await asyncio.wait_for(handle.wait(), 2)
    assert record.status == "cancelled"
    listener.cancel()


async def test_the_in_memory_layer_needs_no_cancel_listener() -> None:
    # One process only: a cancel reaches its run directly, so the listener ends at once.
    if not isinstance(get_channel_layer(), InMemoryChannelLayer):
        pytest.skip("the channel layer is Redis here: the cross-process test covers the listener")
    await asyncio.wait_for(listen_for_cancels(make_runner()), 1)
