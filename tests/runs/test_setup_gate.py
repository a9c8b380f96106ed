"""Pacing the setup of new runs (issue 23, runs.core.pacing): at most `max_setting_up` runs
prepare at once; a run leaves the gate before its first model call, so a model's I/O never
holds a place; a refused start gives its place back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.errors import AgentNotFoundError
from runs.core.invocation import Invocation
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse
from runs.core.llm.scripted import ScriptedModel
from runs.core.pacing import STREAMING, SetupGate
from runs.core.runner import Runner
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session

APP = "t"
GUARD_S = 10.0  # only against a hang: nothing here waits on time


class WaitingModel:
    """A model that answers once `answer` is set, like a real model's seconds of I/O."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.calls = 0
        self.called = asyncio.Event()

    def info(self) -> ModelInfo:
        return ModelInfo(name="waiting", context_window=8192, provider="scripted")

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        self.calls += 1
        self.called.set()
        await self.answer.wait()
        yield ModelResponse(id=f"r{self.calls}", partial=False, message=Message(role="assistant", content="done"))


class SlowSessions(InMemorySessionService):
    """Creating a session waits until `go` is set (a setup step that takes long)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.creating = 0

    async def create_session(self, **kwargs: Any) -> Session:
        self.creating += 1
        await self.go.wait()
        return await super().create_session(**kwargs)


class MarkedAppends(InMemorySessionService):
    """Records, per append, whether the task that asked was a streaming run's."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, bool]] = []

    async def append_events(self, session: Session, events: Any) -> list[Event]:
        self.marks.extend((e.role or e.object, STREAMING.get()) for e in events)
        return await super().append_events(session, events)


async def _until(check: Any) -> None:
    async with asyncio.timeout(GUARD_S):
        while not check():  # noqa: ASYNC110  (a state several tasks reach, no one event)
            await asyncio.sleep(0)


async def test_a_run_waiting_on_its_model_holds_no_setup_place() -> None:
    model = WaitingModel()
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=model)],
        session_service=InMemorySessionService(),
        max_setting_up=1,
    )
    first = await runner.start(user_id="alice", message="one")
    await _until(lambda: model.calls == 1)
    # The one place is free again: the second run sets up and reaches its model while the
    # first still waits on its answer.
    second = await asyncio.wait_for(runner.start(user_id="alice", message="two"), GUARD_S)
    await _until(lambda: model.calls == 2)
    assert runner.setup_gate.inside == 0
    model.answer.set()
    assert (await asyncio.wait_for(first.wait(), GUARD_S)).status == "completed"
    assert (await asyncio.wait_for(second.wait(), GUARD_S)).status == "completed"


class RemoteLike:
    """An agent that is not an LLMAgent and waits on I/O before its first event (a remote
    agent's exchange)."""

    name = "remote"
    description = ""
    kind = "remote"
    model_name = None

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.asked = 0

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        self.asked += 1
        await self.answer.wait()
        yield invocation.stamp(Event(author=self.name, message=Message(role="assistant", content="done")))


async def test_a_run_of_another_agent_waiting_on_io_holds_no_setup_place() -> None:
    agent = RemoteLike()
    runner = Runner(app=APP, agents=[agent], session_service=InMemorySessionService(), max_setting_up=1)
    first = await runner.start(user_id="alice", message="one")
    await _until(lambda: agent.asked == 1)
    second = await asyncio.wait_for(runner.start(user_id="alice", message="two"), GUARD_S)
    await _until(lambda: agent.asked == 2)
    agent.answer.set()
    assert (await asyncio.wait_for(first.wait(), GUARD_S)).status == "completed"
    assert (await asyncio.wait_for(second.wait(), GUARD_S)).status == "completed"


async def test_a_rewriter_waiting_on_io_holds_no_setup_place() -> None:
    release = asyncio.Event()
    rewriting = 0

    async def rewriter(context: Any, message: Message) -> list[Message]:
        nonlocal rewriting
        rewriting += 1
        await release.wait()  # a rewriter that calls a model: seconds of I/O
        return [message]

    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("done", "done"))],
        session_service=InMemorySessionService(),
        user_message_rewriter=rewriter,
        max_setting_up=1,
    )
    starts = [asyncio.ensure_future(runner.start(user_id="alice", message=m)) for m in ("one", "two")]
    # Both rewrites wait at once: the first holds no place while its rewriter waits.
    await _until(lambda: rewriting == 2)
    release.set()
    handles = await asyncio.wait_for(asyncio.gather(*starts), GUARD_S)
    for handle in handles:
        assert (await asyncio.wait_for(handle.wait(), GUARD_S)).status == "completed"
    assert runner.setup_gate.inside == 0


async def test_runs_beyond_the_limit_wait_before_any_setup_work() -> None:
    service = SlowSessions()
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("a", "b", "c"))],
        session_service=service,
        max_setting_up=2,
    )
    starts = [asyncio.create_task(runner.start(user_id="alice", message=f"m{i}")) for i in range(3)]
    await _until(lambda: service.creating == 2 and runner.setup_gate.waiting == 1)
    for _ in range(20):  # the third stays out while both places are held
        await asyncio.sleep(0)
    assert service.creating == 2 and runner.setup_gate.waiting == 1
    service.go.set()
    handles = await asyncio.wait_for(asyncio.gather(*starts), GUARD_S)
    assert service.creating == 3
    for handle in handles:
        assert (await asyncio.wait_for(handle.wait(), GUARD_S)).status == "completed"
    assert runner.setup_gate.inside == 0 and runner.setup_gate.waiting == 0


async def test_a_refused_start_gives_its_place_back() -> None:
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("fine"))],
        session_service=InMemorySessionService(),
        max_setting_up=1,
    )
    with pytest.raises(AgentNotFoundError):
        await runner.start(user_id="alice", message="hi", agent="nobody")
    assert runner.setup_gate.inside == 0
    handle = await asyncio.wait_for(runner.start(user_id="alice", message="hi"), GUARD_S)
    assert (await asyncio.wait_for(handle.wait(), GUARD_S)).status == "completed"


async def test_a_run_its_admission_refuses_gives_its_place_back() -> None:
    refused: list[str] = []

    async def admission(user_id: str) -> None:
        if not refused:
            refused.append(user_id)
            raise RuntimeError("too many runs")

    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("fine"))],
        session_service=InMemorySessionService(),
        admission=admission,
        max_setting_up=1,
    )
    with pytest.raises(RuntimeError):
        await runner.start(user_id="alice", message="hi")
    assert refused == ["alice"] and runner.setup_gate.inside == 0
    handle = await asyncio.wait_for(runner.start(user_id="alice", message="hi"), GUARD_S)
    assert (await asyncio.wait_for(handle.wait(), GUARD_S)).status == "completed"


async def test_a_runs_writes_after_its_setup_are_marked_streaming_and_its_setups_are_not() -> None:
    service = MarkedAppends()
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("fine"))],
        session_service=service,
    )
    handle = await runner.start(user_id="alice", message="hi")
    await asyncio.wait_for(handle.wait(), GUARD_S)
    # The user message is written by the start (setup); the answer and the completion by
    # the run once it streams (agentsite.threads serves those first).
    assert service.marks == [("user", False), ("assistant", True), ("system", True)]
    assert not STREAMING.get()  # the caller's context is not the run's


async def test_the_gate_hands_places_out_in_arrival_order() -> None:
    gate = SetupGate(1)
    held = await gate.enter()
    order: list[int] = []

    async def wait_turn(n: int) -> None:
        slot = await gate.enter()
        order.append(n)
        slot.release()

    waiters = [asyncio.create_task(wait_turn(n)) for n in range(3)]
    await _until(lambda: gate.waiting == 3)
    held.release()
    held.release()  # a second release of one place changes nothing
    await asyncio.wait_for(asyncio.gather(*waiters), GUARD_S)
    assert order == [0, 1, 2]
    assert gate.inside == 0


async def test_a_waiter_cancelled_as_it_is_handed_a_place_passes_it_on() -> None:
    gate = SetupGate(1)
    held = await gate.enter()
    first = asyncio.create_task(gate.enter())
    second = asyncio.create_task(gate.enter())
    await _until(lambda: gate.waiting == 2)
    held.release()  # hands the place to `first`, which is cancelled before it runs
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    slot = await asyncio.wait_for(second, GUARD_S)
    assert gate.inside == 1
    slot.release()
    assert gate.inside == 0


async def test_no_limit_never_waits() -> None:
    gate = SetupGate(0)
    slots = [await gate.enter() for _ in range(100)]
    assert gate.inside == 0 and not any(slot.held for slot in slots)
