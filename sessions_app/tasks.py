"""Celery tasks of the sessions app, and the Celery `SummaryScheduler`."""

from __future__ import annotations

from celery import Task, shared_task

from sessions_app import summaries
from sessions_app.backends import db_call
from sessions_app.core.summary import SummaryEngine, SummaryGate, SummaryJob, engine_gate

BUSY_RETRY_S = 1
BUSY_MAX_RETRIES = 30


@shared_task(bind=True, name="sessions_app.session_summarize_task", max_retries=BUSY_MAX_RETRIES, acks_late=True)
def session_summarize_task(self: Task, session_id: str, filter_key: str, last_seq: int) -> str:
    """Summarize (session, filter key) up to at least `last_seq`; retried while another
    summariser holds the lock. Returns what happened (`updated`, `covered`, ...)."""
    outcome = summaries.session_summarize(session_id=session_id, filter_key=filter_key, last_seq=last_seq)
    if outcome is None:
        return "missing"
    if outcome.primary.reason == "busy":
        raise self.retry(countdown=BUSY_RETRY_S)
    return outcome.primary.reason


class CelerySummaryScheduler:
    """Sends summary jobs to Celery workers, on commit (`summaries.summary_job_enqueue`).

    A job crosses processes as (session id, filter key, last seq) only: the worker loads
    the rest by id, so a cache-safe fork parent (a whole request) does not travel with it.
    """

    def __init__(self, *, queue: str | None = None, engine: SummaryEngine | None = None) -> None:
        self.queue = queue
        # The engine the workers run (the same settings build it there): its checker
        # decides which jobs are worth sending. None: every job is sent.
        self.engine = engine

    def summary_gate(self) -> SummaryGate | None:
        return engine_gate(self.engine) if self.engine is not None else None

    async def enqueue(self, job: SummaryJob) -> None:
        await db_call(summaries.summary_job_enqueue)(
            session_id=job.key.session_id, filter_key=job.filter_key, last_seq=job.last_seq, queue=self.queue
        )

    async def aclose(self) -> None:
        return None
