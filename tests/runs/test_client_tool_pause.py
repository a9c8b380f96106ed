"""Issue 20, item 2: a run that calls a client tool pauses durably (`requires_action`) and the
client's results continue the same run, through the Runner API with the scripted model.

The pause is in the run record (status, no end time) and in the ledger (a completion event
with status `requires_action` naming the calls); the record is not live, so no reaper takes
it and no admission limit counts it; of two requests bringing the results at once, one
continues the run; a new user message instead of the results ends it (`cancelled`, error
`abandoned`) and starts another run."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.errors import DuplicateRequestError, UsageError
from runs.core.invocation import RunOptions
from runs.core.llm.base import ToolSpec
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import InMemoryRunStore, RunRecord
from runs.core.runner import Runner
from sessions_app.core.events import Event, Message, utcnow
from sessions_app.core.inmemory import InMemorySessionService

ASK = ToolSpec(
    name="ask_user",
    description="Ask the user in the browser.",
    parameters={"type": "object", "properties": {"question": {"type": "string"}}},
)
OPTIONS = RunOptions(client_tools=(ASK,))


def make(*steps: Any) -> tuple[Runner, ScriptedModel]:
    model = ScriptedModel.of(*steps)
    agent = LLMAgent(name="a", model=model)
    return Runner(
        app="t", agents=[agent], session_service=InMemorySessionService(), run_store=InMemoryRunStore()
    ), model


async def run(runner: Runner, **kwargs: Any) -> list[Event]:
    handle = await runner.start(user_id="u", stream=True, options=OPTIONS, **kwargs)
    return [e async for e in handle.events() if not e.partial]


def answer(call_id: str, text: str) -> list[Message]:
    return [Message(role="tool", content=text, tool_call_id=call_id)]


async def start_paused(runner: Runner) -> tuple[str, str]:
    handle = await runner.start(user_id="u", message="ask me which host", options=OPTIONS)
    record = await handle.wait()
    assert record.status == "requires_action"
    return handle.session_id, record.id


async def test_a_paused_run_is_not_live_so_no_reaper_takes_it_and_a_resume_claims_it_once() -> None:
    runner, model = make(ScriptStep.call("ask_user", {"question": "which host?"}, id="c1"), "Restarting web-2.")
    session_id, run_id = await start_paused(runner)
    store = runner.run_store
    assert await store.running() == []
    assert await store.interrupt(run_id, at=utcnow(), reason="owner gone") is None
    record = await store.get(run_id)
    assert record is not None and record.finished and record.ended_at is None

    events = await run(runner, session_id=session_id, tool_results=answer("c1", "web-2"))
    assert [e.text for e in events if e.is_final_response] == ["Restarting web-2."]
    done = await store.get(run_id)
    assert done is not None and done.status == "completed" and done.ended_at is not None
    # Ended: a second claim finds nothing to resume.
    assert await store.resume(run_id, user_id="u", request_id="again", owner="", at=utcnow()) is None
    model.assert_consumed()


async def test_two_requests_with_the_results_at_once_continue_the_run_once() -> None:
    runner, model = make(ScriptStep.call("ask_user", {"question": "which host?"}, id="c1"), "Restarting web-2.")
    session_id, run_id = await start_paused(runner)

    outcomes = await asyncio.gather(
        *(
            runner.start(user_id="u", session_id=session_id, options=OPTIONS, tool_results=answer("c1", "web-2"))
            for _ in range(2)
        ),
        return_exceptions=True,
    )
    handles = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(handles) == 1 and handles[0].run_id == run_id
    assert len(refused) == 1 and isinstance(refused[0], UsageError)
    record = await handles[0].wait()
    assert record.status == "completed"
    session = await runner.session_service.get_session(handles[0].invocation.session.key)
    assert session is not None
    assert [e.text for e in session.events if e.is_tool_result] == ["web-2"]
    model.assert_consumed()


async def test_a_new_message_instead_of_the_results_ends_the_paused_run_and_starts_another() -> None:
    runner, model = make(
        ScriptStep.call("ask_user", {"question": "which host?"}, id="c1"), "Never mind, then.", "Noted: web-2."
    )
    session_id, run_id = await start_paused(runner)
    handle = await runner.start(user_id="u", session_id=session_id, options=OPTIONS, message="forget it")
    other = await handle.wait()
    assert other.id != run_id and other.status == "completed"
    # The paused run ended: cancelled, saying why, and its ledger says so with its own ids.
    ended = await runner.run_store.get(run_id)
    assert ended is not None and ended.status == "cancelled" and ended.ended_at is not None
    assert ended.error is not None and ended.error["type"] == "abandoned" and "'c1'" in ended.error["message"]
    session = await runner.session_service.get_session(handle.invocation.session.key)
    assert session is not None
    completions = [
        (e.extensions["run_id"], e.extensions["status"], e.request_id) for e in session.events if e.is_runner_completion
    ]
    assert completions == [
        (run_id, "requires_action", ended.request_id),
        (run_id, "cancelled", ended.request_id),
        (other.id, "completed", other.request_id),
    ]
    # The new run's own ledger events are its turn, answer and completion.
    assert other.event_count == 3
    # Results for the abandoned call now start a run of their own, not the ended one.
    late = await runner.start(user_id="u", session_id=session_id, options=OPTIONS, tool_results=answer("c1", "web-2"))
    assert late.run_id not in (run_id, other.id)
    assert (await late.wait()).status == "completed"
    model.assert_consumed()


async def test_a_result_for_a_call_the_paused_run_does_not_wait_for_is_refused_and_the_run_stays_paused() -> None:
    runner, model = make(ScriptStep.call("ask_user", {"question": "which host?"}, id="c1"))
    session_id, run_id = await start_paused(runner)
    with pytest.raises(UsageError, match="'c9'"):
        await runner.start(user_id="u", session_id=session_id, options=OPTIONS, tool_results=answer("c9", "?"))
    record = await runner.run_store.get(run_id)
    assert record is not None and record.status == "requires_action"
    model.assert_consumed()


async def test_the_paused_segment_is_timed_apart_from_the_wait() -> None:
    runner, model = make(ScriptStep.call("ask_user", {"question": "which host?"}, id="c1"), "Done.")
    session_id, run_id = await start_paused(runner)
    await run(runner, session_id=session_id, tool_results=answer("c1", "web-2"))
    record = await runner.run_store.get(run_id)
    assert record is not None and record.trace is not None
    [earlier] = record.trace["earlier_segments"]
    assert earlier["status"] == "requires_action" and earlier["run_id"] == run_id
    assert record.started_at is not None and record.ended_at is not None
    assert record.ended_at - record.started_at >= timedelta(0)
    model.assert_consumed()


@pytest.mark.django_db(transaction=True)
async def test_on_the_database_two_resumes_racing_claim_a_paused_run_once(alice: Any) -> None:
    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService

    session = await DjangoSessionService().create_session(app="t", user_id=str(alice.pk))
    store = DjangoRunStore()
    user = str(alice.pk)
    await store.create(
        RunRecord(
            id="r1",
            app="t",
            user_id=user,
            session_id=session.id,
            agent="a",
            request_id="q1",
            status="requires_action",
            started_at=utcnow(),
        )
    )
    await store.create(
        RunRecord(
            id="r2",
            app="t",
            user_id=user,
            session_id=session.id,
            agent="a",
            request_id="q2",
            status="completed",
            started_at=utcnow(),
        )
    )
    assert await store.running() == []  # a paused run is not live: no reaper takes it
    with pytest.raises(DuplicateRequestError):  # the resuming request's id is the user's
        await store.resume("r1", user_id=user, request_id="q2", owner="me", at=utcnow())
    results = await asyncio.gather(
        *(store.resume("r1", user_id=user, request_id=f"q-{i}", owner="me", at=utcnow()) for i in range(4))
    )
    [won] = [r for r in results if r is not None]
    assert (won.status, won.owner) == ("running", "me")
    stored = await store.get("r1")
    assert stored is not None and stored.request_id == won.request_id
    assert await store.resume("r2", user_id=user, request_id="q9", owner="me", at=utcnow()) is None  # not paused
    await store.create(
        RunRecord(
            id="r3",
            app="t",
            user_id=user,
            session_id=session.id,
            agent="a",
            request_id="q3",
            status="requires_action",
            started_at=utcnow(),
        )
    )
    ended = await store.abandon("r3", user_id=user, at=utcnow(), reason="a new message came instead")
    assert ended is not None and (ended.status, ended.error["type"]) == ("cancelled", "abandoned")  # type: ignore[index]  # set by abandon
    assert await store.abandon("r3", user_id=user, at=utcnow(), reason="again") is None
