"""Summary jobs: when the Runner enqueues (SPEC 1.8), the schedulers, the Celery task and the locks."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, EventError, Message, ToolCall, utcnow
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey, Summary
from sessions_app.core.summary import (
    InProcessSummaryScheduler,
    SummaryEngine,
    SummaryJob,
    SummaryRequest,
    SummaryResult,
    TimeThreshold,
    should_enqueue_summary,
    tool_round_complete,
)
from tests.sessions.ledger_builders import APP, Ledger


class CountingSummarizer:
    name = "counting"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[tuple[int, int]] = []
        self.delay_s = delay_s
        self.started = asyncio.Event()  # set when a summary is under way

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.started.set()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.calls.append((request.events[0].seq or 0, request.events[-1].seq or 0))
        return SummaryResult(text=f"summary through {request.events[-1].seq}")


class RecordingScheduler:
    def __init__(self) -> None:
        self.jobs: list[SummaryJob] = []

    async def enqueue(self, job: SummaryJob) -> None:
        self.jobs.append(job)

    async def aclose(self) -> None:
        return None


def lookup(ticket_id: str) -> dict[str, str]:
    """Look up a ticket.

    Args:
        ticket_id: the ticket id
    """
    return {"id": ticket_id, "status": "open"}


# -- SPEC 1.8: which persisted events enqueue ---------------------------------------------------


def test_final_answers_and_tool_results_enqueue_other_events_do_not() -> None:
    answer = Event(author="a", message=Message(role="assistant", content="done"), done=True)
    result = Event(author="a", message=Message(role="tool", content="r", tool_call_id="c1", tool_name="t"))
    assert should_enqueue_summary(answer) and should_enqueue_summary(result)
    assert not should_enqueue_summary(Event(author="user", message=Message(role="user", content="hi")))
    assert not should_enqueue_summary(
        Event(author="a", message=Message(role="assistant", tool_calls=(ToolCall(id="c1", name="t"),)))
    )
    assert not should_enqueue_summary(
        Event(
            author="a",
            object="error",
            error=EventError(type="model_error", message="x"),
            message=Message(role="assistant", content="An error occurred"),
        )
    )
    assert not should_enqueue_summary(Event(author="a", state_delta={"k": 1}))  # no content
    assert not should_enqueue_summary(answer.replace(extensions={"skip_summarization": True}))
    # With a synchronous summary in the run, tool results leave it to the flow; answers still go.
    assert not should_enqueue_summary(result, sync_intra_run=True)
    assert should_enqueue_summary(answer, sync_intra_run=True)
    assert not should_enqueue_summary(result, round_complete=False)


def test_a_tool_round_is_complete_once_every_call_has_its_result() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("two lookups")
    turn.calls(("lookup", {}, "c1"), ("lookup", {}, "c2"))
    first = turn.result("c1", "one")
    assert not tool_round_complete(ledger.events, first)
    second = turn.result("c2", "two")
    assert tool_round_complete(ledger.events, second)


async def test_the_runner_enqueues_after_persisting_answers_and_complete_tool_rounds() -> None:
    model = ScriptedModel.of(
        ScriptStep.calls(("lookup", {"ticket_id": "A"}), ("lookup", {"ticket_id": "B"})), "both open"
    )
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)], parallel_tools=False)
    service, scheduler = InMemorySessionService(), RecordingScheduler()
    runner = Runner(app=APP, agents=[agent], session_service=service, summary_scheduler=scheduler)
    handle = await runner.start(user_id="alice", message="A and B?")
    await handle.wait()
    ledger = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id))
    kinds = {e.seq: (e.role, bool(e.message and e.message.tool_calls)) for e in ledger}
    # user 1, calls 2, results 3 and 4, answer 5, completion 6: the second result and the answer enqueue.
    assert [j.last_seq for j in scheduler.jobs] == [4, 5], kinds
    assert {j.filter_key for j in scheduler.jobs} == {APP}
    assert all(j.key.session_id == handle.session_id and j.context_window == 8192 for j in scheduler.jobs)


async def test_an_agent_that_summarizes_within_the_run_leaves_tool_results_to_itself() -> None:
    from runs.core.context.governance import ContextGovernance

    model = ScriptedModel.of(ScriptStep.call("lookup", {"ticket_id": "A"}), "open")
    governance = ContextGovernance(summaries=SummaryEngine(summarizer=None), sync_summary_intra_run=True)
    # No summarizer: the agent does not summarize, so tool results still enqueue.
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)], governance=governance)
    assert agent.sync_summary_intra_run is False
    governance = ContextGovernance(
        summaries=SummaryEngine(summarizer=CountingSummarizer()), sync_summary_intra_run=True
    )
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup)], governance=governance)
    scheduler = RecordingScheduler()
    runner = Runner(app=APP, agents=[agent], session_service=InMemorySessionService(), summary_scheduler=scheduler)
    handle = await runner.start(user_id="alice", message="A?")
    await handle.wait()
    assert [j.last_seq for j in scheduler.jobs] == [4]  # the answer only


async def test_a_failing_scheduler_never_fails_the_run() -> None:
    class Broken(RecordingScheduler):
        async def enqueue(self, job: SummaryJob) -> None:
            raise ConnectionError("broker down")

    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=ScriptedModel.of("hi"))],
        session_service=InMemorySessionService(),
        summary_scheduler=Broken(),
    )
    handle = await runner.start(user_id="alice", message="hello")
    assert (await handle.wait()).status == "completed"


# -- the in-process scheduler ------------------------------------------------------------------


async def test_in_process_jobs_of_a_session_run_in_order_and_coalesce() -> None:
    ledger = Ledger()
    for i in range(3):
        ledger.simple_turn(f"q{i}", f"a{i}")
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await ledger.append_to(service, session)
    summarizer = CountingSummarizer(delay_s=0.01)
    scheduler = InProcessSummaryScheduler(SummaryEngine(summarizer=summarizer), service)
    await scheduler.enqueue(SummaryJob(key=session.key, filter_key=APP, last_seq=2))
    await asyncio.wait_for(summarizer.started.wait(), 5)  # the first job is running now
    for seq in (5, 8, 9):
        await scheduler.enqueue(SummaryJob(key=session.key, filter_key=APP, last_seq=seq))
    await scheduler.join()
    # The first job read everything after the boundary; the coalesced one found it covered.
    assert summarizer.calls == [(1, 9)]
    assert [o.primary.reason for o in scheduler.outcomes] == ["updated", "covered"]
    assert scheduler.idle


async def test_in_process_job_failures_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Exploding(InMemorySessionService):
        async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
            raise RuntimeError("disk on fire")

    service = Exploding()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    scheduler = InProcessSummaryScheduler(SummaryEngine(summarizer=CountingSummarizer()), service)
    await scheduler.enqueue(SummaryJob(key=session.key, filter_key=APP, last_seq=1))
    await scheduler.join()
    assert "disk on fire" in caplog.text and "Traceback" not in caplog.text


async def test_closing_the_in_process_scheduler_cancels_its_jobs() -> None:
    ledger = Ledger()
    ledger.simple_turn("q", "a")
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await ledger.append_to(service, session)
    summarizer = CountingSummarizer(delay_s=5)
    scheduler = InProcessSummaryScheduler(SummaryEngine(summarizer=summarizer), service)
    await scheduler.enqueue(SummaryJob(key=session.key, filter_key=APP, last_seq=3))
    await asyncio.wait_for(summarizer.started.wait(), 5)  # the job is running
    await asyncio.wait_for(scheduler.aclose(), 1)
    assert scheduler.idle and await service.get_summary(session.key, filter_key=APP) is None


# -- Django: the Celery task, enqueue on commit, the locks ----------------------------------------


@pytest.fixture
def django_session(django_user_model: Any) -> Callable[..., Any]:
    """Makes a stored session with one turn (user, tool call, result, answer, completion)."""
    from asgiref.sync import async_to_sync

    from sessions_app.backends import DjangoSessionService

    user = django_user_model.objects.create_user(username="alice")

    def make() -> tuple[DjangoSessionService, Any]:
        service = DjangoSessionService()
        session = async_to_sync(service.create_session)(app=APP, user_id=str(user.pk))
        ledger = Ledger()
        ledger.simple_turn("Is checkout slow?", "Yes: 3 timeouts at 10:02.", tool=("search_logs", "3 timeouts"))
        async_to_sync(ledger.append_to)(service, session)
        return service, session

    return make


_CURRENT: list[Any] = []


def current_summarizer() -> Any:
    """The AGENTSITE_SUMMARIZER factory these tests configure."""
    return _CURRENT[-1]


@pytest.fixture
def counting_summarizer(settings: Any) -> Iterator[CountingSummarizer]:
    summarizer = CountingSummarizer()
    settings.AGENTSITE_SUMMARIZER = f"{__name__}:current_summarizer"
    settings.AGENTSITE_SUMMARY_LOCK = "database"
    # The trigger always fires: these tests are about jobs, not thresholds.
    settings.AGENTSITE_DEMO_GOVERNANCE = False
    settings.AGENTSITE_SUMMARY_TRIGGER_RATIO = 0.0001
    settings.AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = 1
    _CURRENT.append(summarizer)
    yield summarizer
    _CURRENT.remove(summarizer)


@pytest.mark.django_db(transaction=True)
def test_running_the_summary_task_twice_has_one_effect(
    django_session: Callable[..., Any], counting_summarizer: CountingSummarizer
) -> None:
    from sessions_app import models as orm
    from sessions_app.tasks import session_summarize_task

    _, session = django_session()
    assert session_summarize_task(session.id, APP, 5) == "updated"
    assert session_summarize_task(session.id, APP, 5) == "covered"
    assert counting_summarizer.calls == [(1, 5)]
    row = orm.Summary.objects.get(session_id=session.id, filter_key=APP)
    assert (row.version, row.last_seq, row.text) == (1, 5, "[events 1-5]\nsummary through 5")
    assert orm.Summary.objects.get(session_id=session.id, filter_key="").last_seq == 5  # the cascade's copy
    assert session_summarize_task("no-such-session", APP, 1) == "missing"


@pytest.mark.django_db(transaction=True)
def test_summary_jobs_are_sent_to_celery_only_when_the_transaction_commits(
    django_session: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import transaction

    from sessions_app import summaries
    from sessions_app.tasks import session_summarize_task

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(session_summarize_task, "apply_async", lambda args, **options: sent.append((args, options)))
    _, session = django_session()
    with transaction.atomic():
        summaries.summary_job_enqueue(session_id=session.id, filter_key=APP, last_seq=4, queue="summaries")
        assert sent == []  # a worker must never see a job before the data it reads
    assert sent == [((session.id, APP, 4), {"queue": "summaries"})]
    with transaction.atomic():
        summaries.summary_job_enqueue(session_id=session.id, filter_key=APP, last_seq=5)
        transaction.set_rollback(True)
    assert len(sent) == 1  # rolled back: never sent


@pytest.mark.django_db(transaction=True)
async def test_the_database_lock_admits_one_holder_and_its_lease_expires(django_session: Callable[..., Any]) -> None:
    from asgiref.sync import sync_to_async

    from sessions_app import models as orm
    from sessions_app.locks import DatabaseSummaryLock

    _, session = await sync_to_async(django_session)()
    # A lease far longer than the test: on a loaded machine a short one ran out between the
    # acquire and the checks below that expect it held.
    lock = DatabaseSummaryLock(ttl_s=120)
    token = await lock.acquire(session.key, APP, wait_s=0)
    assert token is not None
    assert await lock.acquire(session.key, APP, wait_s=0.1) is None
    assert await lock.acquire(session.key, "other", wait_s=0) is not None  # per filter key
    # The row that carries the lease is not a summary.
    service_summary = await sync_to_async(
        lambda: orm.Summary.objects.filter(session_id=session.id, filter_key=APP).count()
    )()
    assert service_summary == 1
    from sessions_app.backends import DjangoSessionService

    assert await DjangoSessionService().get_summary(session.key, filter_key=APP) is None
    await lock.release(session.key, APP, "not-the-token")
    assert await lock.acquire(session.key, APP, wait_s=0) is None
    await lock.release(session.key, APP, token)
    second = await lock.acquire(session.key, APP, wait_s=0)
    assert second is not None
    await lock.release(session.key, APP, second)
    # A holder that never releases: its short lease runs out and the next waiter gets the lock.
    short = DatabaseSummaryLock(ttl_s=0.3)
    assert await short.acquire(session.key, APP, wait_s=0) is not None
    assert await lock.acquire(session.key, APP, wait_s=10.0) is not None


@pytest.mark.django_db(transaction=True)
async def test_concurrent_summaries_through_the_database_lock_compute_once(django_session: Callable[..., Any]) -> None:
    from asgiref.sync import sync_to_async

    from sessions_app.core.summary import summarize_session
    from sessions_app.locks import DatabaseSummaryLock

    service, session = await sync_to_async(django_session)()
    summarizer = CountingSummarizer(delay_s=0.05)
    lock = DatabaseSummaryLock()
    outcomes = await asyncio.gather(
        *(
            summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, lock=lock, covers_seq=5)
            for _ in range(4)
        )
    )
    assert summarizer.calls == [(1, 5)]
    assert sorted(o.primary.reason for o in outcomes) == ["covered"] * 3 + ["updated"]


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: the Redis lock needs a server")
async def test_the_redis_lock_admits_one_holder_and_releases_only_its_own_token() -> None:
    from sessions_app.locks import RedisSummaryLock

    lock = RedisSummaryLock(os.environ["REDIS_URL"], ttl_s=0.5, prefix="agentsite-test:summary-lock")
    key = SessionKey(app=APP, user_id="alice", session_id=f"s-{os.getpid()}")
    token = await lock.acquire(key, APP, wait_s=0)
    assert token is not None
    assert await lock.acquire(key, APP, wait_s=0.1) is None
    await lock.release(key, APP, "someone-else")
    assert await lock.acquire(key, APP, wait_s=0) is None
    await lock.release(key, APP, token)
    again = await lock.acquire(key, APP, wait_s=0)
    assert again is not None
    assert await lock.acquire(key, APP, wait_s=1.0) is not None  # expired after 0.5 s


def test_spec_2_6_the_summary_filter_allowlist_is_a_setting(settings: Any) -> None:
    from agentsite.composition import summary_engine

    settings.AGENTSITE_SUMMARY_FILTER_KEYS = ["agentsite/research"]
    assert summary_engine().allowlist == ("agentsite/research",)
    settings.AGENTSITE_SUMMARY_FILTER_KEYS = []
    assert summary_engine().allowlist is None


# -- SPEC 3.5: the time trigger on the job path -------------------------------------------------------


async def test_spec_3_5_the_time_trigger_fires_on_the_job_path_after_an_idle_gap() -> None:
    summaries: dict[timedelta, Summary | None] = {}
    for idle in (timedelta(hours=2), timedelta(seconds=10)):
        service = InMemorySessionService()
        session = await service.create_session(app=APP, user_id="alice")
        then = utcnow() - idle
        await service.append_events(
            session,
            [
                Event(
                    author="user",
                    message=Message(role="user", content="earlier question"),
                    request_id="earlier",
                    filter_key=APP,
                    created_at=then - timedelta(seconds=1),
                ),
                Event(
                    author="support",
                    message=Message(role="assistant", content="earlier answer"),
                    request_id="earlier",
                    filter_key=APP,
                    created_at=then,
                ),
            ],
        )
        engine = SummaryEngine(summarizer=CountingSummarizer(), checker=TimeThreshold(seconds=3600))
        scheduler = InProcessSummaryScheduler(engine, service)
        runner = Runner(
            app=APP,
            agents=[LLMAgent(name="support", model=ScriptedModel.of("welcome back"))],
            session_service=service,
            summary_scheduler=scheduler,
        )
        handle = await runner.start(user_id="alice", message="I'm back", session_id=session.id)
        await handle.wait()
        await scheduler.join()
        assert scheduler.outcomes, "the answer enqueued a job"
        summaries[idle] = await service.get_summary(session.key, filter_key=APP)
    # Two hours since the previous request: the job summarizes (before the gap was measured a
    # job never fired, its newest event being seconds old); ten seconds: it does not.
    assert summaries[timedelta(hours=2)] is not None
    assert summaries[timedelta(seconds=10)] is None


def test_spec_3_5_the_time_threshold_is_a_setting(settings: Any) -> None:
    from agentsite.composition import summary_engine

    settings.AGENTSITE_SUMMARY_TIME_THRESHOLD_S = 3600
    checker = summary_engine().checker
    assert TimeThreshold(seconds=3600) in getattr(checker, "checks", ())
    settings.AGENTSITE_SUMMARY_TIME_THRESHOLD_S = 0
    assert TimeThreshold(seconds=3600) not in getattr(summary_engine().checker, "checks", ())


@pytest.mark.django_db(transaction=True)
def test_spec_3_5_the_time_trigger_fires_in_the_celery_task_after_an_idle_gap(
    django_user_model: Any, counting_summarizer: CountingSummarizer, settings: Any
) -> None:
    from asgiref.sync import async_to_sync

    from sessions_app.backends import DjangoSessionService
    from sessions_app.tasks import session_summarize_task

    settings.AGENTSITE_SUMMARY_TRIGGER_RATIO = 1.0
    settings.AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = 10**9  # only the time trigger can fire
    settings.AGENTSITE_SUMMARY_TIME_THRESHOLD_S = 3600
    user = django_user_model.objects.create_user(username="alice")
    reasons = []
    for gap in (timedelta(hours=2), timedelta(minutes=1)):
        ledger = Ledger()
        ledger.simple_turn("Is checkout slow?", "Yes.")
        second = len(ledger.events)
        ledger.simple_turn("Back again: any news?", "Still slow.")
        ledger.events[second:] = [e.replace(created_at=e.created_at + gap) for e in ledger.events[second:]]
        service = DjangoSessionService()
        session = async_to_sync(service.create_session)(app=APP, user_id=str(user.pk))
        async_to_sync(ledger.append_to)(service, session)
        reasons.append(session_summarize_task(session.id, APP, len(ledger.events)))
    assert reasons == ["updated", "not_triggered"]
