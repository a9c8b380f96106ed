"""Issue 18, item 6: one ledger write per model step, and the run's last step with its
completion; persist-before-emit and SPEC 1.7 still hold."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from runs.core.agents.composite import ChainAgent
from runs.core.agents.llm import STEP_GROUP_WAIT_S, LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.steps import AGENT_ENDS, STEP_CONTINUES
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session

APP = "t"


def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: what to look up
    """
    return f"found {q}"


class RecordingService(InMemorySessionService):
    """Remembers each write (the ids it held), and can be told to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[str]] = []
        self.fail = False

    async def append_events(self, session: Session, events: Sequence[Event]) -> list[Event]:
        if self.fail:
            raise RuntimeError("disk full")
        self.writes.append([e.id for e in events])
        return await super().append_events(session, events)


def runner_for(agent: LLMAgent | ChainAgent, service: RecordingService) -> Runner:
    return Runner(app=APP, agents=[agent], session_service=service)


async def test_a_step_with_fast_tools_is_one_write_and_the_answer_goes_with_the_completion() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup", {"q": "a"}), ScriptStep.call("lookup", {"q": "b"}), "done")
    service = RecordingService()
    runner = runner_for(LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)]), service)
    written: set[str] = set()
    early: list[str] = []

    def listener(event: Event | None) -> None:
        if event is not None and not event.partial:
            written.update(i for write in service.writes for i in write)
            if event.id not in written:
                early.append(event.id)

    handle = await runner.start(user_id="alice", message="go", listeners=[listener])
    await handle.wait()
    model.assert_consumed()
    # user message; (call a, result a); (call b, result b); (answer, completion)
    assert [len(w) for w in service.writes] == [1, 2, 2, 2]
    assert early == []  # nothing went out before the write that holds it
    stored = handle.invocation.session.events
    assert [e.role for e in stored] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "system"]
    # The marks steer the runner; they are never stored.
    assert not any(STEP_CONTINUES in e.extensions or AGENT_ENDS in e.extensions for e in stored)


async def test_a_slow_tools_call_goes_out_before_the_tool_finishes() -> None:
    release = asyncio.Event()

    async def slow(q: str) -> str:
        """Take a while.

        Args:
            q: what to look up
        """
        await release.wait()
        return "late"

    model = ScriptedModel.of(ScriptStep.call("slow", {"q": "a"}), "done")
    service = RecordingService()
    runner = runner_for(LLMAgent(name="support", model=model, tools=[FunctionTool(slow)]), service)
    handle = await runner.start(user_id="alice", message="go", stream=True)
    events = handle.events()
    first = await asyncio.wait_for(anext(events), 5 * STEP_GROUP_WAIT_S + 1)
    assert first.is_tool_call and first.seq is not None
    release.set()
    rest = [e async for e in events]
    assert [e.role for e in rest if not e.partial] == ["tool", "assistant", "system"]


async def test_an_append_failure_is_logged_and_the_step_still_goes_out() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup", {"q": "a"}), "done")
    service = RecordingService()
    runner = runner_for(LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)]), service)
    handle = await runner.start(user_id="alice", message="go", stream=True)
    service.fail = True
    events = [e async for e in handle.events() if not e.partial]
    assert [e.role for e in events] == ["assistant", "tool", "assistant", "system"]
    assert all(e.seq is None for e in events)


async def test_a_sub_agents_answer_goes_out_before_the_next_agent_starts() -> None:
    second_started = asyncio.Event()
    seen_before_second: list[str] = []

    first = LLMAgent(name="first", model=ScriptedModel.of("one"))
    second_model = ScriptedModel.of("two")
    second = LLMAgent(name="second", model=second_model)
    generate = second_model.generate

    def watched(request):  # type: ignore[no-untyped-def]  # a ScriptedModel.generate stand-in
        second_started.set()
        return generate(request)

    second_model.generate = watched  # type: ignore[method-assign]  # only to see when it starts
    service = RecordingService()
    runner = runner_for(ChainAgent(name="chain", agents=[first, second]), service)

    def listener(event: Event | None) -> None:
        if event is not None and not event.partial and not second_started.is_set():
            seen_before_second.append(event.text)

    handle = await runner.start(user_id="alice", message="go", listeners=[listener])
    await handle.wait()
    # The chain goes on after "one": it is not held for the completion.
    assert "one" in seen_before_second
