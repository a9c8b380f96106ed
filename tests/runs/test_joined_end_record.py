"""Issue 18: the run's end record commits with its last step (one transaction, one write
less per run), on PostgreSQL a step write is one statement, and advancing a stored
summary is one statement. Runs on the Django
backends, so on PostgreSQL in CI; the record must be the same as when it is saved alone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from runs import models as run_rows
from runs.backends import DjangoRunStore, record_from_row
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import InMemoryRunStore, RunRecord
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.backends import DjangoSessionService
from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, Summary, SummaryBoundary

pytestmark = pytest.mark.django_db(transaction=True)

APP = "agentsite"


def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: what to look up
    """
    return f"found {q}"


class CountingRunStore(DjangoRunStore):
    """Counts the record writes made on their own."""

    def __init__(self) -> None:
        self.saves = 0

    async def save(self, record: RunRecord) -> None:
        self.saves += 1
        await super().save(record)


class CountingMemoryRunStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    async def save(self, record: RunRecord) -> None:
        self.saves += 1
        await super().save(record)


class FailingLastWrite(DjangoSessionService):
    """Refuses the write that holds a completion marker (the run's last)."""

    async def append_events(
        self, session: Session, events: Sequence[Event], *, joined: Sequence[Any] = ()
    ) -> list[Event]:
        if any(e.is_runner_completion for e in events):
            raise RuntimeError("disk full")
        return await super().append_events(session, events, joined=joined)


def agent() -> LLMAgent:
    model = ScriptedModel.of(ScriptStep.call("lookup", {"q": "a"}), "The answer is a.")
    return LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)])


async def stored_record(run_id: str) -> RunRecord:
    return await sync_to_async(lambda: record_from_row(run_rows.Run.objects.get(pk=run_id)))()


async def test_the_end_record_is_written_with_the_last_step_and_equals_the_final_record(alice: Any) -> None:
    store = CountingRunStore()
    service = CachedSessionService(DjangoSessionService())
    runner = Runner(app=APP, agents=[agent()], session_service=service, run_store=store)
    handle = await runner.start(user_id=str(alice.pk), message="look up a")
    final = await handle.wait()
    await runner.close()

    assert store.saves == 0  # no write of its own: it went with the answer and the completion
    row = await stored_record(final.id)
    assert row == final
    assert (row.status, row.answer, row.model_calls, row.tool_calls) == ("completed", "The answer is a.", 2, 1)
    assert row.ended_at is not None and row.trace is not None
    ledger = await DjangoSessionService().list_events(
        SessionKey(app=APP, user_id=str(alice.pk), session_id=handle.session_id), limit=50
    )
    # user, call, result, answer, completion: the record counts every one of them
    assert row.event_count == len(ledger) == 5
    assert ledger[-1].is_runner_completion and ledger[-1].extensions["status"] == "completed"


async def test_a_failed_last_write_still_saves_the_record_on_its_own_without_the_completion(alice: Any) -> None:
    store = CountingRunStore()
    runner = Runner(app=APP, agents=[agent()], session_service=FailingLastWrite(), run_store=store)
    handle = await runner.start(user_id=str(alice.pk), message="look up a")
    final = await handle.wait()
    await runner.close()

    assert store.saves == 1
    row = await stored_record(final.id)
    assert row == final and row.status == "completed"
    # the user message, the call and its result are stored; the answer and completion are not
    assert row.event_count == 3


class RefusedJoinedSave(CountingRunStore):
    """A record write the database refuses inside the append (a broken statement)."""

    def joined_save(self, record: RunRecord) -> Any:
        def broken(guard: str | None) -> tuple[str, list[Any]]:
            return 'UPDATE "no_such_table" SET "x" = 1', []

        return broken


async def test_a_refused_joined_record_costs_the_ledger_nothing(alice: Any) -> None:
    store = RefusedJoinedSave()
    service = DjangoSessionService()
    runner = Runner(app=APP, agents=[agent()], session_service=service, run_store=store)
    handle = await runner.start(user_id=str(alice.pk), message="look up a")
    final = await handle.wait()
    await runner.close()

    assert store.saves == 1  # written apart, after the events went alone
    row = await stored_record(final.id)
    assert row == final and row.status == "completed" and row.event_count == 5
    ledger = await service.list_events(
        SessionKey(app=APP, user_id=str(alice.pk), session_id=handle.session_id), limit=50
    )
    assert [e.role for e in ledger][-2:] == ["assistant", "system"] and ledger[-1].is_runner_completion


async def test_stores_that_cannot_join_save_the_record_on_its_own() -> None:
    store = CountingMemoryRunStore()
    runner = Runner(app=APP, agents=[agent()], session_service=InMemorySessionService(), run_store=store)
    handle = await runner.start(user_id="u", message="look up a")
    final = await handle.wait()
    await runner.close()

    assert store.saves == 1
    assert await store.get(final.id) == final
    assert final.event_count == len(handle.invocation.session.events) == 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")
async def test_on_postgresql_a_step_write_with_a_joined_record_is_one_statement(
    alice: Any, statements: list[str]
) -> None:
    service = DjangoSessionService()
    session = await service.create_session(app=APP, user_id=str(alice.pk))
    record = RunRecord(
        id="r1", app=APP, user_id=str(alice.pk), session_id=session.id, agent="a", request_id="q1", status="running"
    )
    store = DjangoRunStore()
    await store.create(record)
    events = [Event(author="a", message=Message(role="assistant", content=f"step {i}")) for i in range(3)]
    statements.clear()
    saved = await service.append_events(
        session, events, joined=[store.joined_save(record.replace(answer="step 2", event_count=3))]
    )
    assert len(statements) == 1
    assert [e.seq for e in saved] == [1, 2, 3]
    ledger = await service.list_events(session.key, limit=10)
    assert [(e.seq, e.text) for e in ledger] == [(1, "step 0"), (2, "step 1"), (3, "step 2")]
    stored = await store.get("r1")
    assert stored is not None and (stored.answer, stored.event_count) == ("step 2", 3)

    # The next write continues the counter; a retried event is stored once.
    again = await service.append_events(
        session, [events[2], Event(author="a", message=Message(role="user", content="x"))]
    )
    assert [e.seq for e in again] == [3, 4]
    assert [e.seq for e in await service.list_events(session.key, limit=10)] == [1, 2, 3, 4]

    # Not the caller's session: nothing is written, joined writes included.
    other = Session(app=APP, user_id=str(alice.pk) + "0", id=session.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_events(other, events[:1], joined=[store.joined_save(record.replace(answer="no"))])
    stored = await store.get("r1")
    assert stored is not None and stored.answer == "step 2"


async def test_advancing_a_stored_summary_is_one_statement_and_returns_the_stored_row(
    alice: Any, statements: list[str]
) -> None:
    service = DjangoSessionService()
    session = await service.create_session(app=APP, user_id=str(alice.pk))
    saved = await service.append_events(
        session, [Event(author="user", message=Message(role="user", content=f"m{i}")) for i in range(4)]
    )

    def boundary(event: Event) -> SummaryBoundary:
        return SummaryBoundary(
            cutoff_at=event.created_at + timedelta(microseconds=1), last_event_id=event.id, last_seq=event.seq or 0
        )

    first = await service.advance_summary(
        session.key, Summary(filter_key=APP, text="to 2", boundary=boundary(saved[1]))
    )
    assert first is not None and first.version == 1
    statements.clear()
    second = await service.advance_summary(
        session.key, Summary(filter_key=APP, text="to 4", boundary=boundary(saved[3]))
    )
    assert len(statements) == 1
    assert second is not None and (second.text, second.version, second.last_seq) == ("to 4", 2, 4)
    assert second == await service.get_summary(session.key, filter_key=APP)
    # Not past the stored boundary: nothing changes.
    assert (
        await service.advance_summary(session.key, Summary(filter_key=APP, text="old", boundary=boundary(saved[2])))
        is None
    )
    stored = await service.get_summary(session.key, filter_key=APP)
    assert stored is not None and stored.text == "to 4"
