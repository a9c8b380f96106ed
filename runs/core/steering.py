"""The steering queue (SPEC 1.5): messages a user sends into a run that is still going.

A run owns one `SteeringQueue` from its start. `Runner.enqueue_message` puts a message on
it (from any thread); the LLM flow takes the queued messages at the top of each model step
(`consume_queued`), never inside a tool round, and each becomes a user event of the run,
marked `extensions[QUEUED] == CONSUMED`, persisted before the step's request is built, and
the invocation's current message. When the run ends, the queue closes: after a cancel what
is still queued is dropped (and reported on the completion event); otherwise it starts the
next run of the session, in order, so nothing the user typed is lost.

Every message leaves the queue exactly once, under the queue's lock: consumed by the flow,
withdrawn by `Runner.cancel_queued`, carried into the next run, or dropped by a cancel.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from runs.core.errors import UsageError
from runs.core.invocation import Invocation
from sessions_app.core.events import Event, Message, new_id, utcnow

STEERING_SERVICE = "steering"
"""`Invocation.services[STEERING_SERVICE]`: the run's `SteeringQueue` (absent: no steering)."""

QueuedState = Literal["consumed", "carried"]

QUEUED = "queued"
"""Extension key on a user event that came through the steering queue; its value says how."""
CONSUMED: QueuedState = "consumed"
"""Taken by the LLM flow before a model step of the run it was sent to."""
CARRIED: QueuedState = "carried"
"""Still queued when its run ended: it opened the next run of the session."""
QUEUED_ID = "queued_id"
"""Extension key: the id `enqueue_message` answered with, so a client can match the event."""
DROPPED = "queued_dropped"
"""Extension key on a cancelled run's completion event: the messages the cancel dropped."""
CARRIED_IDS = "queued_carried"
"""Extension key on a run's completion event: the queued ids that open the next run."""

DEFAULT_MAX_QUEUED = 20
"""Messages one run may hold queued at once (a client flooding a run is refused)."""


class SteeringError(UsageError):
    """A message could not be queued, or queued ones withdrawn."""


class RunNotActiveError(SteeringError):
    """The run is not going in this process (unknown, ended, cancelled or ending)."""

    error_code = "run_not_active"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is not running here")
        self.run_id = run_id
        self.params = {"run": repr(run_id)}


class QueueFullError(SteeringError):
    """The run already holds as many queued messages as the limit allows."""

    error_code = "queue_full"

    def __init__(self, run_id: str, *, limit: int) -> None:
        super().__init__(f"run {run_id!r} already has {limit} queued messages; the limit is {limit}")
        self.run_id = run_id
        self.limit = limit
        self.params = {"run": repr(run_id), "limit": limit}


@dataclass(frozen=True, kw_only=True)
class QueuedMessage:
    """A message waiting for its run's next model step."""

    id: str
    message: Message
    queued_at: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "message": self.message.content, "queued_at": self.queued_at.isoformat()}


class SteeringQueue:
    """The queued messages of one run, in the order they came. Thread-safe: web requests
    and the run's loop reach it from different threads."""

    def __init__(self, *, run_id: str, limit: int = DEFAULT_MAX_QUEUED) -> None:
        if limit < 1:
            raise ValueError(f"the queue limit must be at least 1, got {limit!r}")
        self.run_id = run_id
        self.limit = limit
        self._lock = threading.Lock()
        self._items: list[QueuedMessage] = []
        self._seen: dict[str, QueuedMessage] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self) -> list[QueuedMessage]:
        with self._lock:
            return list(self._items)

    def put(self, message: Message, *, message_id: str | None = None) -> QueuedMessage:
        """Queue `message`; the same `message_id` twice queues it once (a broadcast that
        reaches this process twice, a client retrying) and answers the first."""
        with self._lock:
            if message_id is not None and message_id in self._seen:
                return self._seen[message_id]
            if self._closed:
                raise RunNotActiveError(self.run_id)
            if len(self._items) >= self.limit:
                raise QueueFullError(self.run_id, limit=self.limit)
            item = QueuedMessage(id=message_id or new_id(), message=message)
            self._items.append(item)
            self._seen[item.id] = item
            return item

    def take(self) -> QueuedMessage | None:
        """The oldest queued message, removed; None when none is queued or the queue closed."""
        with self._lock:
            if self._closed or not self._items:
                return None
            return self._items.pop(0)

    def withdraw(self) -> list[QueuedMessage]:
        """Remove every queued message (the user took them back); the queue stays open."""
        with self._lock:
            items, self._items = self._items, []
            return items

    def close(self) -> list[QueuedMessage]:
        """Close for good; the messages still queued, which nobody else will take."""
        with self._lock:
            self._closed = True
            items, self._items = self._items, []
            return items


def queued_user_event(item: QueuedMessage, *, state: QueuedState) -> Event:
    """The ledger event of a queued message, marked with how it entered its run."""
    return Event(author="user", message=item.message, extensions={QUEUED: state, QUEUED_ID: item.id})


async def consume_queued(invocation: Invocation) -> AsyncIterator[Event]:
    """The LLM flow's hook before each model step (SPEC 1.5): yield each queued message as
    a user event and make it the invocation's current message.

    One at a time: the runner persists a yielded event before it resumes this generator, so
    each is in the ledger before the next is taken, and a cancel that lands meanwhile (it
    closes the queue) leaves the rest to be reported as dropped, never consumed."""
    queue = invocation.services.get(STEERING_SERVICE)
    if not isinstance(queue, SteeringQueue):
        return
    while not invocation.cancel_event.is_set() and (item := queue.take()) is not None:
        invocation.message = item.message
        yield invocation.stamp(queued_user_event(item, state=CONSUMED))
