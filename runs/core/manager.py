"""RunManager: every run of a process executes on one event loop, owned by no request.

Under an ASGI server the manager adopts the server's loop (`adopt`), so runs, websocket
consumers and streaming responses share it; elsewhere (a management command, a Celery
task, the test client) it starts a loop of its own in a daemon thread. Synchronous callers
hand work to that loop and wait on a future; async callers on another loop await it. Runs
therefore outlive the request, socket or stream that started them, and `cancel` works
from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from runs.core.records import RunRecord
from runs.core.runner import EventListener, Runner
from sessions_app.core.events import Event

T = TypeVar("T")


class RunManager:
    def __init__(self, runner_factory: Callable[[], Runner]) -> None:
        self._runner_factory = runner_factory
        self._runner: Runner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owns_loop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._on_start: list[Callable[[Runner], Coroutine[Any, Any, None]]] = []

    # -- the loop ---------------------------------------------------------------------------

    def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run on `loop` (the ASGI server's) unless a loop was already chosen."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop, self._owns_loop = loop, False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        _close_loop(loop)

                self._thread = threading.Thread(target=serve, name="agentsite-runs", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop, self._owns_loop = loop, True
            return self._loop

    def on_start(self, hook: Callable[[Runner], Coroutine[Any, Any, None]]) -> None:
        """Run `hook(runner)` on the run loop each time a runner is built (listeners, reapers)."""
        self._on_start.append(hook)

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            loop = self.loop
            if _running_loop() is loop:
                # Building needs no awaiting; hooks are scheduled on this same loop.
                self._runner = self._runner_factory()
                for hook in self._on_start:
                    loop.create_task(hook(self._runner))
            else:
                self._runner = self.submit(self._build()).result()
        return self._runner

    async def _build(self) -> Runner:
        # Built on the run loop so that every asyncio object it creates belongs there.
        runner = self._runner_factory()
        for hook in self._on_start:
            await hook(runner)
        return runner

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the run loop (from any thread but the loop's own)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    # -- calls ----------------------------------------------------------------------------------

    def call(self, func: Callable[[Runner], Awaitable[T]], timeout: float | None = None) -> T:
        """Run `func(runner)` on the run loop and wait for its result (sync callers)."""
        runner = self.runner

        async def invoke() -> T:
            return await func(runner)

        return self.submit(invoke()).result(timeout)

    async def acall(self, func: Callable[[Runner], Awaitable[T]]) -> T:
        """The same for async callers, on the run loop or any other."""
        runner = self.runner
        if _running_loop() is self.loop:
            return await func(runner)

        async def invoke() -> T:
            return await func(runner)

        return await asyncio.wrap_future(self.submit(invoke()))

    def bridge(self) -> tuple[EventListener, AsyncIterator[Event]]:
        """A listener for the run loop and the async iterator it feeds on the caller's loop.

        The iterator ends after the run's last event (the listener's None)."""
        caller = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        def listener(item: Event | None) -> None:
            if _running_loop() is caller:
                queue.put_nowait(item)
            else:
                caller.call_soon_threadsafe(queue.put_nowait, item)

        async def iterate() -> AsyncIterator[Event]:
            while (item := await queue.get()) is not None:
                yield item

        return listener, iterate()

    def wait(self, run_id: str, timeout: float) -> RunRecord | None:
        """Block until the run ends (or `timeout`); the newest record, or None if unknown."""
        return self.call(lambda runner: _wait(runner, run_id, timeout))

    async def await_run(self, run_id: str, wait_s: float) -> RunRecord | None:
        return await self.acall(lambda runner: _wait(runner, run_id, wait_s))

    def cancel(self, run_id: str) -> bool:
        return self.runner.cancel(run_id)

    def reset(self, runner_factory: Callable[[], Runner] | None = None) -> None:
        """Close the current runner and build the next one with `runner_factory` (tests,
        reconfiguration)."""
        self.close()
        if runner_factory is not None:
            self._runner_factory = runner_factory

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every run; stop the loop if it is the manager's own (tests, shutdown)."""
        loop = self._loop
        if loop is None:
            return
        if self._runner is not None and not loop.is_closed() and loop.is_running() and _running_loop() is not loop:
            try:
                self.submit(self._runner.close()).result(timeout)
            except Exception:  # shutting down: a run that will not stop must not block it
                pass
        if self._owns_loop and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout)
        self._loop = None
        self._runner = None
        self._thread = None


async def _wait(runner: Runner, run_id: str, wait_s: float) -> RunRecord | None:
    handle = runner.handle(run_id)
    if handle is not None:
        try:
            return await asyncio.wait_for(handle.wait(), wait_s)
        except TimeoutError:
            return handle.record
    return await runner.status(run_id)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Finish a stopped loop in its own thread, as `asyncio.run` does: cancel what is left,
    then close it. Left open, the garbage collector closes it later on whatever thread it
    runs on, where what was bound to the loop (the Redis channel layer's connections) can
    no longer be released (a coroutine never awaited, unclosed sockets)."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
