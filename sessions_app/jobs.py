"""Post-run jobs keyed by a session (auto memory, the evolution review): finding the
session's key in a worker, and queueing a job from the run's event loop.

A Celery send costs the web process about half a millisecond of CPU (the message built,
a Redis client made and two round trips), as much as a tenth of a whole offline run (issue
23). With a broker, the jobs that a process's runs ask for within `AGENTSITE_JOB_BATCH_S`
go as one message (`session_jobs_task`), which a worker runs one after another; a job that
is alone in its window goes as its own task, as before. Eagerly (no broker) a job runs at
once, on a thread of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import current_app, shared_task
from django.conf import settings

from sessions_app import models as orm
from sessions_app.core.session import SessionKey

logger = logging.getLogger(__name__)

# Threads of our own for enqueueing. Not the loop's default executor: its threads also run
# `sync_to_async` calls, which bind them to the runner's loop, and an eager job's
# `async_to_sync` on such a thread would run on (and wait for) that loop, hanging once it
# stops. On these threads the job gets an event loop of its own.
_ENQUEUE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="post-run-jobs")

RETRY_COUNTDOWN_S = 5
"""A job of a batch that failed with an error its task retries is queued alone this much later."""


def session_key(session_id: str) -> SessionKey | None:
    """The key of a session by id, or None when it is gone (deleted before its job ran)."""
    row = orm.Session.objects.filter(id=session_id).values("app", "user_id").first()
    if row is None:
        return None
    return SessionKey(app=row["app"], user_id=str(row["user_id"]), session_id=session_id)


class JobBatcher:
    """Gathers (task name, session id) jobs for `window_s` after the first, then hands them
    to `send` in one call, in the order they came (the same job twice goes once). Thread
    safe; the wait runs on a thread of `_ENQUEUE`, so no event loop has to outlive it.
    `flush` sends what waits at once (at exit, so that nothing asked for is dropped)."""

    def __init__(self, send: Callable[[list[tuple[str, str]]], None], window_s: float) -> None:
        self._send = send
        self.window_s = window_s
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], None] = {}
        self._scheduled = False

    def add(self, task_name: str, session_id: str) -> None:
        with self._lock:
            self._waiting[(task_name, session_id)] = None
            if self._scheduled:
                return
            self._scheduled = True
        _ENQUEUE.submit(self._send_after_window)

    def _send_after_window(self) -> None:
        time.sleep(self.window_s)
        self.flush()

    def flush(self) -> None:
        with self._lock:
            jobs, self._waiting, self._scheduled = list(self._waiting), {}, False
        if not jobs:
            return
        try:
            self._send(jobs)
        except Exception:  # the broker is away: what these runs asked for is lost, and said so
            logger.exception("post-run jobs not queued: %s", jobs)


def send_jobs(jobs: list[tuple[str, str]]) -> None:
    """One job as its own task; more as one `session_jobs_task`."""
    if len(jobs) == 1:
        name, session_id = jobs[0]
        current_app.tasks[name].delay(session_id)
    else:
        session_jobs_task.delay([list(job) for job in jobs])


BATCHER = JobBatcher(send_jobs, settings.AGENTSITE_JOB_BATCH_S)
atexit.register(BATCHER.flush)


async def enqueue_session_job(task: Any, session_id: str) -> None:
    """Queue the Celery `task(session_id)`: with a broker, into the process's next batch
    (returns at once); eagerly (no broker) it is the job itself, run on a thread of its own
    and awaited, as it must not run on the loop."""
    if current_app.conf.task_always_eager or BATCHER.window_s <= 0:
        await asyncio.get_running_loop().run_in_executor(_ENQUEUE, task.delay, session_id)
        return
    BATCHER.add(task.name, session_id)


@shared_task(name="sessions_app.session_jobs_task", acks_late=True)
def session_jobs_task(jobs: list[list[str]]) -> dict[str, Any]:
    """Post-run jobs of several sessions, one after another, each as its own task would run
    (they are idempotent: a batch delivered again runs them again harmlessly). A job that
    fails with an error its task retries is queued alone, to be retried as its task says;
    another failure is logged and the batch goes on."""
    done, retried, failed = 0, 0, 0
    for name, session_id in jobs:
        task = current_app.tasks.get(name)
        if task is None:  # a worker older than the web process that asked: the rest still run
            logger.error("%s(%s): no such task in this worker", name, session_id)
            failed += 1
            continue
        try:
            task.run(session_id)
        except tuple(getattr(task, "autoretry_for", ())) as exc:
            logger.warning("%s(%s) failed (%s); queued alone to be retried", name, session_id, exc)
            task.apply_async(args=[session_id], countdown=RETRY_COUNTDOWN_S)
            retried += 1
        except Exception:
            logger.exception("%s(%s) failed", name, session_id)
            failed += 1
        else:
            done += 1
    return {"done": done, "retried": retried, "failed": failed}
