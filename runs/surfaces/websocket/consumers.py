"""The session websocket: `/ws/sessions/<session_id>/` (DESIGN 5).

A socket follows one session: its ledger from `after_seq` on, then everything that happens
on it live, whoever started it. Several sockets on one session see the same stream.

The whole protocol (frames both ways, control frames, close codes) is in docs/websocket.md.

Connecting
    `ws[s]://<host>/ws/sessions/<session_id>/?after_seq=<n>` (`after_seq` defaults to 0).
    Authentication: an API token as `Authorization: Bearer <token>` or `?token=<token>`
    (no `Origin` needed), or the Django session cookie with an `Origin` of this site
    (runs/surfaces/websocket/auth.py; else the handshake is refused with 403). After the handshake the
    socket is closed with 4401 (not authenticated), 4404 (no such session, or someone
    else's: the same answer, as in REST) or 4400 (`after_seq` is not a non-negative
    integer). Later, 4401 when its token is revoked or its user deactivated, and 4404 when
    its session is deleted.

Client frames (JSON text)
    {"type": "run", "message": str, "agent"?: str, "attachments"?: [...]}
        start a run on this session (no agent: the session's, else the default). The
        answer is first `{"type": "run.accepted", "run_id": str}`, then the run's events.
        `attachments` are images and files as on REST's POST /api/runs/ (docs/attachments.md).
    {"type": "cancel", "run_id": str}
        cancel a run of this session; its events end with RUN_FINISHED.
    {"type": "message", "run_id": str, "message": str}
        steer a running run of this session (SPEC 1.5): the message is queued for the run's
        next model step. Answered with `{"type": "message.queued", "run_id", "id",
        "message"}`; later `message.consumed` says where it went (below).
    {"type": "withdraw", "run_id": str}
        withdraw the messages still queued for the run; answered with
        `{"type": "message.withdrawn", "run_id", "ids": [str]}`.
    {"type": "regenerate"} and {"type": "edit", "event_id": str, "message": str}
        redo a turn as REST does (issue 21): answered with `run.accepted` (plus
        `turn_event_id` and `regenerates` or `edit_of`) or an error frame with REST's codes;
        runs/surfaces/websocket/turn_frames.py.
    A bad frame (not JSON, not an object, unknown `type`, missing or empty `message`,
    wrong types, unknown agent or run) is answered with
    `{"type": "error", "error": {"code": str, "message": str, "field"?: str}}` and the
    socket stays open. Codes: malformed_json, invalid_frame, unknown_type, live_unavailable,
    message_too_large, unknown_agent, not_found, run_not_active, too_many_runs, invalid_request,
    queue_full, run_unreachable, internal_error (the server failed; the socket stays open).

Server frames (JSON text)
    One AG-UI event per frame (`ag_ui.core` models, camelCase: `{"type": "RUN_STARTED",
    "threadId", "runId", ...}`), translated by `AguiTranslator` (see
    runs/core/protocols/agui.py for the mapping), plus the control frames above
    (`run.accepted`, `error`, `message.queued`, `message.withdrawn`) and two about queued
    messages, told apart by their lower-case `type`: after the user message a queued one
    became, `{"type": "message.consumed", "run_id", "id", "messageId", "state"}` (`state`
    "consumed": taken by that run; "carried": it opened the next run; `messageId` is the
    TEXT_MESSAGE's), and after a cancelled run's RUN_FINISHED, `{"type": "message.dropped",
    "run_id", "ids": [str]}` for the queued messages the cancel dropped.
    - Each run is framed by RUN_STARTED ... RUN_FINISHED (completed, or cancelled with
      `outcome: {"type": "cancelled"}`) or RUN_ERROR (failed, interrupted).
    - User messages appear as TEXT_MESSAGE_START/CONTENT/END with `role: "user"`
      (messageId = the ledger event id); assistant text streams as
      TEXT_MESSAGE_START/CONTENT.../END (messageId = the message id, the same live and in
      replay); tool calls as TOOL_CALL_START/ARGS/END; tool results as TOOL_CALL_RESULT;
      a running tool's progress as CUSTOM `agentsite.tool.progress` (live only, no seq);
      state changes as STATE_DELTA; model and tool steps as STEP_STARTED/STEP_FINISHED.
    - Every frame derived from a ledger event carries `metadata.seq`; reconnect with
      `?after_seq=<the highest seq received>` to lose nothing and receive nothing twice.
      A message whose deltas were cut off by the disconnect comes back whole under the
      same messageId: render messages by id (upsert), not by arrival.

Order and completeness: the socket joins the session's channel-layer group first (live
events wait in its queue), then replays the ledger after `after_seq`, then relays the live
events: those of this process's runs straight from their sink, in batches shared with the
session's other sockets here (issue 23, `runs.fanout.LOCAL`: no Redis round trip; the
layer's copy, named by its origin, is skipped), those of other processes from the layer;
skipping persisted ones whose seq it already sent and fetching from the ledger any seq it
missed (a user message is persisted but not broadcast). Deltas carry no seq and
pass through; the translator drops a delta of a message already sent whole. While a run
it has shown is open and the live stream has been quiet for `LEDGER_POLL_S`, the socket
re-reads the ledger (less and less often while that finds nothing, down to every
`LEDGER_POLL_MAX_S`): a live message the layer dropped (a full inbox, a Redis blip) costs
deltas, never an event. The re-read is skipped while this process vouches for the stream
(issue 23; `runs.fanout.Published`): every open run it shows publishes here, and every saved
event published here that the socket lacks went out less than `VOUCHED_POLLS` x
`LEDGER_POLL_S` (16 s) ago, so it may still be on its way (a saturated process delivers
seconds late; re-reading then only adds to its load). The trade: an event the layer dropped
from a run of this process is caught up 16 s after it was published, not 2 s after the
stream went quiet. A vouched stream is still re-read after 16 s of quiet, for what no
publication here shows: an event another process appended to a run of this one (a reaper),
or one a run saved without publishing it (a steering message: it shows at the run's next
live event, by its seq, or at that re-read). A run the socket starts has its user message
read at once.
When the layer cannot be joined at all, the socket says so with an error frame
(`live_unavailable`) and follows the ledger every `LEDGER_POLL_S`. A socket closing never
stops a run.

Back-pressure: a client that does not read is not buffered for without bound. Past
`AGENTSITE_WS_SEND_BUFFER_BYTES` unsent (runs/surfaces/websocket/backpressure.py) the socket drops live
events; when its client has read everything sent, it catches up from the ledger and goes live
again (saved events once each, in order; dropped deltas come back as whole messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import autobahn.util
from channels.consumer import get_handler_name
from django.conf import settings

from runs import error_texts
from runs import models as run_orm
from runs.core.protocols.agui import AguiTranslator
from runs.fanout import (
    EVENT_MESSAGE,
    LOCAL,
    MAX_QUEUED_EVENTS,
    PROCESS_ORIGIN,
    PUBLISHED,
    LocalBatch,
    session_group,
    token_digest,
    user_group,
)
from runs.surfaces.websocket import turn_frames
from runs.surfaces.websocket.auth import TOKEN_KEY, credential_holds, still_authorised
from runs.surfaces.websocket.backpressure import SendWindow
from runs.surfaces.websocket.frames import SHARED
from runs.surfaces.websocket.input import FrameError, _error_frame
from runs.surfaces.websocket.replay import MIN_REPLAY_PAGE, REPLAY_PAGE, LedgerReplay
from runs.surfaces.websocket.run_frames import RunFrames
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Event

__all__ = [
    "CLOSE_BAD_REQUEST",
    "CLOSE_NOT_FOUND",
    "CLOSE_UNAUTHENTICATED",
    "LEDGER_POLL_MAX_S",
    "LEDGER_POLL_S",
    "MIN_REPLAY_PAGE",
    "REPLAY_PAGE",
    "FrameError",
    "SessionConsumer",
]

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
LEDGER_POLL_S = 2.0
LEDGER_POLL_MAX_S = 16.0
VOUCHED_POLLS = 8
"""A stream this process vouches for is re-read after this many `LEDGER_POLL_S` of quiet."""
CREDENTIAL_CHECK_S = 5.0
"""How long a check of the socket's credential holds for its client frames. A revoke or a
deactivation through the ORM (the admin, the API) closes the socket at once (the user
group's `socket.revoked`); one that sent no signal (a bulk update, SQL) is honoured at the
first frame past this long after the last check. A socket that could not join its user
group checks on every frame. (Issue 23: a check per frame was a statement per run.)"""
_LIVE = ("queued", "running")

# Every websocket write under Daphne (autobahn's `sendData`) builds the arguments of a debug
# line, logged or not: with click installed (Celery needs it) that styles three strings with
# click per frame, about 5 us of CPU each write, 36 frames a run (issue 23). Plain strings:
# the same debug line when it is logged, without its colours.
autobahn.util._HAS_CLICK = False


# -- database reads (each in a worker thread) ------------------------------------------------


@db_call
def _session_owner(session_id: str) -> int | None:
    return session_selectors.session_owner_id(session_id=session_id)


@dataclass(frozen=True)
class _Joined:
    """What a socket reads once it has joined its groups."""

    owned: bool
    authorised: bool
    runs: dict[str, str] = field(default_factory=dict)
    """request id -> run id of the session's runs"""
    live: dict[str, str] = field(default_factory=dict)
    """...of those still queued or running"""
    resumed: set[str] = field(default_factory=set)
    """Request ids of runs the client saw start (at or before its `after_seq`): they get no
    second RUN_STARTED."""


@db_call
def _joined(session_id: str, user_id: Any, token: str | None, after_seq: int) -> _Joined:
    """The reads of a socket that has just joined, in one trip to the database threads
    (issue 23: as five trips, each queued behind every other socket's and run's under load,
    they held the client's first frame for seconds): the owner and the credential again,
    the session's runs, and the runs the client saw start."""
    if session_selectors.session_owner_id(session_id=session_id) != user_id:
        return _Joined(owned=False, authorised=False)
    if not credential_holds(user_id, token):
        return _Joined(owned=True, authorised=False)
    rows = list(run_orm.Run.objects.filter(session_id=session_id).values_list("request_id", "id", "status"))
    runs = {request_id: run_id for request_id, run_id, _status in rows}
    live = {request_id: run_id for request_id, run_id, status in rows if status in _LIVE}
    resumed: set[str] = set()
    if after_seq > 0:
        resumed = session_selectors.requests_spanning(session_id=session_id, after_seq=after_seq)
        first = session_selectors.requests_first_seq(session_id=session_id, request_ids=list(live))
        resumed.update(request for request, seq in first.items() if seq <= after_seq)
    return _Joined(owned=True, authorised=True, runs=runs, live=live, resumed=resumed)


class SessionConsumer(RunFrames, LedgerReplay):
    """Authorise, join the session's group, replay the ledger, relay live events."""

    session_id: str
    group: str | None = None
    user_group: str | None = None
    user: Any = None
    token: str | None = None
    authorised_at = float("-inf")
    """When the credential was last found to hold (`time.monotonic()`)."""
    window: SendWindow | None = None

    # -- connection --------------------------------------------------------------------------

    async def connect(self) -> None:
        self.session_id = str(self.scope["url_route"]["kwargs"]["session_id"])
        self.user = self.scope.get("user")
        self.token = self.scope.get(TOKEN_KEY)
        self.language = error_texts.socket_language(self.scope)  # LocaleMiddleware's rule
        self.translator = AguiTranslator(thread_id=self.session_id, include_user_messages=True)
        self.last_seq = 0
        self.replay_page = REPLAY_PAGE
        self.runs_by_request: dict[str, str] = {}
        self.translated_runs: set[str] = set()
        self.joined_mid_run: set[str] = set()
        self.open_runs: set[str] = set()
        self.relay_lock = asyncio.Lock()
        self.last_live_at = time.monotonic()
        self.ledger_watch: asyncio.Task[None] | None = None
        self.resuming: asyncio.Task[None] | None = None
        self.live_down = False
        # Events this process published on the session, taken straight from its sink
        # (issue 23: runs.fanout.LOCAL), waiting for `_drain_local`; relayed only once the
        # socket has caught up (`live_ready`), as a channel-layer message waits in its queue.
        self.loop = asyncio.get_running_loop()
        self.inbox: deque[LocalBatch] = deque()
        self.inbox_overflow = False
        self.draining: asyncio.Task[None] | None = None
        self.live_ready = False
        # Accept first: a close code only reaches the client after the handshake.
        await self.accept()
        # Back-pressure (issue 23): past this many unsent bytes the socket stops taking live
        # events and, once its client has read what was sent, catches up from the ledger.
        self.window = SendWindow.attach(
            self.base_send,
            limit_bytes=settings.AGENTSITE_WS_SEND_BUFFER_BYTES,
            on_resume=self._resume_sending,
        )
        if self.user is None or not self.user.is_authenticated:
            await self._end(CLOSE_UNAUTHENTICATED)
            return
        after_seq = self._after_seq()
        if after_seq is None:
            await self._end(CLOSE_BAD_REQUEST)
            return
        if await _session_owner(self.session_id) != self.user.pk:
            # Someone else's session answers as one that does not exist (REST does the same).
            await self._end(CLOSE_NOT_FOUND)
            return
        # Join first, so nothing emitted from now on is missed; it waits in our queue
        # while the ledger is replayed (Channels hands us one message at a time).
        self.group = session_group(self.session_id)
        LOCAL.add(self.session_id, self)  # this process's runs on the session: straight from their sink
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
            # Told when the user's token is revoked or the user deactivated (runs/receivers.py).
            self.user_group = user_group(self.user.pk)
            await self.channel_layer.group_add(self.user_group, self.channel_name)
        except Exception as exc:  # the layer is down: follow the ledger instead, and say so
            logger.warning("session %s: channel layer unavailable (%s); following the ledger", self.session_id, exc)
            self.group = None
            self.live_down = True
        # Checked again now that the groups would tell us: a delete or a revoke that came
        # between the first check and the join went to groups we were not in yet.
        joined = await _joined(self.session_id, self.user.pk, self.token, after_seq)
        if not joined.owned:
            await self._end(CLOSE_NOT_FOUND)
            return
        if not joined.authorised:
            await self._end(CLOSE_UNAUTHENTICATED)
            return
        self.authorised_at = time.monotonic()
        if self.live_down:
            await self.send(
                text_data=json.dumps(
                    _error_frame(
                        "live_unavailable",
                        "live updates are unavailable; this socket follows the saved events instead",
                    )
                )
            )
        self.runs_by_request = joined.runs
        # Deltas already streamed before we joined are lost to us: of a run in progress,
        # relay no delta until its next persisted event; its message then comes whole.
        self.joined_mid_run = set(joined.live.values())
        self.open_runs.update(joined.live.values())
        for request_id in joined.resumed:
            self.translator.resume_run(self.runs_by_request.get(request_id, request_id))
        self.last_seq = after_seq
        async with self.relay_lock:
            await self._catch_up()
        self.live_ready = True
        self._start_draining()
        self.ledger_watch = asyncio.create_task(self._watch_ledger())

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False) -> None:
        """A frame to the client. Once the client has gone (its disconnect may still be on
        its way to this consumer), frames are dropped, not raised: everything is in the
        ledger, and a new socket catches up from its last seq."""
        if getattr(self, "client_gone", False):
            return
        if text_data is not None:  # an error frame's message in the socket's language (issue 21)
            text_data = error_texts.localize_frame_text(text_data, getattr(self, "language", None))
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
            if self.window is not None and not self.window.open:
                self.window.note_unsent()  # the frames that finish an event after the pause
        except Exception as exc:  # the server's "send on a closed protocol", whatever its class
            self.client_gone = True
            logger.info(
                "socket of session %s closed under a send (%s): later frames dropped",
                getattr(self, "session_id", "?"),
                type(exc).__name__,
            )

    async def disconnect(self, code: int) -> None:
        self.client_gone = True
        if hasattr(self, "inbox"):
            LOCAL.discard(self.session_id, self)
            self.inbox.clear()
        for name in ("ledger_watch", "resuming", "draining"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                setattr(self, name, None)
        if self.window is not None:
            self.window.close()
            if self.window.pauses:
                logger.info(
                    "socket of session %s: its client fell behind %d times; at most %d bytes waited unsent (bound %d)",
                    self.session_id,
                    self.window.pauses,
                    self.window.peak_bytes,
                    self.window.limit_bytes,
                )
        for group in (self.group, self.user_group):
            if group is not None:
                with contextlib.suppress(Exception):  # the layer may be down; its groups expire
                    await self.channel_layer.group_discard(group, self.channel_name)
        self.group = self.user_group = None

    def _after_seq(self) -> int | None:
        query = parse_qs((self.scope.get("query_string") or b"").decode("latin-1"))
        raw = (query.get("after_seq") or ["0"])[-1]
        try:
            value = int(raw)
        except ValueError:
            return None
        return value if value >= 0 else None

    async def _watch_ledger(self) -> None:
        """Re-read the ledger while a run is open and nothing has come live for a while.

        A re-read that finds nothing new doubles the quiet time before the next, up to
        `LEDGER_POLL_MAX_S` (a busy server makes every run slow: polling each socket every
        2 s then only adds to its load); anything live, or found, resets it."""
        wait_s, polled_at = LEDGER_POLL_S, 0.0
        while True:
            await asyncio.sleep(LEDGER_POLL_S)
            if self.last_live_at > polled_at:
                wait_s = LEDGER_POLL_S  # live again since the last re-read: the normal pace
            quiet_s = time.monotonic() - max(self.last_live_at, polled_at)
            if not (self.live_down or (self.open_runs and quiet_s >= wait_s)):
                continue
            vouched_s = VOUCHED_POLLS * LEDGER_POLL_S
            if (
                not self.live_down
                and quiet_s < vouched_s
                and PUBLISHED.vouches(
                    self.session_id, last_seq=self.last_seq, runs=self.open_runs, in_flight_s=vouched_s
                )
            ):
                continue  # nothing was missed yet: the runs are quiet or late, not lost (issue 23)
            before = self.last_seq
            try:
                async with self.relay_lock:
                    await self._catch_up()
            except Exception:  # the next round tries again; the socket stays up
                logger.warning("ledger catch-up of session %s failed", self.session_id, exc_info=True)
            polled_at = time.monotonic()
            wait_s = LEDGER_POLL_S if self.last_seq > before else min(LEDGER_POLL_MAX_S, 2 * wait_s)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels closes stale database connections before every handler, a hop to its
        thread-sensitive thread each time (a socket's connect, each frame, each live event).
        This consumer never queries on that thread: its reads, and the runs it starts, go
        to the database pool, whose threads check their own connections
        (`agentsite.threads`). So no handler pays for the hop (issue 23)."""
        if message.get("type") == EVENT_MESSAGE:
            if message.get("origin") == PROCESS_ORIGIN:
                return  # published by this process: the socket took it from the sink (LOCAL)
            await self.run_event(message)
            return
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message.get('type')!r}")
        await handler(message)

    async def run_event(self, message: dict[str, Any]) -> None:
        """Live events of other processes from the session's group (`runs.fanout`): `items`
        of [run id, event]."""
        items: list[list[Any]] = message.get("items") or []
        await self._relay_live(
            str(message.get("user_id")),
            [(str(run_id or ""), SHARED.event(data)) for run_id, data in items],
            gap=[str(run_id) for run_id in message.get("gap") or ()],
        )

    async def _relay_live(self, user_id: str, items: list[tuple[str, Event]], *, gap: list[str]) -> None:
        """Relay live events (of one user's runs), in order, unless the client is behind."""
        if getattr(self, "client_gone", False):
            return
        if user_id != str(self.user.pk):
            # The session id now names another user's session (a client-chosen id reused
            # after a delete): this socket's session is gone, and so is the socket.
            await self._end(CLOSE_NOT_FOUND)
            return
        self.last_live_at = time.monotonic()
        if gap:
            # Events of these runs were dropped before these: their deltas would leave a hole
            # in a message; from a run's next saved event on, it comes whole.
            self.joined_mid_run.update(gap)
        if self._behind():
            self._skip([[run_id, {"partial": event.partial}] for run_id, event in items])
            return
        async with self.relay_lock:
            for index, (run_id, event) in enumerate(items):
                if self._behind():
                    self._skip([[r, {"partial": e.partial}] for r, e in items[index:]])
                    return
                await self._relay(event, run_id)

    # -- events of this process's runs, straight from the sink (runs.fanout.LOCAL) -------------

    def take(self, batch: LocalBatch) -> None:
        """`LocalReceiver`: events a run of this process published on the session."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._take(batch)
        elif not self.loop.is_closed():  # a run on another loop (the run manager's own thread)
            self.loop.call_soon_threadsafe(self._take, batch)

    def _take(self, batch: LocalBatch) -> None:
        if getattr(self, "client_gone", False):
            return
        if len(self.inbox) >= MAX_QUEUED_EVENTS:
            # This far behind, the socket drops what comes and relays no more deltas of its
            # open runs until their next saved event (a seq gap or the ledger watch brings
            # back the saved ones).
            self.inbox_overflow = True
            return
        self.inbox.append(batch)
        self._start_draining()

    def _start_draining(self) -> None:
        if self.live_ready and self.inbox and (self.draining is None or self.draining.done()):
            self.draining = self.loop.create_task(self._drain_local())

    async def _drain_local(self) -> None:
        """Relay the batches the inbox holds, in order, until it is empty."""
        while self.inbox and not getattr(self, "client_gone", False):
            batch = self.inbox.popleft()
            gap = sorted(self.open_runs) if self.inbox_overflow else []
            self.inbox_overflow = False
            await self._relay_live(batch.user_id, batch.seal(), gap=gap)

    async def session_deleted(self, message: dict[str, Any]) -> None:
        """The session was deleted (`runs.receivers`)."""
        await self._end(CLOSE_NOT_FOUND)

    async def socket_revoked(self, message: dict[str, Any]) -> None:
        """The user's token was revoked (`token` names which) or the user deactivated."""
        revoked = message.get("token")
        if revoked is None or (self.token is not None and revoked == token_digest(self.token)):
            await self._end(CLOSE_UNAUTHENTICATED)

    async def _end(self, code: int) -> None:
        """Close the socket and relay nothing more to it."""
        if getattr(self, "client_gone", False):
            return
        await self.close(code=code)
        self.client_gone = True

    # -- client frames ----------------------------------------------------------------------

    async def _credential_holds(self) -> bool:
        """Whether the socket's credential still holds: checked again once the last check is
        `CREDENTIAL_CHECK_S` old, or on every frame without the user group's revocations."""
        now = time.monotonic()
        told = self.user_group is not None and not self.live_down  # revocations reach this socket
        if told and now - self.authorised_at < CREDENTIAL_CHECK_S:
            return True
        if not await still_authorised(self.user.pk, self.token):
            return False
        self.authorised_at = now
        return True

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if getattr(self, "client_gone", False):
            return
        if not await self._credential_holds():
            # Revoked since the handshake: no frame of this socket is acted on again.
            await self._end(CLOSE_UNAUTHENTICATED)
            return
        try:
            if text_data is None:
                raise FrameError("invalid_frame", "frames must be JSON text, not binary")
            try:
                frame = json.loads(text_data)
            except json.JSONDecodeError as exc:
                raise FrameError("malformed_json", f"the frame is not valid JSON: {exc}") from None
            if not isinstance(frame, dict):
                raise FrameError("invalid_frame", "a frame must be a JSON object")
            kind = frame.get("type")
            if not isinstance(kind, str):
                raise FrameError("invalid_frame", "type must be a string", "type")
            if kind == "run":
                # Under the relay lock from the start: the run's first events, taken straight
                # from its sink, wait until run.accepted and its user message have gone.
                async with self.relay_lock:
                    run_id, opening = await self._run(frame)
                    # Its user message is saved, not broadcast: shown now rather than at its
                    # first live event or a re-read (issue 23: the watch skips those for runs
                    # of this process); as the start saved it, without reading it back when
                    # it follows the last seq sent.
                    await self._send_saved(opening, run_id, until=datetime.now(UTC))
            elif kind == "cancel":
                await self._cancel(frame)
            elif kind == "message":
                await self._steer(frame)
            elif kind == "withdraw":
                await self._withdraw(frame)
            elif kind in turn_frames.KINDS:  # regenerate, edit (issue 21): runs/surfaces/websocket/turn_frames.py
                async with self.relay_lock:  # as for `run`: run.accepted before the run's events
                    reply = await turn_frames.answer(kind, frame, user=self.user, session_id=self.session_id)
                    if reply["type"] == "run.accepted":
                        self.open_runs.add(reply["run_id"])  # as for `run`: open before its first event
                    await self.send(text_data=json.dumps(reply))
            else:
                raise FrameError(
                    "unknown_type",
                    f"unknown frame type {kind!r}; expected 'run', 'cancel', 'message', 'withdraw', 'regenerate' or 'edit'",
                    "type",
                )
        except FrameError as exc:
            await self.send(text_data=json.dumps(exc.frame))
        except Exception:
            # A bug or an outage must not close the socket (1011): the client hears of it.
            logger.exception("session %s: a client frame failed", self.session_id)
            await self.send(
                text_data=json.dumps(
                    _error_frame(
                        "internal_error",
                        "the server could not handle this frame; the socket stays open",
                    )
                )
            )
