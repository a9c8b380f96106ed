"""The session websocket's catch-up and replay path (runs/surfaces/websocket/consumers.py): the ledger after the
last seq sent, in order and in pages, and each live event relayed in its place among them
(docs/websocket.md, "Order and completeness" and "Back-pressure" in runs/surfaces/websocket/consumers.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime
from typing import Any

from ag_ui.core import EventType
from channels.generic.websocket import AsyncWebsocketConsumer

from runs import models as run_orm
from runs.core.protocols.agui import AguiTranslator
from runs.core.steering import DROPPED, QUEUED, QUEUED_ID
from runs.surfaces.websocket.backpressure import SendWindow
from runs.surfaces.websocket.frames import SHARED
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Event

logger = logging.getLogger(__name__)

REPLAY_PAGE = 500
MIN_REPLAY_PAGE = 20
_RUN_END = (EventType.RUN_FINISHED, EventType.RUN_ERROR)


# -- database reads (each in a worker thread) ------------------------------------------------


@db_call
def _events_after(session_id: str, after_seq: int, limit: int) -> list[Event]:
    return session_selectors.events_after(session_id=session_id, after_seq=after_seq, limit=limit)


@db_call
def _runs_by_request(session_id: str) -> dict[str, str]:
    return dict(run_orm.Run.objects.filter(session_id=session_id).values_list("request_id", "id"))


class LedgerReplay(AsyncWebsocketConsumer):
    """Send the ledger after the last seq sent, and relay live events in their place in it."""

    session_id: str
    window: SendWindow | None
    translator: AguiTranslator
    last_seq: int
    replay_page: int
    runs_by_request: dict[str, str]
    translated_runs: set[str]
    joined_mid_run: set[str]
    open_runs: set[str]
    relay_lock: asyncio.Lock
    resuming: asyncio.Task[None] | None

    # -- relaying ---------------------------------------------------------------------------

    async def _catch_up(self, *, until_seq: int | None = None, until: datetime | None = None) -> None:
        """Send the ledger events after the last seq sent, in seq order: all of them, or the
        contiguous run of them up to `until_seq` / created no later than `until`.

        The bounds keep the ledger from overtaking the live queue (the run goes on while we
        read), so a message still streaming arrives as its deltas, not whole.
        """
        while True:
            size = self.replay_page
            page = await _events_after(self.session_id, self.last_seq, size)
            for sent, event in enumerate(page):
                if (until_seq is not None and (event.seq or 0) > until_seq) or (
                    until is not None and event.created_at > until
                ):
                    return
                if self._behind():
                    # The client is not reading: the rest waits for `_resume_sending`, which
                    # reads a page about as long as the client took this time.
                    self.replay_page = min(REPLAY_PAGE, max(MIN_REPLAY_PAGE, 2 * sent))
                    return
                await self._send_event(event, await self._run_id(event))
                self.last_seq = max(self.last_seq, event.seq or 0)
            if len(page) < size:
                return
            self.replay_page = min(REPLAY_PAGE, 2 * size)

    async def _send_saved(self, events: list[Event], run_id: str, *, until: datetime) -> None:
        """Send `events`, saved just now on this socket's session by a run it started, as
        they are when they are the next seqs the socket lacks (issue 23: no ledger read for
        a run's user message); otherwise catch up from the ledger up to `until`."""
        first = self.last_seq + 1
        if not events or self._behind() or [e.seq for e in events] != list(range(first, first + len(events))):
            await self._catch_up(until=until)
            return
        for event in events:
            if self._behind():
                return  # the rest comes from the ledger when the client reads again
            await self._send_event(event, run_id)
            self.last_seq = event.seq or self.last_seq

    async def _run_id(self, event: Event) -> str:
        request_id = event.request_id
        if request_id and request_id not in self.runs_by_request:
            self.runs_by_request.update(await _runs_by_request(self.session_id))
        found = self.runs_by_request.get(request_id) if request_id else None
        return found or str(event.extensions.get("run_id") or request_id or event.invocation_id or event.id)

    async def _send_event(self, event: Event, run_id: str) -> None:
        self.translated_runs.add(run_id)
        items = self.translator.translate(event, run_id=run_id)
        for item, text in zip(items, SHARED.render(event, items), strict=True):
            if item.type == EventType.RUN_STARTED:
                self.open_runs.add(run_id)
            elif item.type in _RUN_END:
                self.open_runs.discard(run_id)
            await self.send(text_data=text)
        # Steering (SPEC 1.5): where each queued message went, for a client that showed it
        # as queued.
        if event.extensions.get(QUEUED) and event.extensions.get(QUEUED_ID):
            await self.send(
                text_data=json.dumps(
                    {
                        "type": "message.consumed",
                        "run_id": run_id,
                        "id": event.extensions[QUEUED_ID],
                        "messageId": event.id,
                        "state": event.extensions[QUEUED],
                    }
                )
            )
        elif event.is_runner_completion and event.extensions.get(DROPPED):
            await self.send(
                text_data=json.dumps(
                    {
                        "type": "message.dropped",
                        "run_id": run_id,
                        "ids": [item.get("id") for item in event.extensions[DROPPED] if isinstance(item, dict)],
                    }
                )
            )

    def _behind(self) -> bool:
        """Whether the client has stopped reading (the send window is closed)."""
        return self.window is not None and not self.window.open

    def _skip(self, items: list[list[Any]]) -> None:
        """Drop live events while the client is behind: the ledger brings the saved ones
        back on resume; the runs whose deltas are dropped stream no more deltas until their
        next saved event (their message then comes whole, as for a socket that joined
        mid-run)."""
        for run_id, data in items:
            if data.get("partial") and run_id:
                self.joined_mid_run.add(str(run_id))

    def _resume_sending(self) -> None:
        """The client has read everything sent (Twisted resumed the window): catch up."""
        if getattr(self, "client_gone", False) or (self.resuming is not None and not self.resuming.done()):
            return
        self.resuming = asyncio.get_running_loop().create_task(self._catch_up_after_pause())

    async def _catch_up_after_pause(self) -> None:
        try:
            async with self.relay_lock:
                await self._catch_up()
        except Exception:  # the ledger watch tries again; the socket stays up
            logger.warning("catch-up of session %s after a pause failed", self.session_id, exc_info=True)

    async def _relay(self, event: Event, run_id: str) -> None:
        if event.request_id and run_id:
            self.runs_by_request[event.request_id] = run_id
        run_id = run_id or await self._run_id(event)
        if event.seq is not None:
            self.joined_mid_run.discard(run_id)
            if event.seq > self.last_seq + 1:
                # seqs we never get live: a user message, tool results a client sent in
                await self._catch_up(until_seq=event.seq - 1)
            if event.seq <= self.last_seq or self._behind():
                return  # sent already, or after the ones the catch-up left for the resume
            await self._send_event(event, run_id)
            self.last_seq = event.seq
            return
        if event.partial and run_id in self.joined_mid_run:
            return
        if run_id not in self.translated_runs:
            # A new run: its user message is in the ledger, not on the group.
            await self._catch_up(until=event.created_at)
            if self._behind():
                self._skip([[run_id, {"partial": event.partial}]])
                return
        await self._send_event(event, run_id)
