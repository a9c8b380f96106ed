"""Celery tasks of the sessions app, and the Celery `SummaryScheduler`."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from celery import Task, shared_task

from sessions_app import summaries
from sessions_app.backends import db_call
from sessions_app.core.summary import SummaryEngine, SummaryGate, SummaryJob, engine_gate

logger = logging.getLogger(__name__)

BUSY_RETRY_S = 1
BUSY_MAX_RETRIES = 30
FORK_PARENT_MAX_CHARS = 2_000_000
"""A fork parent (a whole model request) larger than this as JSON stays behind: the broker
carries small messages well, and the job then sends the bounded standalone request."""


@shared_task(bind=True, name="sessions_app.session_summarize_task", max_retries=BUSY_MAX_RETRIES, acks_late=True)
def session_summarize_task(
    self: Task, session_id: str, filter_key: str, last_seq: int, parent: Mapping[str, Any] | None = None
) -> str:
    """Summarize (session, filter key) up to at least `last_seq`; retried while another
    summariser holds the lock. Returns what happened (`updated`, `covered`, ...).

    `parent`: the request the job may fork from (`ForkParent.to_dict`, SPEC 3.6)."""
    outcome = summaries.session_summarize(
        session_id=session_id, filter_key=filter_key, last_seq=last_seq, parent=parent
    )
    if outcome is None:
        return "missing"
    if outcome.primary.reason == "busy":
        raise self.retry(countdown=BUSY_RETRY_S)
    return outcome.primary.reason


class CelerySummaryScheduler:
    """Sends summary jobs to Celery workers, on commit (`summaries.summary_job_enqueue`).

    A job crosses processes as (session id, filter key, last seq) and, when the run gave
    one, its cache-safe fork parent (SPEC 3.6) as JSON: the worker forks from the same
    request the in-process path would, so the provider's prompt cache still serves its
    prefix. The parent travels only when the workers' summarizer forks (the engine says),
    and not when it is over `FORK_PARENT_MAX_CHARS` (the standalone request then).
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
            session_id=job.key.session_id,
            filter_key=job.filter_key,
            last_seq=job.last_seq,
            queue=self.queue,
            parent=_portable_parent(job) if self._forks() else None,
        )

    def _forks(self) -> bool:
        """Whether the workers' summarizer forks (SPEC 3.6); unknown (no engine): it may."""
        if self.engine is None:
            return True
        return bool(getattr(self.engine.summarizer, "cache_safe_forking", False))

    async def aclose(self) -> None:
        return None


def _portable_parent(job: SummaryJob) -> dict[str, Any] | None:
    """The job's fork parent as the task's JSON argument, or None (none, or too large)."""
    if job.parent is None:
        return None
    parent = job.parent.to_dict()
    size = len(json.dumps(parent, ensure_ascii=False, default=str))
    if size > FORK_PARENT_MAX_CHARS:
        logger.info("summary job of session %s: its fork parent (%d chars) stays behind", job.key.session_id, size)
        return None
    return parent
