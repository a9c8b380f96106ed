"""The process's worker threads for synchronous Django work called from async code.

Each thread keeps its own database connection, so the number of threads is the number of
connections a process can hold. Asyncio's default executor is per event loop: every new
loop (each request of the synchronous test client, each test) would start threads with
connections of their own and PostgreSQL would run out. Two bounded pools instead: one for
ORM calls, one for views that wait on runs (a view waiting on a run must never occupy the
threads the run needs for its own database work).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from agentsite.config import read

T = TypeVar("T")


class DatabaseThreadPool(ThreadPoolExecutor):
    """Worker threads that keep their database connections between tasks.

    Django checks a kept connection at the start of each request; these threads serve no
    requests, so each task starts with that check instead (`CONN_HEALTH_CHECKS`: one
    round trip before the task's first query). Without it, a connection the database
    dropped meanwhile (a restart, a failover) failed the next task of every thread.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(_with_checked_connections, fn, *args, **kwargs)


def _with_checked_connections(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        connection.health_check_done = False
    return fn(*args, **kwargs)


DB_EXECUTOR = DatabaseThreadPool(max_workers=read("AGENTSITE_DB_THREADS"), thread_name_prefix="agentsite-db")
VIEW_EXECUTOR = DatabaseThreadPool(max_workers=read("AGENTSITE_VIEW_THREADS"), thread_name_prefix="agentsite-view")
