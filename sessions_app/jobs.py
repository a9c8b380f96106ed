"""Post-run jobs keyed by a session (auto memory, the evolution review): finding the
session's key in a worker, and queueing a job from the run's event loop."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sessions_app import models as orm
from sessions_app.core.session import SessionKey

# Threads of our own for enqueueing. Not the loop's default executor: its threads also run
# `sync_to_async` calls, which bind them to the runner's loop, and an eager job's
# `async_to_sync` on such a thread would run on (and wait for) that loop, hanging once it
# stops. On these threads the job gets an event loop of its own.
_ENQUEUE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="post-run-jobs")


def session_key(session_id: str) -> SessionKey | None:
    """The key of a session by id, or None when it is gone (deleted before its job ran)."""
    row = orm.Session.objects.filter(id=session_id).values("app", "user_id").first()
    if row is None:
        return None
    return SessionKey(app=row["app"], user_id=str(row["user_id"]), session_id=session_id)


async def enqueue_session_job(task: Any, session_id: str) -> None:
    """Queue the Celery `task(session_id)` from a worker thread: with a broker it is a quick
    publish; eagerly (no broker) it is the job itself, which must not run on the loop."""
    await asyncio.get_running_loop().run_in_executor(_ENQUEUE, task.delay, session_id)
