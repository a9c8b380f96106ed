"""RunManager: runs execute on one event loop per process, owned by nobody's request.

A synchronous caller (a DRF view, a management command, a Celery task) or an async one on
another loop hands the work to this loop and gets a future back. Runs therefore outlive
the request, socket or stream that started them, and `cancel` works from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from runs.core.records import RunRecord
from runs.core.runner import Runner

T = TypeVar("T")


class RunManager:
    def __init__(self, runner_factory: Callable[[], Runner]) -> None:
        self._runner_factory = runner_factory
        self._runner: Runner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="agentsite-runs", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = self.submit(self._build()).result()
        return self._runner

    async def _build(self) -> Runner:
        # Built on the run loop so that every asyncio object it creates belongs there.
        return self._runner_factory()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the run loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, func: Callable[[Runner], Awaitable[T]], timeout: float | None = None) -> T:
        """Run `func(runner)` on the run loop and wait for its result (sync callers)."""
        runner = self.runner

        async def invoke() -> T:
            return await func(runner)

        return self.submit(invoke()).result(timeout)

    async def acall(self, func: Callable[[Runner], Awaitable[T]]) -> T:
        """The same for async callers on another loop."""
        runner = self.runner

        async def invoke() -> T:
            return await func(runner)

        return await asyncio.wrap_future(self.submit(invoke()))

    def wait(self, run_id: str, timeout: float) -> RunRecord | None:
        """Block until the run ends (or `timeout`); the newest record, or None if unknown."""

        async def finish(runner: Runner) -> RunRecord | None:
            handle = runner.handle(run_id)
            if handle is not None:
                try:
                    return await asyncio.wait_for(handle.wait(), timeout)
                except TimeoutError:
                    return handle.record
            return await runner.status(run_id)

        return self.call(finish)

    def cancel(self, run_id: str) -> bool:
        return self.runner.cancel(run_id)

    def reset(self, runner_factory: Callable[[], Runner] | None = None) -> None:
        """Close the current runner and build the next one with `runner_factory` (tests,
        reconfiguration)."""
        self.close()
        if runner_factory is not None:
            self._runner_factory = runner_factory

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every run and stop the loop (tests, shutdown)."""
        if self._loop is None:
            return
        if self._runner is not None:
            self.submit(self._runner.close()).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop = None
        self._runner = None
