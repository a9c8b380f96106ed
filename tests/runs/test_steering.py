"""The steering queue (SPEC 1.5): messages sent into a running run, through the Runner API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer

from runs.core.agents.llm import LLMAgent
from runs.core.errors import UsageError
from runs.core.llm.base import ModelRequest
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import InMemoryRunStore
from runs.core.runner import Runner
from runs.core.steering import (
    CARRIED,
    CARRIED_IDS,
    CONSUMED,
    DROPPED,
    QUEUED,
    QUEUED_ID,
    QueueFullError,
    RunNotActiveError,
)
from runs.core.tools.function import FunctionTool
from runs.fanout import (
    CONTROL_GROUP,
    RunUnreachableError,
    listen_for_cancels,
    request_enqueue,
    request_queued,
    request_withdraw,
)
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from tests.support.channels import group_joined
from tests.support.waiting import until

APP = "t"


def make_runner(model: ScriptedModel, *, tools: list[Any] | None = None, **kwargs: Any) -> Runner:
    agent = LLMAgent(name="support", model=model, tools=tools or [])
    return Runner(
        app=APP, agents=[agent], session_service=InMemorySessionService(), run_store=InMemoryRunStore(), **kwargs
    )


async def ledger(runner: Runner, session_id: str) -> list[Event]:
    return await runner.session_service.list_events(
        SessionKey(app=APP, user_id="alice", session_id=session_id), limit=1000
    )


def said(events: list[Event]) -> list[tuple[str, str]]:
    """(role, text) of the ledger's messages, tool calls named by their tool."""
    out = []
    for event in events:
        message = event.message
        if message is None:
            continue
        text = message.content or ",".join(call.name for call in message.tool_calls)
        out.append((message.role, text))
    return out


def sent(request: ModelRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages if m.role != "system"]


class RunHolder:
    """The run a scripted step acts on (its id is known only once `start` returned)."""

    run_id = ""


def enqueue_then(
    runner: Runner, holder: RunHolder, texts: list[str], step: ScriptStep
) -> Callable[[ModelRequest], ScriptStep]:
    """A scripted model step that queues `texts` on the run while the model is called."""

    def act(request: ModelRequest) -> ScriptStep:
        for text in texts:
            runner.enqueue_message(holder.run_id, text)
        return step

    return act


def lookup(ticket_id: str) -> dict[str, str]:
    """Look up a ticket.

    Args:
        ticket_id: the ticket's id
    """
    return {"id": ticket_id, "status": "open"}


async def test_a_message_queued_during_a_model_step_is_the_next_steps_user_message() -> None:
    holder = RunHolder()
    model = ScriptedModel.of()
    runner = make_runner(model, tools=[FunctionTool(lookup)])
    model.extend(
        [
            enqueue_then(runner, holder, ["it is ticket 8, not 7"], ScriptStep.call("lookup", {"ticket_id": "7"})),
            ScriptStep.answer("Ticket 8 is open."),
        ]
    )
    handle = await runner.start(user_id="alice", message="status of ticket 7?")
    holder.run_id = handle.run_id
    record = await handle.wait()
    assert record.status == "completed"
    model.assert_consumed()
    # The second request ends with the queued message, after the whole tool round.
    assert sent(model.requests[1])[-3:] == [
        ("assistant", ""),
        ("tool", '{"id": "7", "status": "open"}'),
        ("user", "it is ticket 8, not 7"),
    ]
    events = await ledger(runner, handle.session_id)
    assert said(events) == [
        ("user", "status of ticket 7?"),
        ("assistant", "lookup"),
        ("tool", '{"id": "7", "status": "open"}'),
        ("user", "it is ticket 8, not 7"),
        ("assistant", "Ticket 8 is open."),
    ]
    consumed = [e for e in events if e.extensions.get(QUEUED)]
    assert [e.extensions[QUEUED] for e in consumed] == [CONSUMED]
    assert consumed[0].invocation_id == events[0].invocation_id  # part of the same run
    assert handle.invocation.message.content == "it is ticket 8, not 7"  # the current message now


async def test_a_message_queued_inside_a_tool_round_waits_for_the_round_to_end() -> None:
    holder = RunHolder()
    model = ScriptedModel.of()
    runner = make_runner(model)

    def first(ticket_id: str) -> str:
        """First tool.

        Args:
            ticket_id: id
        """
        runner.enqueue_message(holder.run_id, "one more thing")
        return "first done"

    def second(ticket_id: str) -> str:
        """Second tool.

        Args:
            ticket_id: id
        """
        return "second done"

    runner.agents["support"] = LLMAgent(
        name="support", model=model, tools=[FunctionTool(first), FunctionTool(second)], parallel_tools=False
    )
    model.extend(
        [ScriptStep.calls(("first", {"ticket_id": "1"}), ("second", {"ticket_id": "2"})), ScriptStep.answer("ok")]
    )
    handle = await runner.start(user_id="alice", message="go")
    holder.run_id = handle.run_id
    await handle.wait()
    roles = [role for role, _ in said(await ledger(runner, handle.session_id))]
    assert roles == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert sent(model.requests[1])[-1] == ("user", "one more thing")


async def test_messages_queued_during_the_last_step_open_the_next_run_in_order() -> None:
    holder = RunHolder()
    model = ScriptedModel.of()
    runner = make_runner(model)
    model.extend(
        [
            enqueue_then(runner, holder, ["second", "third"], ScriptStep.answer("first answer")),
            ScriptStep.answer("answer to second and third"),
        ]
    )
    handle = await runner.start(user_id="alice", message="first")
    holder.run_id = handle.run_id
    record = await handle.wait()
    assert record.status == "completed"
    for _ in range(100):  # the next run was started by the first one's completion
        if not model.remaining and not runner.active_run_ids():
            break
        await asyncio.sleep(0.02)
    model.assert_consumed()
    events = await ledger(runner, handle.session_id)
    completions = [e for e in events if e.is_runner_completion]
    assert len(completions) == 2
    assert len(completions[0].extensions[CARRIED_IDS]) == 2
    assert said(events) == [
        ("user", "first"),
        ("assistant", "first answer"),
        ("user", "second"),
        ("user", "third"),
        ("assistant", "answer to second and third"),
    ]
    queued = [e for e in events if e.extensions.get(QUEUED)]
    assert [e.extensions[QUEUED] for e in queued] == [CARRIED, CONSUMED]
    assert [e.extensions[QUEUED_ID] for e in queued] == completions[0].extensions[CARRIED_IDS]
    assert queued[0].extensions["follows_run"] == handle.run_id
    # The next run's first request holds both, in the order they were typed.
    assert sent(model.requests[1])[-2:] == [("user", "second"), ("user", "third")]


async def test_a_cancel_drops_the_queued_messages_and_reports_them() -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 400, chunk_size=2, delay_s=0.01))
    runner = make_runner(model)
    handle = await runner.start(user_id="alice", message="long")
    await until(lambda: model.requests, "the run asks its model")
    first = runner.enqueue_message(handle.run_id, "never mind")
    second = runner.enqueue_message(handle.run_id, "really")
    assert runner.cancel(handle.run_id)
    with pytest.raises(RunNotActiveError):
        runner.enqueue_message(handle.run_id, "too late")
    record = await asyncio.wait_for(handle.wait(), 2)
    assert record.status == "cancelled"
    events = await ledger(runner, handle.session_id)
    assert not [e for e in events if e.extensions.get(QUEUED)]  # never consumed
    completion = events[-1]
    assert completion.is_runner_completion
    assert [d["id"] for d in completion.extensions[DROPPED]] == [first.id, second.id]
    assert [d["message"] for d in completion.extensions[DROPPED]] == ["never mind", "really"]
    # A carried run would be registered before the cancelled one leaves the registry (its
    # completion opens the follow-up first), so once it has left, nothing else may be there.
    await until(lambda: handle.run_id not in runner.active_run_ids(), "the cancelled run leaves the registry")
    assert runner.active_run_ids() == []  # nothing carried into a new run
    assert (await ledger(runner, handle.session_id))[-1].id == completion.id  # nor written by one


async def test_withdrawn_messages_are_never_consumed() -> None:
    holder = RunHolder()
    model = ScriptedModel.of()
    runner = make_runner(model, tools=[FunctionTool(lookup)])

    def queue_and_withdraw(request: ModelRequest) -> ScriptStep:
        runner.enqueue_message(holder.run_id, "oops")
        withdrawn = runner.cancel_queued(holder.run_id)
        assert [w.message.content for w in withdrawn] == ["oops"]
        return ScriptStep.call("lookup", {"ticket_id": "1"})

    model.extend([queue_and_withdraw, ScriptStep.answer("done")])
    handle = await runner.start(user_id="alice", message="go")
    holder.run_id = handle.run_id
    await handle.wait()
    assert ("user", "oops") not in said(await ledger(runner, handle.session_id))
    assert ("user", "oops") not in sent(model.requests[1])


async def test_the_queue_is_bounded_and_refuses_bad_or_late_messages() -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 200, chunk_size=2, delay_s=0.01))
    runner = make_runner(model, max_queued_messages=2)
    handle = await runner.start(user_id="alice", message="go")
    runner.enqueue_message(handle.run_id, "a")
    runner.enqueue_message(handle.run_id, "b")
    with pytest.raises(QueueFullError, match="limit is 2"):
        runner.enqueue_message(handle.run_id, "c")
    with pytest.raises(UsageError, match="empty"):
        runner.enqueue_message(handle.run_id, "   ")
    with pytest.raises(RunNotActiveError):
        runner.enqueue_message("no-such-run", "hello")
    assert [q.message.content for q in runner.queued_messages(handle.run_id)] == ["a", "b"]
    runner.cancel(handle.run_id)
    await handle.wait()
    with pytest.raises(RunNotActiveError):
        runner.enqueue_message(handle.run_id, "after the end")
    with pytest.raises(RunNotActiveError):
        runner.cancel_queued(handle.run_id)


async def test_the_same_message_id_is_queued_once() -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 200, chunk_size=2, delay_s=0.01))
    runner = make_runner(model)
    handle = await runner.start(user_id="alice", message="go")
    one = runner.enqueue_message(handle.run_id, "hello", message_id="m1")
    two = runner.enqueue_message(handle.run_id, "hello", message_id="m1")
    assert one == two and len(runner.queued_messages(handle.run_id)) == 1
    runner.cancel(handle.run_id)
    await handle.wait()


async def test_a_message_queued_from_another_process_arrives_once(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel.of()
    owner = make_runner(model, tools=[FunctionTool(lookup)], owner="process-a")
    other = make_runner(ScriptedModel.of(), owner="process-b")
    model.extend([ScriptStep.call("lookup", {"ticket_id": "1"}), ScriptStep.answer("thanks")])
    # Each process listens on a layer instance of its own; in memory, one shared instance
    # stands in for the other process (as the cross-process cancel test does).
    shared = get_channel_layer()
    own = shared if isinstance(shared, InMemoryChannelLayer) else channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    joined = [group_joined(own, CONTROL_GROUP, monkeypatch)]
    listeners = [asyncio.create_task(listen_for_cancels(owner, layer=own))]
    if not isinstance(shared, InMemoryChannelLayer):
        # A second listener that owns nothing: it must stay silent.
        silent = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        joined.append(group_joined(silent, CONTROL_GROUP, monkeypatch))
        listeners.append(asyncio.create_task(listen_for_cancels(other, layer=silent)))
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in joined)), 10)
    gate = asyncio.Event()
    original = owner.agents["support"].model.generate

    async def gated(request: ModelRequest) -> Any:
        if not model.requests:
            await gate.wait()
        async for item in original(request):
            yield item

    owner.agents["support"].model.generate = gated  # type: ignore[method-assign]  # hold the first step
    handle = await owner.start(user_id="alice", message="go")
    try:
        queued = await request_enqueue(other, handle.run_id, "from node B", message_id="b-1")
        again = await request_enqueue(other, handle.run_id, "from node B", message_id="b-1")  # a retry
        assert queued.id == again.id == "b-1"
        assert [q.message.content for q in owner.queued_messages(handle.run_id)] == ["from node B"]
        assert [q.id for q in await request_queued(other, handle.run_id)] == ["b-1"]
        assert [q.id for q in await request_withdraw(other, handle.run_id)] == ["b-1"]
        await request_enqueue(other, handle.run_id, "from node B, again", message_id="b-2")
        gate.set()
        record = await asyncio.wait_for(handle.wait(), 5)
        assert record.status == "completed"
        events = await ledger(owner, handle.session_id)
        assert [text for role, text in said(events) if role == "user"] == ["go", "from node B, again"]
        with pytest.raises(RunUnreachableError):  # nobody runs it any more; the API reads its status
            await request_enqueue(other, handle.run_id, "after the end", timeout_s=0.5)
    finally:
        for listener in listeners:
            listener.cancel()
        await asyncio.gather(*listeners, return_exceptions=True)
