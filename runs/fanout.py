"""Runs and the channel layer: event fan-out per session; cancel and steering across processes.

Every emitted event of a run goes to the session's group, so each socket or stream
watching that session (in any process) sees it; events queued together travel as one
message (`items`), which the channel layer serializes once per receiving process, whatever
the number of sockets there. The sockets of the publishing process itself get each event
straight from the sink (`LocalSockets`, issue 23): no Redis round trip, no serialization,
no wait behind the channel layer's receive loop; the layer's copy of a message names its
origin (`PROCESS_ORIGIN`), and those sockets skip it. The message names the run's user, and a socket relays only its own user's (a session id a client chose can change hands when its
session is deleted). A cancel that reaches a process that does not own the run is
broadcast on a control group; the owning process acts on it. A message queued for a run
of another process (SPEC 1.5) goes the same way, with a reply channel: the owner alone
queues it (once: it carries its id) and answers, so the sender learns the outcome (queued,
queue full, run ended). Deleting a session and
revoking a user's credentials reach the sockets through the session's and the user's
groups (`runs/receivers.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, channel_layers, get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from runs.core.records import RunRecord
from runs.core.runner import Runner
from runs.core.steering import QueuedMessage, QueueFullError, RunNotActiveError, SteeringError
from runs.local_sockets import (  # noqa: F401  # re-exported: the fan-out's public names
    DELTA_SAME,
    LOCAL,
    PROCESS_ORIGIN,
    LocalBatch,
    LocalReceiver,
    LocalSockets,
    merge_deltas,
)
from sessions_app.core.events import Event, Message, new_id

logger = logging.getLogger(__name__)

CONTROL_GROUP = "agentsite.runs.control"
EVENT_MESSAGE = "run.event"
CANCEL_MESSAGE = "run.cancel"
STEER_MESSAGE = "run.steer"
STEER_WITHDRAW_MESSAGE = "run.steer.withdraw"
STEER_LIST_MESSAGE = "run.steer.list"
STEER_REPLY_MESSAGE = "run.steer.reply"
STEER_REPLY_S = 2.0
"""How long a process waits for the owner of a run to answer a steering request."""
SESSION_DELETED_MESSAGE = "session.deleted"
REVOKED_MESSAGE = "socket.revoked"
MAX_QUEUED_EVENTS = 10_000
"""Events that may wait per session for the channel layer before the sink drops new ones."""
MAX_BATCH_EVENTS = 500
"""Events per channel-layer message at most (a message stays well under Redis's limits)."""
_GROUP_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,80}$")


def session_group(session_id: str) -> str:
    """The channel-layer group of a session (names are limited to a safe alphabet)."""
    if _GROUP_SAFE.match(session_id):
        return f"session.{session_id}"
    return "session.h" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def user_group(user_id: object) -> str:
    """The channel-layer group of a user's sockets (told when their credentials are revoked)."""
    return f"user.{user_id}"


def token_digest(key: str) -> str:
    """Names a token on the channel layer without putting the token itself there."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class _Publications:
    runs: frozenset[str] = frozenset()
    """Runs publishing here that have not ended (no completion event yet)."""
    recent: tuple[tuple[float, int], ...] = ()
    """(when, seq) of the newest saved events published, oldest first."""
    truncated: bool = False
    """Whether older saved events were published than `recent` holds."""


class Published:
    """What this process's sinks published per session (issue 23): the runs whose events they
    publish that have not ended, and when each of the newest saved events (with a seq) went.

    A socket whose live stream went quiet re-reads the ledger in case the channel layer
    dropped an event. When every run it shows as open is one this process is publishing, and
    every saved event published here that the socket lacks went out less than `in_flight_s`
    ago (still on its way: a saturated process delivers seconds late), the layer has dropped
    nothing it carried as far as anyone can tell yet: `vouches` says so and the socket can
    skip the re-read. Anything else (a run of another process, a session not noted here, an
    event published that long ago and still missing) means re-read. The sink notes each event
    before it can drop it, so a drop shows too, `in_flight_s` after it.

    At most `max_sessions` sessions are kept (least recently published first out), each with
    its `keep` newest saved events; a session no longer kept is not vouched for.
    """

    def __init__(
        self, *, max_sessions: int = 10_000, keep: int = 64, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_sessions = max_sessions
        self.keep = keep
        self.clock = clock
        # Each value is replaced, never changed in place: a socket on another thread reads a
        # whole one.
        self._sessions: OrderedDict[str, _Publications] = OrderedDict()

    def _put(self, session_id: str, value: _Publications) -> None:
        self._sessions[session_id] = value
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    def note(self, session_id: str, run_id: str, event: Event) -> None:
        """`event` of `run_id` is being published on `session_id`'s group."""
        found = self._sessions.get(session_id) or _Publications()
        if event.seq is None and run_id in found.runs and not event.is_runner_completion:
            # A delta of a run already noted changes nothing but the session's recency (issue
            # 23: most of a run's events).
            self._put(session_id, found)
            return
        runs = found.runs - {run_id} if event.is_runner_completion else found.runs | {run_id}
        recent, truncated = found.recent, found.truncated
        if event.seq is not None:
            recent = (*recent, (self.clock(), event.seq))
            if len(recent) > self.keep:
                recent, truncated = recent[-self.keep :], True
        self._put(session_id, _Publications(runs=runs, recent=recent, truncated=truncated))

    def run_here(self, session_id: str, run_id: str) -> None:
        """`run_id` was started on `session_id` by this process's runner: its events will be
        published here (noted before its first, so that its quiet start is vouched for)."""
        found = self._sessions.get(session_id) or _Publications()
        self._put(session_id, replace(found, runs=found.runs | {run_id}))

    def vouches(self, session_id: str, *, last_seq: int, runs: set[str] | frozenset[str], in_flight_s: float) -> bool:
        """Whether a socket that has sent up to `last_seq` and shows `runs` as open has every
        saved event this process published, but those published in the last `in_flight_s`,
        and every one of those runs publishes here."""
        found = self._sessions.get(session_id)
        if found is None or not runs or not runs <= found.runs:
            return False
        missing = [when for when, seq in found.recent if seq > last_seq]
        if found.truncated and found.recent and found.recent[0][1] > last_seq + 1:
            return False  # some it lacks may be older than those kept
        sent_by = self.clock() - in_flight_s
        return all(when > sent_by for when in missing)


PUBLISHED = Published()
"""This process's record of what its sinks published (`Published`)."""


def publishes_here(runner: Runner) -> bool:
    """Whether `runner` publishes its runs' events to the channel layer from this process: only
    then may a socket count a run it started as one `PUBLISHED` can vouch for (a runner built
    without the sink, e.g. in a test or an embedding, leaves its sockets to the ledger)."""
    return any(isinstance(sink, ChannelLayerSink) for sink in runner.sinks)


class ChannelLayerSink:
    """EventSink: publish every emitted event to its session's group, in batches.

    `publish` queues the event and returns; one sender task per session group drains the
    queue, sending everything queued meanwhile as one channel-layer message (`items`, in
    order), so a burst of deltas (a model step's) costs one group send and one receive per
    process instead of one per delta, and the run never waits for Redis. Consecutive text
    deltas of one message in a batch travel merged into one delta: a client renders the
    same text, with fewer frames. A quiet stream still goes out event by event, at once.

    When a send fails (Redis down), the sink stops trying for `pause_s` and drops what comes
    meanwhile: a dead layer must not cost a connection attempt per event. A send that takes
    over `timeout_s` is given up, and the next is tried. At most `max_queued` events wait per
    session (a layer slower than the run drops the excess, logged). After a drop, the
    session's next message names the runs concerned (`gap`), and its sockets relay no more
    of their deltas until their next saved event: the message comes whole rather than with a
    hole. Sockets re-read the ledger when their live stream goes quiet, so a drop costs
    deltas only.
    """

    def __init__(
        self,
        layer: BaseChannelLayer | None = None,
        *,
        pause_s: float = 5.0,
        timeout_s: float = 2.0,
        max_queued: int = MAX_QUEUED_EVENTS,
        max_batch: int = MAX_BATCH_EVENTS,
    ) -> None:
        self._layer = layer
        self.pause_s = pause_s
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        self.max_batch = max_batch
        self._paused_until = 0.0
        self._queued: dict[str, list[tuple[RunRecord, Event]]] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._slow_sends = 0
        self._slow_logged_at = -float("inf")
        self._gaps: dict[str, set[str]] = {}  # group -> runs whose events were dropped since its last message

    @property
    def layer(self) -> BaseChannelLayer | None:
        return self._layer or get_channel_layer()

    async def publish(self, record: RunRecord, event: Event) -> None:
        PUBLISHED.note(record.session_id, record.id, event)
        # This process's sockets first, directly: a saved event reaches them before the run
        # goes on to make the next (issue 23); the channel layer is for the other processes.
        LOCAL.deliver(record, event)
        layer = self.layer
        group = session_group(record.session_id)
        if layer is None:
            return
        if time.monotonic() < self._paused_until:
            self._gaps.setdefault(group, set()).add(record.id)
            return
        queue = self._queued.setdefault(group, [])
        if len(queue) >= self.max_queued:
            self._gaps.setdefault(group, set()).add(record.id)
            logger.warning(
                "session %s: %d live events wait for the channel layer; event %s dropped",
                record.session_id,
                len(queue),
                event.id,
            )
            return
        queue.append((record, event))
        sender = self._senders.get(group)
        loop = asyncio.get_running_loop()
        if sender is None or sender.done() or sender.get_loop() is not loop:
            self._senders[group] = loop.create_task(self._send_queued(group, layer))
            # The sender starts on the next turn of the loop; yielding once starts it now, so
            # the first event of a burst leaves at once and the rest gather behind it.
            await asyncio.sleep(0)

    async def flush(self) -> None:
        """Wait until the events queued so far have been sent (or given up)."""
        loop = asyncio.get_running_loop()
        while senders := [task for task in self._senders.values() if task.get_loop() is loop and not task.done()]:
            await asyncio.gather(*senders, return_exceptions=True)

    async def _send_queued(self, group: str, layer: BaseChannelLayer) -> None:
        me = asyncio.current_task()
        try:
            while queue := self._queued.get(group):
                batch, self._queued[group] = queue[: self.max_batch], queue[self.max_batch :]
                try:
                    async with asyncio.timeout(self.timeout_s):
                        needed = await layer_needed(layer, group, len(LOCAL.receivers(batch[0][0].session_id)))
                except Exception:
                    needed = True  # unknown: the send below tells (and pauses on a dead layer)
                if not needed:
                    # Every listener of the session is a socket of this process, and took these
                    # events from LOCAL: the layer's copies would come back only to be skipped.
                    continue
                for message in batch_messages(batch):
                    if gap := self._gaps.pop(group, None):
                        # Events of these runs were dropped since the last message: sockets
                        # must not stitch their deltas that follow onto the ones before.
                        message["gap"] = sorted(gap)
                    try:
                        async with asyncio.timeout(self.timeout_s):
                            await layer.group_send(group, message)
                    except TimeoutError:
                        # Slow, not necessarily gone (a saturated loop makes any await late):
                        # the next batch tries again; this one may or may not have arrived.
                        self._gaps.setdefault(group, set()).update(run_id for run_id, _ in message["items"])
                        self._slow_sends += 1
                        if (
                            time.monotonic() - self._slow_logged_at >= self.pause_s
                        ):  # one line per pause_s, not per send
                            self._slow_logged_at = time.monotonic()
                            logger.warning(
                                "channel layer: %d sends took over %.0f s (the last to %s); their events "
                                "may be lost live",
                                self._slow_sends,
                                self.timeout_s,
                                group,
                            )
                            self._slow_sends = 0
                    except Exception as exc:
                        self._paused_until = time.monotonic() + self.pause_s
                        for lost_group, lost in [(group, [(r, e) for r, e in batch]), *self._queued.items()]:
                            self._gaps.setdefault(lost_group, set()).update(r.id for r, _ in lost)
                        self._queued.clear()
                        logger.warning(
                            "channel layer unavailable (%s: %s): live events paused for %.0f s; "
                            "sockets fall back to the ledger",
                            type(exc).__name__,
                            exc,
                            self.pause_s,
                        )
                        return
        finally:
            if self._senders.get(group) is me:
                del self._senders[group]
            if not self._queued.get(group):
                self._queued.pop(group, None)


async def layer_needed(layer: BaseChannelLayer, group: str, served_here: int) -> bool:
    """Whether `group` may have a listener that this process's sockets (`served_here` of them
    take the session's events from the sink, LOCAL) do not account for (issue 23).

    A batch whose session is watched only by sockets of this process is not sent: they took
    the events from the sink, and the layer's copy came back only to be decoded and skipped,
    at the cost of serializing the batch and one to four round trips. One read tells, on
    Redis: with publish/subscribe, the group channel's subscribers besides this process's
    own subscription; with the queue layer, the group's live members that are not channels
    of this process (they carry its client prefix). A listener of this process that is not
    such a socket (more members here than sockets) is sent to, as before. A socket of
    another process that joins after the read catches up from the ledger, which holds every
    saved event the read came after (events are appended before they are published), and
    relays no delta of a run that was under way when it joined: nothing is lost that a send
    would have carried. Any other layer: True (sent as before).
    """
    if isinstance(layer, RedisPubSubChannelLayer):
        here = layer._get_layer()  # this event loop's connections and subscriptions
        channel = here._get_group_channel_name(group)
        if len(here.groups.get(channel, ())) > served_here:
            return True
        shard = here._get_shard(channel)
        shard._ensure_redis()
        [(_, subscribers)] = await shard._redis.pubsub_numsub(channel)
        return int(subscribers) > (1 if channel in shard._subscribed_to else 0)
    if isinstance(layer, RedisChannelLayer):
        connection = layer.connection(layer.consistent_hash(group))
        members = await connection.zrangebyscore(layer._group_key(group), int(time.time()) - layer.group_expiry, "+inf")
        prefix = f"specific.{layer.client_prefix}!".encode()
        own = sum(1 for member in members if member.startswith(prefix))
        return own < len(members) or own > served_here
    return True


def batch_messages(batch: Sequence[tuple[RunRecord, Event]]) -> list[dict[str, Any]]:
    """The channel-layer messages for queued events of one session: one message per run of
    consecutive events of one user (a session id can change hands), with adjacent text
    deltas of one message merged."""
    messages: list[dict[str, Any]] = []
    last_plain = False  # whether the last item of messages[-1] is a plain text delta
    for record, event in batch:
        last = messages[-1] if messages else None
        if last is None or last["user_id"] != record.user_id:
            last = {
                "type": EVENT_MESSAGE,
                "session_id": record.session_id,
                "user_id": record.user_id,
                "origin": PROCESS_ORIGIN,
                "items": [],
            }
            messages.append(last)
            last_plain = False
        items: list[list[Any]] = last["items"]
        data = event.to_dict()
        # Each event's dict is checked once, as it comes (issue 23: a delta was checked again
        # as the previous one of the next, field by field).
        plain = _plain_delta(data)
        if plain and last_plain and items[-1][0] == record.id and _same_message(items[-1][1], data):
            items[-1][1]["message"]["content"] += data["message"]["content"]
            continue
        items.append([record.id, data])
        last_plain = plain
    return messages


def _same_message(previous: dict[str, Any], data: dict[str, Any]) -> bool:
    """Whether two plain text deltas (event dicts) are parts of one message's text."""
    return list(map(previous.get, DELTA_SAME)) == list(map(data.get, DELTA_SAME))


_DELTA_MESSAGE_KEYS = frozenset({"role", "content"})


def _plain_delta(data: dict[str, Any]) -> bool:
    message = data.get("message")
    return (
        bool(data.get("partial"))
        and isinstance(message, dict)
        and message.get("role") == "assistant"
        and isinstance(message.get("content"), str)
        and message.keys() <= _DELTA_MESSAGE_KEYS
        and not data.get("state_delta")
        and data.get("error") is None
        and data.get("usage") is None
    )


async def request_cancel(runner: Runner, run_id: str) -> bool:
    """Cancel here if the run is ours; else ask every process. True when cancelled here."""
    if runner.cancel(run_id):
        return True
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(CONTROL_GROUP, {"type": CANCEL_MESSAGE, "run_id": run_id})
    return False


class RunUnreachableError(SteeringError):
    """The run is live in the database but no process answered for it (its owner died or
    the channel layer is down)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is running, but the process that runs it did not answer")
        self.run_id = run_id


async def request_enqueue(
    runner: Runner,
    run_id: str,
    message: str,
    *,
    message_id: str | None = None,
    layer: BaseChannelLayer | None = None,
    timeout_s: float = STEER_REPLY_S,
) -> QueuedMessage:
    """Queue `message` for the run, here if it is ours, else on the process that owns it.

    Raises what `Runner.enqueue_message` raises (on either side), and `RunUnreachableError`
    when no process answered within `timeout_s`."""
    message_id = message_id or new_id()
    if not _elsewhere(runner, run_id):
        return runner.enqueue_message(run_id, message, message_id=message_id)
    reply = await _ask_owner(
        run_id,
        {"type": STEER_MESSAGE, "run_id": run_id, "message": message, "id": message_id},
        layer=layer,
        timeout_s=timeout_s,
    )
    return _queued(reply["queued"])


async def request_withdraw(
    runner: Runner,
    run_id: str,
    *,
    layer: BaseChannelLayer | None = None,
    timeout_s: float = STEER_REPLY_S,
) -> list[QueuedMessage]:
    """Withdraw the run's queued messages, here or on the process that owns it."""
    if not _elsewhere(runner, run_id):
        return runner.cancel_queued(run_id)
    reply = await _ask_owner(
        run_id, {"type": STEER_WITHDRAW_MESSAGE, "run_id": run_id}, layer=layer, timeout_s=timeout_s
    )
    return [_queued(d) for d in reply["dropped"]]


async def request_queued(
    runner: Runner,
    run_id: str,
    *,
    layer: BaseChannelLayer | None = None,
    timeout_s: float = STEER_REPLY_S,
) -> list[QueuedMessage]:
    """The messages queued for the run and not yet taken, here or on the process that owns it."""
    if not _elsewhere(runner, run_id):
        return runner.queued_messages(run_id)
    reply = await _ask_owner(run_id, {"type": STEER_LIST_MESSAGE, "run_id": run_id}, layer=layer, timeout_s=timeout_s)
    return [_queued(d) for d in reply["queued"]]


def _queued(data: dict[str, Any]) -> QueuedMessage:
    return QueuedMessage(
        id=data["id"],
        message=Message(role="user", content=data["message"]),
        queued_at=datetime.fromisoformat(data["queued_at"]),
    )


def _elsewhere(runner: Runner, run_id: str) -> bool:
    """Whether the run may be another process's (it is not one this runner has)."""
    return run_id not in runner.active_run_ids()


async def _ask_owner(
    run_id: str, request: dict[str, Any], *, layer: BaseChannelLayer | None, timeout_s: float
) -> dict[str, Any]:
    """Broadcast a steering request on the control group and wait for the owner's answer."""
    layer = layer or get_channel_layer()
    if layer is None or (
        isinstance(layer, InMemoryChannelLayer) and not getattr(layer, "groups", {}).get(CONTROL_GROUP)
    ):
        # No other process can hear us (no layer; an in-memory one nobody listens on).
        raise RunNotActiveError(run_id)
    channel = await layer.new_channel("runs.steer.reply.")
    await layer.group_send(CONTROL_GROUP, {**request, "reply_to": channel})
    try:
        reply: dict[str, Any] = await asyncio.wait_for(layer.receive(channel), timeout_s)
    except TimeoutError:
        raise RunUnreachableError(run_id) from None
    if reply.get("ok"):
        return reply
    if reply.get("error") == "queue_full":
        raise QueueFullError(run_id, limit=int(reply.get("limit") or 0))
    if reply.get("error") == "not_active":
        raise RunNotActiveError(run_id)
    raise SteeringError(str(reply.get("message") or "the run refused the message"))


async def _answer_steering(runner: Runner, layer: BaseChannelLayer, message: dict[str, Any]) -> None:
    """The owner's side of `request_enqueue` / `request_withdraw` / `request_queued`;
    silent for others' runs."""
    run_id, reply_to = message.get("run_id"), message.get("reply_to")
    if not isinstance(run_id, str) or not isinstance(reply_to, str) or run_id not in runner.active_run_ids():
        return
    reply: dict[str, Any] = {"type": STEER_REPLY_MESSAGE, "ok": True}
    try:
        if message.get("type") == STEER_MESSAGE:
            queued = runner.enqueue_message(run_id, str(message.get("message") or ""), message_id=message.get("id"))
            reply["queued"] = queued.to_dict()
        elif message.get("type") == STEER_LIST_MESSAGE:
            reply["queued"] = [item.to_dict() for item in runner.queued_messages(run_id)]
        else:
            reply["dropped"] = [item.to_dict() for item in runner.cancel_queued(run_id)]
    except QueueFullError as exc:
        reply = {"type": STEER_REPLY_MESSAGE, "ok": False, "error": "queue_full", "limit": exc.limit}
    except RunNotActiveError:
        reply = {"type": STEER_REPLY_MESSAGE, "ok": False, "error": "not_active"}
    except Exception as exc:  # an empty message (UsageError), or a bug: the sender hears why
        reply = {"type": STEER_REPLY_MESSAGE, "ok": False, "error": "invalid", "message": str(exc)}
    try:
        await layer.send(reply_to, reply)
    except Exception:
        logger.warning("run %s: could not answer a steering request", run_id, exc_info=True)


CLEANUP_S = 0.5
"""How long a closing cancel listener waits for the channel layer to forget its channel."""


def _leave_if_cancelled() -> None:
    """Raise the cancel that a library swallowed. Python 3.11's `asyncio.wait_for` (used by
    redis-py under the Redis layer's subscribe) loses a cancel that lands as its inner call
    finishes; the listener then went on to wait for messages forever, and closing its loop
    waited for it forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def listen_for_cancels(runner: Runner, *, layer: BaseChannelLayer | None = None) -> None:
    """Act on cancels and steering requests broadcast by other processes, for as long as
    the runner lives.

    It listens on a layer instance of its own: a channel layer lets only one event loop
    receive at a time, and the process's shared instance also serves consumers that may run
    on another loop. The in-memory layer reaches no other process, so there is nothing to
    listen for (a cancel in this process reaches the run directly)."""
    if layer is None:
        shared = get_channel_layer()
        if shared is None or isinstance(shared, InMemoryChannelLayer):
            return
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    channel = await layer.new_channel("runs.control.")
    await layer.group_add(CONTROL_GROUP, channel)
    while True:
        _leave_if_cancelled()
        receiving = asyncio.ensure_future(layer.receive(channel))
        try:
            message: dict[str, Any] = await asyncio.shield(receiving)
        except asyncio.CancelledError:
            # Leaving (the runner closes). The Redis layer unsubscribes inside `receive` when
            # it is cancelled, and that can hang; shutdown waits for the clean-up at most
            # CLEANUP_S, then leaves the subscription to expire with the connection.
            receiving.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(receiving, return_exceptions=True), CLEANUP_S)
            # Made only now: made beside the first, a second cancel during the first clean-up
            # left it a coroutine never awaited.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(layer.group_discard(CONTROL_GROUP, channel), CLEANUP_S)
            raise
        if message.get("type") == CANCEL_MESSAGE and isinstance(message.get("run_id"), str):
            if runner.cancel(message["run_id"]):
                logger.info("run %s cancelled on request from another process", message["run_id"])
        elif message.get("type") in (STEER_MESSAGE, STEER_WITHDRAW_MESSAGE, STEER_LIST_MESSAGE):
            await _answer_steering(runner, layer, message)
