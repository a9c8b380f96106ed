"""The database threads take streaming runs' work first (agentsite/threads.py, issue 23):
work submitted while `runs.core.pacing.STREAMING` is set goes before work queued earlier
without it; each lane keeps its order; shutting down still ends every thread."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future

import pytest

from agentsite.threads import DatabaseThreadPool
from runs.core.pacing import STREAMING

GUARD_S = 10.0  # only against a hang


@pytest.fixture
def pool() -> Iterator[DatabaseThreadPool]:
    pool = DatabaseThreadPool(1, "test-lanes")
    yield pool
    pool.shutdown(wait=True)


def _streaming(pool: DatabaseThreadPool, fn: Callable[[], None]) -> Future[None]:
    """Submit `fn` as a streaming run's task does (the mark set in its context)."""

    def submit() -> Future[None]:
        STREAMING.set(True)
        return pool.submit(fn)

    return contextvars.copy_context().run(submit)


def _occupied(pool: DatabaseThreadPool) -> threading.Event:
    """Keep the pool's one thread busy until the returned event is set."""
    go, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        go.wait(GUARD_S)

    pool.submit(hold)
    assert started.wait(GUARD_S)
    return go


def test_a_streaming_runs_work_goes_before_work_queued_earlier(pool: DatabaseThreadPool) -> None:
    go = _occupied(pool)
    order: list[str] = []
    queued = [pool.submit(order.append, name) for name in ("setup 1", "setup 2")]
    queued += [_streaming(pool, lambda name=name: order.append(name)) for name in ("append 1", "append 2")]
    queued.append(pool.submit(order.append, "setup 3"))
    go.set()
    for future in queued:
        future.result(GUARD_S)
    assert order == ["append 1", "append 2", "setup 1", "setup 2", "setup 3"]


def test_without_the_mark_work_runs_in_the_order_it_came(pool: DatabaseThreadPool) -> None:
    go = _occupied(pool)
    order: list[int] = []
    queued = [pool.submit(order.append, n) for n in range(5)]
    go.set()
    for future in queued:
        future.result(GUARD_S)
    assert order == [0, 1, 2, 3, 4]


def test_shutdown_cancels_what_waits_in_either_lane() -> None:
    pool = DatabaseThreadPool(1, "test-lanes")
    go = _occupied(pool)
    waiting = [pool.submit(lambda: None), _streaming(pool, lambda: None)]
    go.set()
    pool.shutdown(wait=True, cancel_futures=True)
    for future in waiting:
        try:
            future.result(GUARD_S)
        except CancelledError:
            pass
    assert all(future.done() for future in waiting)
    assert not any(thread.is_alive() for thread in pool._threads)
