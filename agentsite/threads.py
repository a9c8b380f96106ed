"""The process's worker threads for synchronous Django work called from async code.

Each thread keeps its own database connection, so the number of threads is the number of
connections a process can hold. Asyncio's default executor is per event loop: every new
loop (each request of the synchronous test client, each test) would start threads with
connections of their own and PostgreSQL would run out. Two bounded pools instead: one for
ORM calls, one for views that wait on runs (a view waiting on a run must never occupy the
threads the run needs for its own database work).

Work of runs already streaming (`runs.core.pacing.STREAMING`: their appends, their record
saves) is taken before the rest, so that the events a run has made wait behind no new run's
session load (issue 23).
"""

from __future__ import annotations

import queue
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from agentsite.config import read
from runs.core.pacing import STREAMING

T = TypeVar("T")

IDLE_CHECK_S = 1.0
"""A kept connection idle longer than this is checked (one round trip) before a task uses it.
Under load a thread's tasks follow each other within milliseconds, and checking before every
task was a round trip per database call (issue 23)."""


class _Lanes:
    """The pool's work queue: work submitted while `STREAMING` is set first, each lane in
    the order it came. It stands in for ThreadPoolExecutor's queue (put, get, get_nowait);
    `put` runs in the submitter's context, so it reads the mark there."""

    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._first: deque[Any] = deque()
        self._rest: deque[Any] = deque()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._ready:
            # None tells a thread to stop (shutdown): after the work already queued.
            (self._first if item is not None and STREAMING.get() else self._rest).append(item)
            self._ready.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self._ready:
            while not (self._first or self._rest):
                if not block or not self._ready.wait(timeout):
                    raise queue.Empty
            return (self._first or self._rest).popleft()

    def get_nowait(self) -> Any:
        return self.get(block=False)


class KeptConnections:
    """The database connections a thread keeps between its tasks, checked when they may be
    dead: before a task, a connection idle longer than `idle_check_s`, one an error (not a
    constraint's) occurred on, or one whose socket has something to read is flagged for
    Django's health check (`CONN_HEALTH_CHECKS`, one round trip before its next query; a
    failed check closes it and the query runs on a new one).

    An idle connection has nothing to read: a database that drops it (a restart, a
    failover, `pg_terminate_backend`, an idle timeout) sends its farewell and closes the
    socket, which a zero-timeout poll sees without a round trip. A dropped connection is
    thus replaced before the task's query, even one dropped a moment after its last use; a
    connection that just answered costs nothing."""

    def __init__(self, idle_check_s: float = IDLE_CHECK_S) -> None:
        self.idle_check_s = idle_check_s
        self._last_task = threading.local()  # when this thread's last task ended (monotonic)

    def before_task(self) -> None:
        from django.db import connections

        ended: float | None = getattr(self._last_task, "ended", None)
        idle = ended is None or time.monotonic() - ended > self.idle_check_s
        for connection in connections.all(initialized_only=True):
            if idle or connection.errors_occurred or _socket_readable(connection.connection):
                connection.health_check_done = False
                connection.errors_occurred = False

    def after_task(self) -> None:
        self._last_task.ended = time.monotonic()


class DatabaseThreadPool(ThreadPoolExecutor):
    """Worker threads that keep their database connections between tasks (`KeptConnections`:
    Django checks a kept connection at the start of each request, and these threads serve
    none); streaming runs' work first (`_Lanes`)."""

    def __init__(self, max_workers: int, thread_name_prefix: str, *, idle_check_s: float = IDLE_CHECK_S) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._work_queue = _Lanes()  # type: ignore[assignment]  # the same three methods, two lanes
        self.kept = KeptConnections(idle_check_s)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(self._with_checked_connections, fn, *args, **kwargs)

    def _with_checked_connections(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        self.kept.before_task()
        try:
            return fn(*args, **kwargs)
        finally:
            self.kept.after_task()


def _socket_readable(driver_connection: Any) -> bool:
    """Whether the database sent anything on an idle connection (a closed socket reads as
    end of file): what a dropped connection looks like. False for a driver without a
    socket (SQLite) or no open connection."""
    fileno = getattr(driver_connection, "fileno", None)
    if fileno is None:
        return False
    try:
        fd = fileno()
    except Exception:  # a closed driver connection has no socket: the check will tell
        return True
    # poll, not select: a web process with many sockets has descriptors above select's 1024.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


TASK_CONNECTIONS = KeptConnections()
"""The connections of the threads that run Celery tasks (agentsite/celery.py)."""
DB_EXECUTOR = DatabaseThreadPool(read("AGENTSITE_DB_THREADS"), "agentsite-db")
VIEW_EXECUTOR = DatabaseThreadPool(read("AGENTSITE_VIEW_THREADS"), "agentsite-view")
