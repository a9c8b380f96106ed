"""SPEC 3.6 on the Celery path (issue 26): a summary job sent to a worker carries the request
it may fork from, and the worker's summarizer forks from that same request (its messages and
tools as the run sent them, the fork prompt appended), as the in-process path does.

The enqueue is captured where it would reach the broker (`apply_async`), checked to be JSON
a broker can carry, and run by calling the task function, as a worker would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from runs.core.context.governance import ModelSummaryModel
from runs.core.llm.base import ToolSpec
from runs.core.llm.scripted import ScriptedModel
from sessions_app.core.events import Message
from sessions_app.core.summary import ForkParent, LLMSummarizer, SummaryEngine, SummaryJob
from tests.sessions.ledger_builders import APP, Ledger

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = ToolSpec(
    name="search_logs",
    description="Search the service logs.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
    requires_one_of=(("query",),),
)
PARENT = ForkParent(
    messages=(
        Message(role="system", content="You are the support agent."),
        Message(role="user", content="Is checkout slow?"),
    ),
    tools=(LOOKUP,),
    tools_tokens=40,
    summary_last_seq=0,
    covered_last_seq=4,
)
_MODELS: list[ScriptedModel] = []


def forking_summarizer() -> LLMSummarizer:
    """The AGENTSITE_SUMMARIZER factory of these tests: a forking LLM summarizer."""
    return LLMSummarizer(ModelSummaryModel(_MODELS[-1]), cache_safe_forking=True, fork_prompt="Summarize the above.")


@pytest.fixture
def summary_model(settings: Any) -> Iterator[ScriptedModel]:
    model = ScriptedModel.of("Checkout is slow: 3 timeouts at 10:02.")
    settings.AGENTSITE_SUMMARIZER = f"{__name__}:forking_summarizer"
    settings.AGENTSITE_SUMMARY_LOCK = "database"
    settings.AGENTSITE_DEMO_GOVERNANCE = False
    settings.AGENTSITE_SUMMARY_TRIGGER_RATIO = 0.0001
    settings.AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = 1
    _MODELS.append(model)
    yield model
    _MODELS.remove(model)


def _stored_session(user: Any) -> Any:
    from sessions_app.backends import DjangoSessionService

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(user.pk))
    ledger = Ledger()
    ledger.simple_turn("Is checkout slow?", "Yes: 3 timeouts at 10:02.", tool=("search_logs", "3 timeouts"))
    async_to_sync(ledger.append_to)(service, session)
    return session


def _sent_jobs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    from sessions_app.tasks import session_summarize_task

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(session_summarize_task, "apply_async", lambda args, **options: sent.append(args))
    return sent


def test_spec_3_6_the_celery_job_carries_the_fork_parent_and_the_worker_forks_from_it(
    django_user_model: Any, summary_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessions_app import models as orm
    from sessions_app.tasks import CelerySummaryScheduler, session_summarize_task

    session = _stored_session(django_user_model.objects.create_user(username="alice"))
    sent = _sent_jobs(monkeypatch)
    async_to_sync(CelerySummaryScheduler().enqueue)(
        SummaryJob(key=session.key, filter_key=APP, last_seq=5, parent=PARENT)
    )
    [args] = sent
    carried = json.loads(json.dumps(args))  # what a JSON broker delivers
    assert carried[:3] == [session.id, APP, 5]

    assert session_summarize_task(*carried) == "updated"
    # One model call: the parent's messages as sent, then the fork prompt; the parent's tools.
    [request] = summary_model.requests
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You are the support agent."),
        ("user", "Is checkout slow?"),
        ("user", "Summarize the above."),
    ]
    assert request.tools == (LOOKUP,)
    # The boundary stops at the newest event the parent request held (SPEC 3.6).
    row = orm.Summary.objects.get(session_id=session.id, filter_key=APP)
    assert row.last_seq == 4 and "3 timeouts" in row.text
    summary_model.assert_consumed()


def test_spec_3_6_a_job_without_a_parent_or_with_one_too_large_sends_the_standalone_request(
    django_user_model: Any, summary_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessions_app import tasks
    from sessions_app.tasks import CelerySummaryScheduler, session_summarize_task

    session = _stored_session(django_user_model.objects.create_user(username="alice"))
    sent = _sent_jobs(monkeypatch)
    scheduler = CelerySummaryScheduler()
    async_to_sync(scheduler.enqueue)(SummaryJob(key=session.key, filter_key=APP, last_seq=5))
    monkeypatch.setattr(tasks, "FORK_PARENT_MAX_CHARS", 100)
    async_to_sync(scheduler.enqueue)(SummaryJob(key=session.key, filter_key=APP, last_seq=5, parent=PARENT))
    # A summarizer that does not fork is not sent a request it would not read.
    monkeypatch.setattr(tasks, "FORK_PARENT_MAX_CHARS", 10**9)
    plain = CelerySummaryScheduler(engine=SummaryEngine(summarizer=LLMSummarizer(ModelSummaryModel(summary_model))))
    async_to_sync(plain.enqueue)(SummaryJob(key=session.key, filter_key=APP, last_seq=5, parent=PARENT))
    assert sent == [(session.id, APP, 5), (session.id, APP, 5), (session.id, APP, 5)]

    assert session_summarize_task(*sent[0]) == "updated"
    [request] = summary_model.requests
    assert "Summarize the above." not in [m.content for m in request.messages] and request.tools == ()
    summary_model.assert_consumed()


def test_spec_3_6_a_fork_parent_survives_json_as_it_was() -> None:
    carried = ForkParent.from_dict(json.loads(json.dumps(PARENT.to_dict())))
    assert carried.messages == PARENT.messages
    assert (carried.tools_tokens, carried.summary_last_seq, carried.covered_last_seq) == (40, 0, 4)
    [tool] = carried.tools
    assert tool["name"] == "search_logs" and tool["parameters"] == LOOKUP.parameters
