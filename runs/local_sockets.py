"""This process's sockets per session, fed straight from the run's sink (issue 23).

A run's events reach the sockets of its own process here, before the channel layer carries
them to the other processes (`runs.fanout.ChannelLayerSink`); the layer's copy names its
origin (`PROCESS_ORIGIN`) so these sockets skip it. Split out of `runs/fanout.py`, which
re-exports every name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Protocol

from runs.core.records import RunRecord
from sessions_app.core.events import Event, new_id

logger = logging.getLogger("runs.fanout")

DELTA_SAME = ("object", "extensions", "author", "branch", "invocation_id", "request_id", "filter_key")
"""The fields two text deltas share when they are parts of one message's text."""
_delta_key = attrgetter(*DELTA_SAME)
"""Those fields of an event as one tuple: compared in one step per delta (issue 23)."""


PROCESS_ORIGIN = new_id()
"""Names this process's publications on the channel layer (`origin`): its own sockets had
them from `LOCAL` already."""


class LocalReceiver(Protocol):
    """A socket of this process that takes its session's events straight from the sink."""

    def take(self, batch: LocalBatch) -> None:
        """A new batch of events published on the socket's session (more may join it until
        a socket seals it). Called on the publisher's thread: it must not block, and it
        keeps the order of calls."""


class LocalBatch:
    """Events of one user's runs on a session, published here one after another and handed
    as one to the session's sockets here (issue 23).

    A socket relays a batch whole: the first to relay it seals it, later events go to a new
    batch, and every socket relays the same events with the same deltas merged, so sockets
    of one session show the same frames (as with the layer's batches)."""

    def __init__(self, user_id: str, receivers: tuple[LocalReceiver, ...], lock: threading.RLock) -> None:
        self.user_id = user_id
        self.receivers = receivers
        self._lock = lock
        self._items: list[tuple[str, Event]] = []
        self._sealed: list[tuple[str, Event]] | None = None

    def add(self, run_id: str, event: Event) -> bool:
        """Add `event` of `run_id` unless the batch is sealed (the caller holds the lock)."""
        if self._sealed is not None:
            return False
        self._items.append((run_id, event))
        return True

    def seal(self) -> list[tuple[str, Event]]:
        """The batch's (run id, event) pairs in order, deltas merged; nothing joins it after."""
        with self._lock:
            if self._sealed is None:
                self._sealed, self._items = merge_deltas(self._items), []
            return self._sealed


class LocalSockets:
    """This process's sockets per session: the sink hands every event it publishes to them
    directly (issue 23), on its way to the channel layer for the other processes.

    A socket adds itself when it joins its session's group and discards itself when it
    leaves. `deliver` runs on the publisher's loop, in publication order: an event joins
    the session's open batch, or opens a new one that each socket takes (`LocalBatch`). A
    socket on another thread (a test's loop) seals batches while a run delivers: the lock
    keeps an event from joining a batch already relayed."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a socket may seal a batch as it takes it
        self._sessions: dict[str, tuple[LocalReceiver, ...]] = {}
        self._open: dict[str, LocalBatch] = {}

    def add(self, session_id: str, receiver: LocalReceiver) -> None:
        """`receiver` takes `session_id`'s events from now on."""
        with self._lock:
            found = self._sessions.get(session_id, ())
            if receiver not in found:
                self._sessions[session_id] = (*found, receiver)

    def discard(self, session_id: str, receiver: LocalReceiver) -> None:
        """`receiver` takes no more of `session_id`'s events."""
        with self._lock:
            found = tuple(r for r in self._sessions.get(session_id, ()) if r is not receiver)
            if found:
                self._sessions[session_id] = found
            else:
                self._sessions.pop(session_id, None)
                self._open.pop(session_id, None)

    def receivers(self, session_id: str) -> tuple[LocalReceiver, ...]:
        """The sockets of this process on `session_id`."""
        return self._sessions.get(session_id, ())

    def deliver(self, record: RunRecord, event: Event) -> int:
        """Hand `event` of `record`'s run to the session's sockets here; how many took it."""
        session_id = record.session_id
        with self._lock:
            receivers = self._sessions.get(session_id, ())
            if not receivers:
                return 0
            batch = self._open.get(session_id)
            if (
                batch is not None
                and batch.receivers is receivers  # a socket that came since takes the next batch
                and batch.user_id == record.user_id
                and batch.add(record.id, event)
            ):
                return len(receivers)
            batch = self._open[session_id] = LocalBatch(record.user_id, receivers, self._lock)
            batch.add(record.id, event)
            for receiver in receivers:
                try:
                    receiver.take(batch)
                except Exception:  # one broken socket must not keep the event from the others
                    logger.exception("session %s: a local socket refused an event", session_id)
        return len(receivers)


LOCAL = LocalSockets()
"""This process's sockets per session (`LocalSockets`)."""


def merge_deltas(items: Sequence[tuple[str, Event]]) -> list[tuple[str, Event]]:
    """`items` ((run id, event), in order) with each stretch of plain text deltas of one
    message merged into one delta, as `batch_messages` merges them for the channel layer: a
    client renders the same text, with fewer frames."""
    out: list[tuple[str, Event]] = []
    pieces: list[str] = []  # the texts of the stretch of deltas that out[-1] begins

    def close_stretch() -> None:
        if len(pieces) > 1:
            run_id, first = out[-1]
            assert first.message is not None  # a plain delta
            out[-1] = (run_id, first.replace(message=replace(first.message, content="".join(pieces))))

    for run_id, event in items:
        if not _plain_delta_event(event):
            close_stretch()
            out.append((run_id, event))
            pieces = []
            continue
        assert event.message is not None  # a plain delta
        if pieces and out[-1][0] == run_id and _delta_key(out[-1][1]) == _delta_key(event):
            pieces.append(event.message.content)
            continue
        close_stretch()
        out.append((run_id, event))
        pieces = [event.message.content]
    close_stretch()
    return out


def _plain_delta_event(event: Event) -> bool:
    message = event.message
    return (
        event.partial
        and message is not None
        and message.role == "assistant"
        and not (message.tool_calls or message.tool_call_id is not None or message.tool_name or message.parts)
        and not event.state_delta
        and event.error is None
        and event.usage is None
    )
