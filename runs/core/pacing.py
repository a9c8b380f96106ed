"""Pacing the setup of new runs (issue 23): at most so many runs of a runner prepare at once.

A run's setup (loading its session, checking the user's limit, registering it, saving its
user message, then the agent's preparation: memory and recall preloads, skill summaries,
the first request) is CPU and database work in this process. When hundreds of runs start
together, their setups fill the event loop and the database threads, and the runs already
streaming wait behind them: every event they make sits in the loop's queue for as long as
one pass over all that work takes. A `SetupGate` lets `limit` runs set up at once; the
others wait their turn before any of their work starts. A run leaves the gate as soon as
its setup is over: an LLM agent's (`paces_setup`) just before its first model call (a real
model answers after seconds of I/O, which must never hold a place), any other agent's as
its run begins (a remote agent's first event is I/O too); at the latest at its first event
or its end. So the gate bounds the work in progress, never the runs waiting on a model.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runs.core.invocation import Invocation

SETUP_SLOT_SERVICE = "setup_slot"
"""`Invocation.services[SETUP_SLOT_SERVICE]`: the run's `SetupSlot`, released by the agent
before its first model call (`setup_done`)."""

STREAMING: ContextVar[bool] = ContextVar("run_streaming", default=False)
"""Set in a run's task once its setup is over (`setup_done`): what it asks of a queue of work
from then on (its appends, its record saves) delivers events it has made, and a queue may
serve it first (agentsite.threads.DatabaseThreadPool does)."""

DEFAULT_MAX_SETTING_UP = 2
"""Runs of one runner that set up at once (`Runner(max_setting_up=...)`; 0: no limit). A
setup is a chain of database calls with CPU between them: two at once keep a database
thread busy while the other computes, and more only lengthen the loop's queue (bench/stream.py,
200 sockets on one Daphne: p99 ledger-to-socket 4.3 s without a gate, 0.74 s with 8, 0.49 s
with 4, 0.36 s with 2; every round as fast or faster end to end)."""


class SetupSlot:
    """A run's place in the gate; `release` gives it to the next waiting run (once)."""

    def __init__(self, gate: SetupGate | None) -> None:
        self._gate = gate

    @property
    def held(self) -> bool:
        return self._gate is not None

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._leave()


class SetupGate:
    """At most `limit` slots out at once, handed out first come, first served (0: no limit).

    Used on the runner's loop: waiting runs are woken in order as slots come back."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be 0 (none) or more, got {limit!r}")
        self.limit = limit
        self.inside = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Runs waiting for a slot."""
        return sum(1 for waiter in self._waiting if not waiter.done())

    async def enter(self) -> SetupSlot:
        """A slot, once one is free (at once without a limit)."""
        if not self.limit:
            return SetupSlot(None)
        if self.inside < self.limit and not self.waiting:
            self.inside += 1
            return SetupSlot(self)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._leave()  # handed a slot as it was cancelled: the next run takes it
            raise
        return SetupSlot(self)

    def _leave(self) -> None:
        # The slot goes straight to the first waiting run (`inside` stays), so a run that
        # arrives meanwhile cannot take it before the runs that waited.
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.inside -= 1


def setup_done(invocation: Invocation) -> None:
    """The run's setup is over (its first model call is next): its slot goes to the next run,
    and the work the calling task asks for from now on is a streaming run's (`STREAMING`)."""
    STREAMING.set(True)
    slot = invocation.services.get(SETUP_SLOT_SERVICE)
    if isinstance(slot, SetupSlot):
        slot.release()
