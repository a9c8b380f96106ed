"""Issue 18: a run's row is inserted with its user message (one transaction, one commit
less per run) on the Django stores; a duplicate request id is still refused with nothing
of the turn written, and a start whose write fails still ends the run visibly. Runs on
the Django backends, so on PostgreSQL in CI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from runs import models as run_rows
from runs.backends import DjangoRunStore, record_from_row
from runs.core.agents.llm import LLMAgent
from runs.core.errors import DuplicateRequestError
from runs.core.llm.scripted import ScriptedModel
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app import models as session_rows
from sessions_app.backends import DjangoSessionService
from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event
from sessions_app.core.session import Session

pytestmark = pytest.mark.django_db(transaction=True)

APP = "agentsite"


class CountingRunStore(DjangoRunStore):
    """Counts the run rows created on their own (outside a ledger append)."""

    def __init__(self) -> None:
        self.creates = 0

    async def create(self, record: RunRecord) -> RunRecord:
        self.creates += 1
        return await super().create(record)


class FailingOpening(DjangoSessionService):
    """Refuses the write of a user message (a full disk, say), once."""

    def __init__(self) -> None:
        self.failed = False

    async def append_events(
        self, session: Session, events: Sequence[Event], *, joined: Sequence[Any] = ()
    ) -> list[Event]:
        if not self.failed and any(e.author == "user" for e in events):
            self.failed = True
            raise RuntimeError("disk full")
        return await super().append_events(session, events, joined=joined)


def runner(store: DjangoRunStore, service: Any, *answers: str) -> Runner:
    agent = LLMAgent(name="support", model=ScriptedModel.of(*answers))
    return Runner(app=APP, agents=[agent], session_service=service, run_store=store)


async def rows(session_id: str) -> tuple[list[RunRecord], list[str]]:
    def read() -> tuple[list[RunRecord], list[str]]:
        runs = [record_from_row(r) for r in run_rows.Run.objects.filter(session_id=session_id).order_by("created_at")]
        events = list(
            session_rows.Event.objects.filter(session_id=session_id).order_by("seq").values_list("author", flat=True)
        )
        return runs, events

    return await sync_to_async(read)()


async def test_the_run_row_goes_in_with_the_user_message(alice: Any) -> None:
    store = CountingRunStore()
    first = runner(store, CachedSessionService(DjangoSessionService()), "Hello.")
    handle = await first.start(user_id=str(alice.pk), message="hi", request_id="req-1")
    final = await handle.wait()
    await first.close()

    assert store.creates == 0  # no insert of its own
    runs, events = await rows(handle.session_id)
    assert runs == [final] and final.status == "completed" and final.event_count == 3
    assert events == ["user", "support", APP]


async def test_a_duplicate_request_id_writes_nothing_of_its_turn(alice: Any) -> None:
    store = CountingRunStore()
    service = CachedSessionService(DjangoSessionService())
    first = runner(store, service, "Hello.")
    handle = await first.start(user_id=str(alice.pk), message="hi", request_id="req-1")
    await handle.wait()
    await first.close()

    # Another process (a fresh runner: its in-memory guard knows nothing) retries the request.
    second = runner(store, service, "Never said.")
    with pytest.raises(DuplicateRequestError):
        await second.start(user_id=str(alice.pk), session_id=handle.session_id, message="hi again", request_id="req-1")
    await second.close()

    runs, events = await rows(handle.session_id)
    assert len(runs) == 1
    assert events == ["user", "support", APP]  # the refused turn's message is not in the ledger
    assert store.creates == 1  # the refused start learned why by creating the row alone

    # The request id is free again for a new one, and the session goes on.
    third = runner(store, service, "Again.")
    later = await third.start(user_id=str(alice.pk), session_id=handle.session_id, message="hi", request_id="req-2")
    assert (await later.wait()).status == "completed"
    await third.close()


async def test_a_duplicate_request_id_in_a_new_session_leaves_no_session(alice: Any) -> None:
    store = CountingRunStore()
    service = DjangoSessionService()
    first = runner(store, service, "Hello.")
    await (await first.start(user_id=str(alice.pk), message="hi", request_id="req-1")).wait()
    with pytest.raises(DuplicateRequestError):
        await first.start(user_id=str(alice.pk), message="hi", request_id="req-1")
    await first.close()

    sessions = await sync_to_async(lambda: session_rows.Session.objects.filter(user=alice).count())()
    assert sessions == 1


async def test_a_failed_user_message_write_still_ends_the_run_visibly(alice: Any) -> None:
    store = CountingRunStore()
    service = FailingOpening()
    failing = runner(store, service, "Never said.")
    with pytest.raises(RuntimeError, match="disk full"):
        await failing.start(user_id=str(alice.pk), message="hi", request_id="req-1")
    await failing.close()

    [session_id] = await sync_to_async(
        lambda: list(session_rows.Session.objects.filter(user=alice).values_list("id", flat=True))
    )()
    runs, events = await rows(session_id)
    # The row was created alone after the joined write failed, then ended as a failed start.
    assert store.creates == 1
    assert [(r.request_id, r.status, (r.error or {}).get("type")) for r in runs] == [
        ("req-1", "failed", "start_failed")
    ]
    assert events == ["support", APP]  # the run_error and the completion; no user message
