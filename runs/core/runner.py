"""The Runner: owns the life of a run (SPEC 1).

`start` does the work that must happen before anything runs, in SPEC 1.2's order, and
raises for a bad request: get or create the session, choose the agent, build the
invocation, register the run (a duplicate request id is refused), persist the user message.
The event loop then runs as its own asyncio task, so a run outlives whoever started it:
each agent event is stamped, repaired, persisted when the rule says so, and only then
emitted. The loop always ends with a persisted and emitted completion event, also after a
cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from runs.core.agents.base import Agent
from runs.core.attachments import store_turn_attachments
from runs.core.callbacks import (
    CALLBACKS_SERVICE,
    CallbackContext,
    Callbacks,
    run_after_run,
    run_before_run,
    run_on_event,
    with_changes,
)
from runs.core.context.seeding import own_tool_names, seeded_events
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, EventLimitError, UsageError
from runs.core.invocation import SPAWN_SERVICE, Invocation, RunOptions
from runs.core.output import OUTPUT_EXTENSION
from runs.core.records import (
    REQUIRES_ACTION,
    InMemoryRunStore,
    JoinableRunCreate,
    JoinableRunStore,
    RunRecord,
    RunStatusName,
    RunStore,
)
from runs.core.rewriting import REWRITTEN, RewriteContext, UserMessageRewriter, normalize_role, rewrite_user_message
from runs.core.routing import resolve_route
from runs.core.steering import (
    CARRIED,
    CARRIED_IDS,
    DEFAULT_MAX_QUEUED,
    DROPPED,
    QUEUED,
    QUEUED_ID,
    STEERING_SERVICE,
    QueuedMessage,
    RunNotActiveError,
    SteeringQueue,
)
from runs.core.steps import take_mark
from runs.core.tools.client import CLIENT_CALLS_EXTENSION
from runs.core.tools.progress import PROGRESS_SINK, ProgressSink, ToolProgress
from runs.core.trace import CompletionCapture, TraceRecorder
from sessions_app.core.events import (
    NO_MODEL_CALL,
    OBJECT_ERROR,
    OBJECT_RUNNER_COMPLETION,
    OBJECT_TOOL_RESPONSE,
    Event,
    EventError,
    Message,
    new_id,
    repair_error,
    should_persist,
    utcnow,
)
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, SessionService, Summary
from sessions_app.core.summary import (
    SummaryGate,
    SummaryJob,
    SummaryScheduler,
    should_enqueue_summary,
    summary_gate,
    tool_round_complete,
)

logger = logging.getLogger(__name__)

# SPEC 1.9: the completion event is persisted and delivered within this budget after a cancel.
COMPLETION_BUDGET_S = 1.0
DEFAULT_HISTORY_EVENT_LIMIT = 400
START_FAILURE_MAX_CHARS = 500
# SPEC 1.10: the extension that marks an assistant answer a cancel cut short.
INTERRUPTED_ASSISTANT = "interrupted_assistant"


class EventSink(Protocol):
    """Receives every emitted event of every run (e.g. the channel-layer fan-out)."""

    async def publish(self, record: RunRecord, event: Event) -> None: ...


EventListener = Callable[[Event | None], None]
"""Called on the run's loop with each emitted event, then once with None when the run ends.

It must not block: hand the event on (a queue, `call_soon_threadsafe`) and return."""

Admission = Callable[[str], Awaitable[None]]
"""Called with the user id before a run of theirs is prepared; raises (e.g. `TooManyRunsError`)
to refuse it. The composition root counts the user's live runs in the database, so the
limit holds across processes."""

PostRunHook = Callable[[RunRecord], Awaitable[None]]
"""Called with the final record once a run's completion is saved (SPEC 1.9 step 6, 1.11:
auto memory, evolution review). It should only enqueue work; failures are logged, never raised."""


@dataclass(kw_only=True)
class RunHandle:
    """A started run: its identity, its live events and its outcome."""

    record: RunRecord
    invocation: Invocation
    agent: Agent | None = None
    task: asyncio.Task[RunRecord] | None = None
    listeners: list[EventListener] = field(default_factory=list, repr=False)
    steering: SteeringQueue | None = field(default=None, repr=False)
    # Queued messages a cancel dropped (reported on the completion event), and those still
    # queued at the end that open the next run (SPEC 1.5).
    _dropped: list[QueuedMessage] = field(default_factory=list, repr=False)
    _carried: list[QueuedMessage] = field(default_factory=list, repr=False)
    _queue: asyncio.Queue[Event | None] | None = field(default=None, repr=False)
    _summary_gate: SummaryGate | None = field(default=None, repr=False)
    # What the completion event says of the run (SPEC 1.6.6) and its execution trace (1.9.3).
    _capture: CompletionCapture = field(default_factory=CompletionCapture, repr=False)
    _trace: TraceRecorder | None = field(default=None, repr=False)
    # SPEC 1.10: streamed assistant text per message id, kept only when the run persists
    # interrupted answers; a message's complete event removes its entry.
    _streamed: dict[str, tuple[Event, list[str]]] | None = field(default=None, repr=False)
    # Issue 20: the client-tool calls of the run's last step (the run pauses for them), and
    # the trace of the segments before a pause this run resumed from.
    _client_calls: list[str] = field(default_factory=list, repr=False)
    _earlier_trace: Mapping[str, Any] | None = field(default=None, repr=False)
    # Issue 18: whether the run's final record was written with its last step.
    _record_joined: bool = field(default=False, repr=False)

    @property
    def run_id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    async def events(self) -> AsyncIterator[Event]:
        """Every emitted event, ending with the completion event. Only when started with
        `stream=True`."""
        if self._queue is None:
            raise UsageError("this run was started without stream=True")
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def wait(self) -> RunRecord:
        """The final record once the run has ended."""
        assert self.task is not None
        return await asyncio.shield(self.task)


@dataclass(kw_only=True)
class _Registered:
    handle: RunHandle
    loop: asyncio.AbstractEventLoop
    cancel_requested: bool = False


class Runner:
    """Holds the agents and the services; runs agents against sessions."""

    def __init__(
        self,
        *,
        app: str,
        agents: Iterable[Agent],
        session_service: SessionService,
        default_agent: str | None = None,
        run_store: RunStore | None = None,
        sinks: Sequence[EventSink] = (),
        services: Mapping[str, Any] | None = None,
        history_event_limit: int = DEFAULT_HISTORY_EVENT_LIMIT,
        owner: str = "",
        summary_scheduler: SummaryScheduler | None = None,
        load_after_summary: bool = False,
        post_run: Sequence[PostRunHook] = (),
        admission: Admission | None = None,
        max_events_per_run: int = 0,
        callbacks: Callbacks | None = None,
        max_queued_messages: int = DEFAULT_MAX_QUEUED,
        user_message_rewriter: UserMessageRewriter | None = None,
        persist_interrupted_assistant: bool = False,
    ) -> None:
        self.app = app
        self.owner = owner
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise ValueError(f"two agents are named {agent.name!r}")
            self.agents[agent.name] = agent
        if not self.agents:
            raise ValueError("a Runner needs at least one agent")
        self.default_agent = default_agent or next(iter(self.agents))
        if self.default_agent not in self.agents:
            raise ValueError(f"default agent {self.default_agent!r} is not among {sorted(self.agents)!r}")
        self.session_service = session_service
        self.run_store: RunStore = run_store or InMemoryRunStore()
        self.sinks = list(sinks)
        # Issue 20, item 4: run-wide extension points; agents run them before their own.
        self.callbacks = callbacks or Callbacks()
        self.services = {**dict(services or {}), SPAWN_SERVICE: self.spawn, CALLBACKS_SERVICE: self.callbacks}
        self.history_event_limit = history_event_limit
        # Context governance: where summary jobs go (SPEC 1.8), and whether a turn loads
        # only the events after the summary boundary instead of the newest window.
        self.summary_scheduler = summary_scheduler
        self.load_after_summary = load_after_summary
        self.post_run = list(post_run)
        self.admission = admission
        # Ledger events one run may write (0: no limit); a looping agent stops, failed.
        self.max_events_per_run = max_events_per_run
        # Messages one run may hold queued for its next model step (SPEC 1.5).
        self.max_queued_messages = max_queued_messages
        # SPEC 1.2 step 8 / 1.4: turns one incoming user message into the current turn.
        self.user_message_rewriter = user_message_rewriter
        # SPEC 1.10: keep a cancelled streaming answer as a marked message (a run's
        # RunOptions.persist_interrupted_assistant overrides it).
        self.persist_interrupted_assistant = persist_interrupted_assistant
        self._active: dict[str, _Registered] = {}
        self._active_requests: set[tuple[str, str]] = set()  # (user id, request id)
        self._starting: set[str] = set()  # run ids registered whose user message is not saved yet
        self._background: set[asyncio.Task[Any]] = set()
        # The steering queue of each run from its registration to its end (also while it
        # starts: a message sent then is taken before the first model step).
        self._steering: dict[str, SteeringQueue] = {}

    # -- public API -----------------------------------------------------------------------

    def agent(self, name: str | None) -> Agent:
        chosen = name or self.default_agent
        try:
            return self.agents[chosen]
        except KeyError:
            raise AgentNotFoundError(chosen) from None

    async def start(
        self,
        *,
        user_id: str,
        message: str | Message | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        request_id: str | None = None,
        options: RunOptions | None = None,
        stream: bool = False,
        listeners: Sequence[EventListener] = (),
        seed: Sequence[Message] = (),
        tool_results: Sequence[Message] = (),
        turn_extensions: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Prepare and launch a run; returns once the user message is in the ledger.

        `tool_results` stands in for the user message when the caller ran tools itself
        (client-side tools, AG-UI): `tool` messages, each answering a call in the session's
        loaded history that has no result yet. They are persisted in order as the current
        turn and the agent continues with them. Pass `message` or `tool_results`.

        Issue 20: when the results answer the client-tool calls a run of this session paused
        for (status `requires_action`), that run continues: same run id, `running` again,
        its request id this request's. Otherwise a new run starts with them.

        Raises `UsageError` (empty message, unknown agent, duplicate request id, a tool
        result that answers no pending call) and `SessionNotFoundError` (a session id that
        belongs to someone else).

        `turn_extensions` go on the user message's ledger event, or on each tool result's
        (the runner marks a queued message that opens the next run with them).
        """
        turn = _current_turn(message, tool_results)
        msg = turn[-1]
        options = options or RunOptions()
        request_id = request_id or new_id()
        if self.admission is not None:
            # Before anything is written: a refused run leaves no session and no message.
            await self.admission(user_id)

        # 1. get or create the session
        session, created = await self._open_session(user_id=user_id, session_id=session_id, agent=agent)
        try:
            if tool_results:
                # Issue 20: a new session's seeded history may hold the calls they answer.
                turn = _answer_pending_calls(session, turn, seed=seed if session.last_seq == 0 else ())
            # 2. choose the agent: a pending await-user-reply route (SPEC 1.2 step 6,
            # runs.core.routing), else the request's, else the session's, else the default
            routed = resolve_route(session.state, self.agents, requested=agent, user_turn=not tool_results)
            chosen = routed.agent or self.agent(agent or session.agent or None)
            options = routed.options(options)
            if self.user_message_rewriter is not None and not tool_results:
                # SPEC 1.2 step 8: the rewritten messages are the current turn; the last
                # is the invocation message.
                turn = await rewrite_user_message(
                    self.user_message_rewriter,
                    RewriteContext(
                        user_id=user_id,
                        session_id=session.id,
                        agent_name=chosen.name,
                        state=dict(session.state),
                    ),
                    msg,
                )
                msg = turn[-1]
                turn_extensions = {**dict(turn_extensions or {}), REWRITTEN: True}
            paused = await self._paused_run(session, turn, agent=chosen.name) if tool_results and not created else None
            run_id = paused.id if paused is not None else new_id()
            steering = SteeringQueue(run_id=run_id, limit=self.max_queued_messages)
            invocation = Invocation(
                invocation_id=new_id(),
                run_id=run_id,
                request_id=request_id,
                app=self.app,
                agent_name=chosen.name,
                branch=chosen.name,
                filter_key=self.app,
                session=session,
                session_service=self.session_service,
                message=msg,
                options=options,
                cancel_event=asyncio.Event(),
                services={**self.services, STEERING_SERVICE: steering},
            )
            # 3. register the run (or claim the paused one); a request id may run once per user.
            # Issue 18: when nothing is written before the user message, the run's row is
            # inserted with it (one commit less); a duplicate request id then fails that write.
            join = paused is None and self._joins_create(session, turn, seed)
            record = await (
                self._resume(invocation, user_id=user_id)
                if paused is not None
                else self._register(invocation, user_id=user_id, agent=chosen.name, defer=join)
            )
            self._steering[record.id] = steering
        except BaseException:
            if created:
                # A refused start leaves no session behind (a duplicate request id, a bad agent).
                await self._drop_session(session)
            raise
        handle = RunHandle(
            record=record,
            invocation=invocation,
            agent=chosen,
            steering=steering,
            _earlier_trace=paused.trace if paused is not None else None,
        )
        handle._trace = TraceRecorder(
            run_id=record.id,
            agent=chosen.name,
            branch=invocation.branch,
            started_at=utcnow() if paused is not None else record.started_at or utcnow(),
        )
        if self._persists_interrupted(options):
            handle._streamed = {}
        try:
            # Uploaded images and files become artifacts of the session first: the ledger
            # references them, never holds their bytes (issue 20, item 3).
            turn = await store_turn_attachments(
                turn, services=self.services, app=self.app, user_id=user_id, session_id=session.id
            )
            invocation.message = turn[-1]
            if seed and session.last_seq == 0:
                seed = await store_turn_attachments(
                    seed, services=self.services, app=self.app, user_id=user_id, session_id=session.id
                )
            # 4. persist the user message before the agent starts (never emitted by the loop);
            # seed history a client sent along goes first, only into an empty session (SPEC 1.4)
            opening: list[Event] = []
            # Issue 20: a new message instead of the results a run of the session paused
            # for ends that run (cancelled), its completion written with this turn.
            abandoned = await self._abandon_paused(session, user_id=user_id, by=record.id) if not tool_results else None
            if abandoned is not None:
                opening.append(abandoned)
            if seed and session.last_seq == 0:
                # as earlier turns of their own, not as part of this run (runs.core.context.seeding)
                opening.extend(
                    seeded_events(
                        seed,
                        agent=chosen.name,
                        branch=invocation.branch,
                        filter_key=invocation.filter_key,
                        own_tools=own_tool_names(chosen) | {t.name for t in options.client_tools},
                    )
                )
            for current in turn:
                # A tool result is authored by the agent whose call it answers (SPEC 1.4).
                turn_event = (
                    Event(
                        author=chosen.name,
                        object=OBJECT_TOOL_RESPONSE,
                        message=current,
                        extensions=dict(turn_extensions or {}),
                    )
                    if current.role == "tool"
                    else Event(
                        author="user" if current.role == "user" else chosen.name,
                        message=current,
                        extensions=dict(turn_extensions or {}),
                    )
                )
                opening.append(invocation.stamp(turn_event))
            if (route_note := routed.note(author=chosen.name)) is not None:
                opening.append(invocation.stamp(route_note))  # the route is consumed or cleared
            # One transaction: a seeded history is in the ledger with its turn or not at all.
            if join:
                create = self.run_store.joined_create(handle.record)  # type: ignore[attr-defined]  # _joins_create checked
                await self.session_service.append_events(session, opening, joined=[create])  # type: ignore[call-arg]  # joins_writes
                join = False  # the row is in
            else:
                await self.session_service.append_events(session, opening)
            # Issue 21: event_count counts the ledger events this run wrote, its turn included.
            written = len(opening) - (1 if abandoned is not None else 0)  # the ended run's completion is its own
            handle.record = handle.record.replace(event_count=handle.record.event_count + written)
        except BaseException as exc:
            if join and not await self._row_after_failed_start(handle, created=created):
                raise
            # The run row exists: end it here, or it stays `running` for good (this process
            # owns it, so no reaper takes it; it holds the thread and a slot of the user's cap).
            await self._end_unstarted(handle, exc)
            raise
        finally:
            self._starting.discard(record.id)
        handle.listeners.extend(listeners)
        if stream:
            queue: asyncio.Queue[Event | None] = asyncio.Queue()
            handle._queue = queue
            handle.listeners.append(queue.put_nowait)
        self._active[record.id] = _Registered(handle=handle, loop=asyncio.get_running_loop())
        handle.task = asyncio.create_task(self._event_loop(handle, chosen), name=f"run-{record.id}")
        return handle

    async def run(self, **kwargs: Any) -> AsyncIterator[Event]:
        """`start(..., stream=True)` and yield its events: the simple way to drive a run."""
        handle = await self.start(**kwargs, stream=True)
        async for event in handle.events():
            yield event

    def cancel(self, run_id: str) -> bool:
        """Ask a run to stop; True when it was running in this process. Thread-safe."""
        registered = self._active.get(run_id)
        if registered is None or registered.handle.task is None:
            return False
        if registered.cancel_requested:
            # Cancelling the task again could interrupt its completion path.
            return True
        registered.cancel_requested = True
        queue = registered.handle.steering
        if queue is not None:
            # Closed now, not when the run ends: nothing queued is taken after the cancel.
            registered.handle._dropped.extend(queue.close())
        task = registered.handle.task
        registered.loop.call_soon_threadsafe(registered.handle.invocation.cancel_event.set)
        registered.loop.call_soon_threadsafe(task.cancel)
        return True

    def enqueue_message(self, run_id: str, message: str | Message, *, message_id: str | None = None) -> QueuedMessage:
        """Queue a user message for a run of this process (SPEC 1.5); the LLM flow takes it
        before the run's next model step. Thread-safe.

        Raises `UsageError` for an empty or non-user message, `RunNotActiveError` when the
        run is not going here (unknown, ended, cancelled) and `QueueFullError` when it holds
        `max_queued_messages` already. The same `message_id` twice queues the message once.
        """
        normalized = _normalize_message(message)
        queue = self._steering.get(run_id)
        registered = self._active.get(run_id)
        if queue is None or (registered is not None and registered.cancel_requested):
            raise RunNotActiveError(run_id)
        return queue.put(normalized, message_id=message_id)

    def cancel_queued(self, run_id: str) -> list[QueuedMessage]:
        """Withdraw the messages queued for a run of this process, oldest first; the run
        goes on. `RunNotActiveError` when the run is not going here. Thread-safe."""
        queue = self._steering.get(run_id)
        if queue is None:
            raise RunNotActiveError(run_id)
        return queue.withdraw()

    def queued_messages(self, run_id: str) -> list[QueuedMessage]:
        """The messages queued for a run of this process (empty when none or not here)."""
        queue = self._steering.get(run_id)
        return queue.pending() if queue is not None else []

    async def status(self, run_id: str) -> RunRecord | None:
        """The live record of a run in this process, else the stored one."""
        registered = self._active.get(run_id)
        if registered is not None:
            return registered.handle.record
        return await self.run_store.get(run_id)

    def add_listener(self, run_id: str, listener: EventListener) -> bool:
        """Follow a run of this process from now on; False when it is not running here."""
        registered = self._active.get(run_id)
        if registered is None:
            return False
        registered.handle.listeners.append(listener)
        return True

    def remove_listener(self, run_id: str, listener: EventListener) -> None:
        registered = self._active.get(run_id)
        if registered is not None and listener in registered.handle.listeners:
            registered.handle.listeners.remove(listener)

    def active_run_ids(self) -> list[str]:
        """The runs this process is executing, including those still being started."""
        return [*self._active, *self._starting]

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Keep a background task of this runner (heartbeat, listeners); `close` ends it."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _progress_sink(self, handle: RunHandle) -> ProgressSink:
        """Issue 21: a sink that emits a tool's progress reports live, in the order they
        were made, to the run's listeners and sinks; never held or persisted (SPEC 1.7 keeps
        partial events out of the ledger). A report never precedes its call: one made before
        the call went out waits for it (the latest only), one after the result is dropped,
        and so is every report after a cancel (a sync tool's thread cannot be stopped, its
        reports can). Safe to call from a sync tool's worker thread."""
        loop = asyncio.get_running_loop()
        last: list[asyncio.Task[None]] = []
        shown: set[str] = set()
        finished: set[str] = set()
        pending: dict[str, Event] = {}

        async def publish(event: Event, previous: asyncio.Task[None] | None) -> None:
            if previous is not None:  # one at a time, so that a sink sees them in order
                with contextlib.suppress(BaseException):
                    await previous
            for sink in self.sinks:
                try:
                    await sink.publish(handle.record, event)
                except Exception:
                    logger.exception("run %s: sink %r failed", handle.run_id, sink)

        def send(event: Event) -> None:
            self._notify(handle, event)
            if self.sinks:
                last[:] = [self.spawn(publish(event, last[0] if last else None), name=f"progress-{handle.run_id}")]

        def watch(item: Event | None) -> None:
            # Follows what the run emits: which calls are out, which have their result.
            if item is None or item.message is None:
                return
            for call in item.message.tool_calls:
                shown.add(call.id)
                waiting = pending.pop(call.id, None)
                if waiting is not None:
                    send(waiting)
            if item.message.tool_call_id is not None:
                finished.add(item.message.tool_call_id)
                pending.pop(item.message.tool_call_id, None)

        handle.listeners.append(watch)

        def emit(event: Event) -> None:
            if handle.invocation.cancel_event.is_set() or (handle.task is not None and handle.task.done()):
                return
            progress = ToolProgress.from_event(event)
            if progress is None or progress.tool_call_id in finished:
                return
            event = handle.invocation.stamp(event)
            if progress.tool_call_id in shown:
                send(event)
            else:
                pending[progress.tool_call_id] = event

        def sink(event: Event) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under a straggling thread
                loop.call_soon_threadsafe(emit, event)

        return sink

    def handle(self, run_id: str) -> RunHandle | None:
        registered = self._active.get(run_id)
        return registered.handle if registered is not None else None

    async def close(self) -> None:
        """Cancel every run of this process and wait for their completion events."""
        tasks = [r.handle.task for r in self._active.values() if r.handle.task is not None]
        for run_id in list(self._active):
            self.cancel(run_id)
        for task in list(self._background):
            task.cancel()
        tasks.extend(self._background)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.summary_scheduler is not None:
            await self.summary_scheduler.aclose()

    # -- phases -----------------------------------------------------------------------------

    async def _open_session(self, *, user_id: str, session_id: str | None, agent: str | None) -> tuple[Session, bool]:
        """The session to run in, and whether this call created it."""
        if session_id:
            key = SessionKey(app=self.app, user_id=user_id, session_id=session_id)
            if self.load_after_summary:
                session = await self.session_service.get_session(
                    key, event_limit=self.history_event_limit, after_summary=self.app
                )
            else:
                session = await self.session_service.get_session(key, event_limit=self.history_event_limit)
            if session is not None:
                return session, False
        try:
            created = await self.session_service.create_session(
                app=self.app, user_id=user_id, session_id=session_id, agent=agent or self.default_agent
            )
        except ValueError:
            # The id exists but belongs to another user: indistinguishable from "not found".
            raise SessionNotFoundError(f"session {session_id!r} not found") from None
        return created, True

    async def _drop_session(self, session: Session) -> None:
        try:
            await self.session_service.delete_session(session.key)
        except Exception:
            logger.exception("could not delete session %s after a refused start", session.id)

    async def _register(self, invocation: Invocation, *, user_id: str, agent: str, defer: bool = False) -> RunRecord:
        """Create the run's record; `DuplicateRequestError` when the user used its request id.
        With `defer`, the record is only built: the user message's append inserts it
        (`start`, `_row_after_failed_start`)."""
        request = (user_id, invocation.request_id)
        if request in self._active_requests:
            raise DuplicateRequestError(invocation.request_id)
        self._active_requests.add(request)
        # Counted as this process's before the row exists: the reaper takes a row of ours
        # that is neither running nor starting for a zombie.
        self._starting.add(invocation.run_id)
        try:
            record = RunRecord(
                id=invocation.run_id,
                app=self.app,
                user_id=user_id,
                session_id=invocation.session.id,
                agent=agent,
                request_id=invocation.request_id,
                owner=self.owner,
                status="running",
                started_at=utcnow(),
                heartbeat_at=utcnow(),
            )
            return record if defer else await self.run_store.create(record)
        except BaseException:
            self._active_requests.discard(request)
            self._starting.discard(invocation.run_id)
            raise

    def _joins_create(self, session: Session, turn: Sequence[Message], seed: Sequence[Message]) -> bool:
        """Whether the run's row can be inserted with its user message (issue 18): both
        stores can share a transaction, and nothing else is written between the row and
        the message (no paused run to abandon, no upload to store), so that a duplicate
        request id, found by that write, has still changed nothing."""
        if not getattr(self.session_service, "joins_writes", False) or not isinstance(
            self.run_store, JoinableRunCreate
        ):
            return False
        completion = next((e for e in reversed(session.events) if e.is_runner_completion), None)
        if completion is not None and completion.extensions.get("status") == REQUIRES_ACTION:
            return False
        return not any(p.data is not None and p.artifact is None for m in (*turn, *seed) for p in m.parts)

    async def _row_after_failed_start(self, handle: RunHandle, *, created: bool) -> bool:
        """A start whose row was to go in with its user message failed before that write
        held: create the row alone, to learn why and so that the run can end visibly. A
        duplicate request id is refused as before (`DuplicateRequestError`, a session this
        start created dropped); False when the row cannot be created either (the start is
        then undone in memory and the caller re-raises its failure)."""
        request = (handle.record.user_id, handle.record.request_id)
        try:
            await self.run_store.create(handle.record)
            return True
        except DuplicateRequestError:
            with contextlib.suppress(Exception):
                if await self.run_store.get(handle.run_id) is not None:
                    return True  # the append held after all (its answer was lost to a cancel)
            self._active_requests.discard(request)
            self._starting.discard(handle.run_id)
            self._steering.pop(handle.run_id, None)
            if created:
                await self._drop_session(handle.invocation.session)
            raise
        except BaseException:
            self._active_requests.discard(request)
            self._starting.discard(handle.run_id)
            self._steering.pop(handle.run_id, None)
            logger.warning(
                "run %s: its record could not be created after its start failed", handle.run_id, exc_info=True
            )
            return False

    async def _paused_run(self, session: Session, results: Sequence[Message], *, agent: str) -> RunRecord | None:
        """Issue 20: the run of this session paused for the client-tool calls `results`
        answer, when its completion event (the session's last) says so and it is still
        paused, for this agent; else None (the results start a new run)."""
        completion = next((e for e in reversed(session.events) if e.is_runner_completion), None)
        if completion is None or completion.extensions.get("status") != REQUIRES_ACTION:
            return None
        waiting = set(completion.extensions.get(CLIENT_CALLS_EXTENSION) or ())
        if not waiting or not {r.tool_call_id for r in results} <= waiting:
            return None
        record = await self.run_store.get(str(completion.extensions.get("run_id") or ""))
        if (
            record is None
            or record.status != REQUIRES_ACTION
            or record.agent != agent
            or record.session_id != session.id
        ):
            return None
        return record

    async def _abandon_paused(self, session: Session, *, user_id: str, by: str) -> Event | None:
        """Issue 20: end the run of this session paused for its client's tool results, when
        the client sends a new message instead (`cancelled`, error `abandoned`); its
        completion event, under the paused run's own request id, or None when no run waits
        (or a resume claimed it first)."""
        completion = next((e for e in reversed(session.events) if e.is_runner_completion), None)
        if completion is None or completion.extensions.get("status") != REQUIRES_ACTION:
            return None
        run_id = str(completion.extensions.get("run_id") or "")
        calls = list(completion.extensions.get(CLIENT_CALLS_EXTENSION) or ())
        reason = f"the client sent a new message (run {by}) instead of the results of {calls!r}"
        if await self.run_store.abandon(run_id, user_id=user_id, at=utcnow(), reason=reason) is None:
            return None
        return Event(
            author=self.app,
            object=OBJECT_RUNNER_COMPLETION,
            done=True,
            invocation_id=completion.invocation_id,
            request_id=completion.request_id,
            branch=completion.branch,
            filter_key=completion.filter_key,
            extensions={"run_id": run_id, "status": "cancelled", "abandoned_by": by, CLIENT_CALLS_EXTENSION: calls},
        )

    async def _resume(self, invocation: Invocation, *, user_id: str) -> RunRecord:
        """Claim the paused run `invocation` continues (a conditional update: of two
        requests with its results, one wins; the other's results answer calls that have
        one, a `UsageError`)."""
        request = (user_id, invocation.request_id)
        if request in self._active_requests:
            raise DuplicateRequestError(invocation.request_id)
        self._active_requests.add(request)
        self._starting.add(invocation.run_id)
        try:
            record = await self.run_store.resume(
                invocation.run_id, user_id=user_id, request_id=invocation.request_id, owner=self.owner, at=utcnow()
            )
            if record is None:
                raise UsageError(f"run {invocation.run_id!r} is no longer waiting for tool results")
            return record
        except BaseException:
            self._active_requests.discard(request)
            self._starting.discard(invocation.run_id)
            raise

    async def _end_unstarted(self, handle: RunHandle, exc: BaseException) -> None:
        """A run whose start failed after its record was created ends now, in the same call:
        failed with the reason (cancelled if the start itself was cancelled). SPEC 1.2
        step 13: a `run_error` event (repaired, so it is visible) goes into its session's
        ledger with the completion event, before the run is unregistered; the record's
        error says `start_failed`."""
        held: list[Event] = []
        if isinstance(exc, asyncio.CancelledError):
            status: RunStatusName = "cancelled"
            error = None
        else:
            status = "failed"
            reason = f"{type(exc).__name__}: {exc}"
            if len(reason) > START_FAILURE_MAX_CHARS:
                reason = reason[:START_FAILURE_MAX_CHARS] + "..."
            error = EventError(type="start_failed", message=f"the run could not start: {reason}")
            logger.warning("run %s could not start: %s", handle.run_id, reason)
            invocation = handle.invocation
            held.append(
                repair_error(
                    invocation.stamp(
                        Event(
                            author=invocation.agent_name,
                            object=OBJECT_ERROR,
                            done=True,
                            error=EventError(type="run_error", message=error.message, code="start_failed"),
                        )
                    )
                )
            )
            self._observe(handle, held[-1])
        await self._record_end(handle, status, error, held=held)

    async def _event_loop(self, handle: RunHandle, agent: Agent) -> RunRecord:
        invocation = handle.invocation
        # Issue 21: the run's tools (their tasks and threads inherit this context) report
        # progress through this sink.
        PROGRESS_SINK.set(self._progress_sink(handle))
        persisted: set[str] = set()
        # Events of the current model step, held until the step's last one arrives so that
        # the step is one transaction (runs.core.steps); none of them is emitted before it.
        held: list[Event] = []
        status: RunStatusName = "completed"
        final_error: EventError | None = None
        stopped = await self._before_run(handle)
        agen = _only(stopped) if stopped is not None else agent.run(invocation)
        try:
            async for event in agen:
                event, continues, ends = take_mark(invocation.stamp(event))
                event = repair_error(event)
                if self.callbacks.on_event:
                    event = await run_on_event(
                        self.callbacks,
                        CallbackContext(invocation=invocation, agent_name=event.author),
                        event,
                    )
                # The run's own agent ends with this event: it goes with the completion.
                continues = continues or (ends and event.branch == invocation.branch)
                if self._over_event_limit(event, persisted, held):
                    raise EventLimitError(self.max_events_per_run)
                if event.is_error:
                    status, final_error = "failed", event.error
                self._observe(handle, event)
                held.append(event)
                if continues:
                    continue
                await self._flush(handle, held, persisted)
                if invocation.cancel_event.is_set():
                    # The task's cancellation can be swallowed on its way through a library
                    # (a Redis client turns it into a timeout); the flag cannot.
                    raise asyncio.CancelledError
        except asyncio.CancelledError:
            status = "cancelled"
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        except Exception as exc:  # a flow bug must still end the run visibly
            status = "failed"
            if isinstance(exc, EventLimitError):
                logger.warning("run %s: %s", handle.run_id, exc)
                final_error = EventError(type="event_limit", message=str(exc))
            else:
                logger.exception("run %s failed", handle.run_id)
                final_error = EventError(type="flow_error", message=f"{type(exc).__name__}: {exc}")
            held.append(
                repair_error(
                    invocation.stamp(
                        Event(author=invocation.agent_name, object=OBJECT_ERROR, done=True, error=final_error)
                    )
                )
            )
            self._observe(handle, held[-1])
            await self._flush(handle, held, persisted)
        finally:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(agen.aclose(), COMPLETION_BUDGET_S)
        if status == "completed" and handle._client_calls:
            # Issue 20: the last step called client tools: the run pauses for their results,
            # durably (the record and the completion event say so); it is not over.
            status = REQUIRES_ACTION
        if status == "cancelled" and handle._streamed:
            try:
                held.extend(self._interrupted_answers(handle))
            except Exception:  # the completion must still go out
                logger.exception("run %s: could not keep its interrupted answer", handle.run_id)
        # Events still held (the run's last step, or what a cancel cut short) are written
        # with the completion event.
        return await self._complete(handle, status, final_error, held=held, persisted=persisted)

    async def _before_run(self, handle: RunHandle) -> Event | None:
        """Issue 20, item 4: the before_run callbacks; the error event that ends the run when
        one of them stops it, else None."""
        if not self.callbacks.before_run:
            return None
        invocation = handle.invocation
        stop, changes = await run_before_run(
            self.callbacks,
            CallbackContext(invocation=invocation, agent_name=invocation.agent_name),
        )
        if stop is None:
            return None
        error = EventError(type="run_stopped", message=f"a before_run callback stopped the run: {stop.reason}")
        return with_changes(
            invocation.stamp(
                Event(
                    author=invocation.agent_name,
                    object=OBJECT_ERROR,
                    done=True,
                    error=error,
                )
            ),
            changes,
        )

    def _persists_interrupted(self, options: RunOptions) -> bool:
        """SPEC 1.2 step 2: the run's choice, else the runner's default (off)."""
        chosen = options.persist_interrupted_assistant
        return self.persist_interrupted_assistant if chosen is None else chosen

    @staticmethod
    def _observe(handle: RunHandle, event: Event) -> None:
        """Follow an event for the completion capture, the trace and the interrupted
        answers; only in-memory bookkeeping (no I/O per event)."""
        handle._capture.observe(event)
        if handle._trace is not None:
            handle._trace.observe(event)
        if event.message is not None and event.message.role == "assistant" and not event.partial and not event.is_error:
            handle._client_calls = list(event.extensions.get(CLIENT_CALLS_EXTENSION) or ())
        streamed = handle._streamed
        if streamed is None or event.message is None or event.message.role != "assistant":
            return
        if event.partial:
            message_id = event.extensions.get("message_id")
            if isinstance(message_id, str) and event.message.content:
                streamed.setdefault(message_id, (event, []))[1].append(event.message.content)
        else:
            streamed.pop(event.id, None)
            streamed.pop(str(event.extensions.get("message_id") or ""), None)

    def _interrupted_answers(self, handle: RunHandle) -> list[Event]:
        """SPEC 1.10: after a cancel, each answer still streaming becomes an assistant
        event of the text streamed so far (finish reason `cancelled`, marked
        `interrupted_assistant`), in the order they began; written with the completion."""
        streamed, handle._streamed = handle._streamed, None  # nothing streams after the cancel
        if not streamed:
            return []
        kept = {
            event.text
            for event in handle.invocation.session.events
            if event.message is not None and event.message.role == "assistant" and not event.partial
        }
        out: list[Event] = []
        for message_id, (first, deltas) in streamed.items():
            text = "".join(deltas)
            if not text.strip() or text in kept:
                continue  # nothing said, or the same answer is already in the ledger
            event = handle.invocation.stamp(
                Event(
                    author=first.author,
                    branch=first.branch,
                    filter_key=first.filter_key,
                    message=Message(role="assistant", content=text),
                    done=True,
                    finish_reason="cancelled",
                    extensions={INTERRUPTED_ASSISTANT: True, "message_id": message_id},
                )
            )
            self._observe(handle, event)
            out.append(event)
        return out

    def _over_event_limit(self, event: Event, persisted: set[str], held: Sequence[Event]) -> bool:
        """Whether persisting this event would exceed `max_events_per_run` (checked before
        the write, so the ledger keeps at most the limit plus the error and completion)."""
        limit = self.max_events_per_run
        if not limit or not should_persist(event) or event.id in persisted:
            return False
        pending = sum(1 for e in held if should_persist(e) and e.id not in persisted)
        return len(persisted) + pending >= limit

    async def _flush(self, handle: RunHandle, held: list[Event], persisted: set[str]) -> None:
        """Persist the held events in one transaction, then emit them in order: nothing goes
        out before the write that holds it has committed (SPEC 1.7)."""
        events = await self._persist(handle, held, persisted)
        held.clear()
        for event in events:
            self._account(handle, event)
            await self._emit(handle, event)

    async def _persist(
        self,
        handle: RunHandle,
        events: Sequence[Event],
        persisted: set[str],
        *,
        joined: Any = None,
    ) -> list[Event]:
        """SPEC 1.7 and 1.6 step 9: persist the complete events once each, in one
        `append_events` call (with the `joined` write, when given, in its transaction);
        returns `events` with the stored ones in their place."""
        # The completion marker has no content but is part of the ledger (`_record_end`).
        todo = _to_persist(events, persisted)
        if not todo:
            return list(events)
        try:
            saved = await self._append(handle, todo, joined)
        except asyncio.CancelledError:
            raise
        except SessionNotFoundError:
            # The session was deleted under the run: nothing of it can be kept, so it stops.
            logger.info("run %s: its session is gone; the run stops", handle.run_id)
            handle.invocation.cancel_event.set()
            return list(events)
        except Exception:
            # SPEC 1.7: an append failure is logged and the events still go out.
            logger.exception("run %s: could not persist events %s", handle.run_id, [e.id for e in todo])
            return list(events)
        stored = {id(given): kept for given, kept in zip(todo, saved, strict=True)}
        persisted.update(e.id for e in saved)
        # One job per filter key and write, for its newest event the rule takes: a job
        # covers everything up to its seq, and an earlier result of a round written whole
        # would otherwise count as completing it.
        asked: set[str] = set()
        for event in reversed(saved):
            if not event.is_runner_completion and event.filter_key not in asked:
                if await self._enqueue_summary(handle, event):
                    asked.add(event.filter_key)
        return [stored.get(id(e), e) for e in events]

    async def _append(self, handle: RunHandle, todo: list[Event], joined: Any) -> list[Event]:
        """Append `todo`, with the record write `joined` in its transaction when given. When
        that write fails (a value the run table refuses, a store that cannot join after all)
        the events are written alone: a record's failure never costs the ledger its steps."""
        session = handle.invocation.session
        if joined is not None:
            try:
                saved = await self.session_service.append_events(session, todo, joined=[joined])  # type: ignore[call-arg]  # _joined_save checked joins_writes
            except (asyncio.CancelledError, SessionNotFoundError):
                raise
            except Exception:
                logger.warning(
                    "run %s: its record could not go with its last step; written apart", handle.run_id, exc_info=True
                )
            else:
                handle._record_joined = True
                return saved
        return await self.session_service.append_events(session, todo)

    def _final_record(
        self,
        handle: RunHandle,
        last: Sequence[Event],
        persisted: set[str],
        status: RunStatusName,
        error: EventError | None,
        ended_at: datetime,
    ) -> RunRecord:
        """The run's record once `last` (its held steps and the completion) is stored and
        emitted: what `_record_end` saves."""
        todo = {e.id for e in _to_persist(last, persisted)}
        record = handle.record
        *steps, completion = last
        for event in steps:
            record = _accounted(record, event.replace(seq=0) if event.id in todo and event.seq is None else event)
        return record.replace(
            # The completion marker is a ledger event of the run too.
            event_count=record.event_count + (1 if completion.id in todo or completion.seq is not None else 0),
            status=status,
            ended_at=None if status == REQUIRES_ACTION else ended_at,
            error=error.to_dict() if error is not None else None,
            # SPEC 1.9.3: the execution trace, written with the record (no statement per event).
            trace=_trace_of(handle, status, ended_at),
        )

    def _joined_save(self, record: RunRecord) -> Any:
        """The run store's write of `record`, to commit with the run's last ledger append,
        when both stores can (Django's, on one database); else None."""
        if not getattr(self.session_service, "joins_writes", False) or not isinstance(self.run_store, JoinableRunStore):
            return None
        return self.run_store.joined_save(record)

    async def _enqueue_summary(self, handle: RunHandle, event: Event) -> bool:
        """SPEC 1.8: after a successful append, ask for a summary job when the rule says so;
        whether the rule took `event` (a job was asked for, or the gate spared it)."""
        if self.summary_scheduler is None or event.seq is None:
            return False
        invocation, agent = handle.invocation, handle.agent
        complete = not event.is_tool_result or tool_round_complete(invocation.session.events, event)
        sync = bool(getattr(agent, "sync_summary_intra_run", False))
        if not should_enqueue_summary(event, sync_intra_run=sync, round_complete=complete):
            return False
        if handle._summary_gate is None:
            handle._summary_gate = summary_gate(self.summary_scheduler)
        gate = handle._summary_gate
        # Issue 18: most jobs would read the events after the boundary only to find their
        # trigger short; the gate's counts, kept as events arrive, spare those.
        if gate is not None and not gate.due(
            invocation.session,
            event.filter_key,
            context_window=getattr(agent, "context_window", None),
            summaries=self._newest_summaries(invocation.session),
        ):
            return True
        fork_parent = getattr(agent, "fork_parent", None)
        job = SummaryJob(
            key=invocation.session.key,
            filter_key=event.filter_key,
            last_seq=event.seq,
            context_window=getattr(agent, "context_window", None),
            parent=fork_parent(invocation, event) if callable(fork_parent) else None,
        )
        try:
            await self.summary_scheduler.enqueue(job)
        except asyncio.CancelledError:
            raise
        except Exception:  # a summary is maintenance: it never fails a run
            logger.debug("run %s: summary job not enqueued", handle.run_id, exc_info=True)
        return True

    def _newest_summaries(self, session: Session) -> dict[str, Summary] | None:
        """The loaded summaries, with those the scheduler's jobs advanced since in their
        place: a job of this run that already ran makes the next ones of its key moot."""
        advanced = getattr(self.summary_scheduler, "advanced_summaries", None)
        newer = advanced(session.key) if callable(advanced) else {}
        if not newer:
            return None
        merged = dict(session.summaries)
        for key, summary in newer.items():
            current = merged.get(key)
            if current is None or summary.last_seq > current.last_seq:
                merged[key] = summary
        return merged

    @staticmethod
    def _account(handle: RunHandle, event: Event) -> None:
        handle.record = _accounted(handle.record, event)

    @staticmethod
    def _notify(handle: RunHandle, item: Event | None) -> None:
        for listener in list(handle.listeners):
            try:
                listener(item)
            except Exception:
                logger.exception("run %s: listener %r failed", handle.run_id, listener)

    async def _emit(self, handle: RunHandle, event: Event) -> None:
        self._notify(handle, event)
        for sink in self.sinks:
            try:
                await sink.publish(handle.record, event)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("run %s: sink %r failed", handle.run_id, sink)

    async def _complete(
        self,
        handle: RunHandle,
        status: RunStatusName,
        error: EventError | None,
        *,
        held: Sequence[Event] = (),
        persisted: set[str] | None = None,
    ) -> RunRecord:
        """SPEC 1.9: persist and emit the completion event, record the outcome, unregister."""
        await self._record_end(handle, status, error, held=held, persisted=persisted)
        if status == REQUIRES_ACTION:
            # Paused, not ended: after_run and the post-run jobs see the run when it ends.
            await self._after_pause(handle)
            return handle.record
        if self.callbacks.after_run:
            try:
                await run_after_run(self.callbacks, handle.record)
            except Exception:  # the outcome is saved; an observer's failure cannot change it
                logger.exception("run %s: an after_run callback failed", handle.run_id)
        if handle._carried:
            await self._follow_up(handle, handle._carried)
        # Post-run jobs (SPEC 1.9 step 6): after the completion is saved and delivered, so
        # they never delay a reader; a failing hook is logged and the run's outcome stands.
        # The run stays registered meanwhile, so that `close` waits for its hooks; a cancel
        # that arrives now only skips the hooks left.
        try:
            for hook in self.post_run:
                try:
                    await hook(handle.record)
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
                    break
                except Exception:
                    logger.exception("run %s: post-run hook %r failed", handle.run_id, hook)
        finally:
            self._active.pop(handle.run_id, None)
        return handle.record

    async def _after_pause(self, handle: RunHandle) -> None:
        """The end of a run's segment that paused for its client's tool results."""
        try:
            if handle._carried:
                await self._follow_up(handle, handle._carried)
        finally:
            self._active.pop(handle.run_id, None)

    async def _follow_up(self, handle: RunHandle, carried: Sequence[QueuedMessage]) -> None:
        """SPEC 1.5: messages still queued when a run ended open the next run of its
        session, in order: the first is its user message, the rest are queued on it and
        taken before its first model step."""
        record = handle.record
        first, *rest = carried
        try:
            follow = await self.start(
                user_id=record.user_id,
                message=first.message,
                session_id=record.session_id,
                agent=record.agent,
                options=handle.invocation.options,
                turn_extensions={QUEUED: CARRIED, QUEUED_ID: first.id, "follows_run": record.id},
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(
                "run %s: the queued messages %s could not open the next run",
                handle.run_id,
                [item.id for item in carried],
            )
            return
        # The new run's task has not run yet (nothing was awaited since its start): these
        # are queued before its first step.
        assert follow.steering is not None
        for item in rest:
            follow.steering.put(item.message, message_id=item.id)

    def _close_steering(self, handle: RunHandle, status: RunStatusName) -> dict[str, Any]:
        """Close the run's queue; what it held is dropped after a cancel (or a start that
        failed), else carried into the next run. The completion event's extensions say which."""
        queue = self._steering.pop(handle.run_id, None)
        left = queue.close() if queue is not None else []
        if status == "cancelled" or handle.task is None:
            handle._dropped.extend(left)
        else:
            handle._carried.extend(left)
        extensions: dict[str, Any] = {}
        if handle._dropped:
            extensions[DROPPED] = [item.to_dict() for item in handle._dropped]
        if handle._carried:
            extensions[CARRIED_IDS] = [item.id for item in handle._carried]
        return extensions

    async def _record_end(
        self,
        handle: RunHandle,
        status: RunStatusName,
        error: EventError | None,
        *,
        held: Sequence[Event] = (),
        persisted: set[str] | None = None,
    ) -> None:
        """Persist the held events and the completion event in one write, emit them, save
        the final record, release the request id."""
        invocation = handle.invocation
        capture = handle._capture
        completion = invocation.stamp(
            Event(
                author=self.app,
                object=OBJECT_RUNNER_COMPLETION,
                done=True,
                # SPEC 1.9 step 1: the error is copied only when no terminal error event said it.
                error=None if capture.terminal_error else error,
                extensions={
                    "run_id": handle.run_id,
                    "status": status,
                    **_output_of(handle.record, held),
                    # Issue 20: a paused run's completion names the calls it waits for.
                    **({CLIENT_CALLS_EXTENSION: list(handle._client_calls)} if status == REQUIRES_ACTION else {}),
                    **self._close_steering(handle, status),
                    **capture.extensions(error.type if error else None),
                },
            )
        )
        # The completion marker is part of the ledger: it tells a reader (and a reaper)
        # that the run ended, and how. After a cancel it must be out
        # within the budget (SPEC 1.9); otherwise it waits for the write as any step does.
        last = [*held, completion]
        persisted = persisted if persisted is not None else set()
        ended_at = utcnow()
        # Issue 18: the final record as it will be once these events are stored, written in
        # their transaction when the stores share one (one write less per run); it is
        # saved on its own when they do not, or when the write did not hold.
        final = self._final_record(handle, last, persisted, status, error, ended_at)
        joined = self._joined_save(final)
        write = self._persist(handle, last, persisted, joined=joined)
        try:
            last = await (asyncio.wait_for(write, COMPLETION_BUDGET_S) if status == "cancelled" else write)
        except Exception:
            logger.exception("run %s: could not persist its completion event", handle.run_id)
        *steps, completion = last
        for event in steps:
            self._account(handle, event)
            with contextlib.suppress(Exception):
                await self._emit(handle, event)
        saved_with_events = handle._record_joined and completion.seq is not None
        if saved_with_events:
            handle.record = final
        else:
            handle.record = handle.record.replace(
                # The completion marker is a ledger event of the run too (when its write held).
                event_count=handle.record.event_count + (1 if completion.seq is not None else 0),
                status=status,
                ended_at=final.ended_at,
                error=final.error,
                trace=final.trace,
            )
        try:
            await asyncio.wait_for(self._emit(handle, completion), COMPLETION_BUDGET_S)
        except Exception:
            logger.exception("run %s: could not emit its completion event", handle.run_id)
        if not saved_with_events:
            try:
                await self.run_store.save(handle.record)
            except Exception:
                logger.exception("run %s: could not save its record", handle.run_id)
        self._notify(handle, None)
        self._active_requests.discard((handle.record.user_id, handle.record.request_id))


def _accounted(record: RunRecord, event: Event) -> RunRecord:
    """`record` after `event` was emitted: its counts, answer, output and token usage."""
    changes: dict[str, Any] = {"last_event_at": utcnow()}
    if event.seq is not None:
        # Issue 21: only what the ledger holds (a stored event has its seq); streamed
        # deltas and events whose write failed are not counted.
        changes["event_count"] = record.event_count + 1
    if event.message is not None and event.message.role == "assistant" and not event.partial and not event.is_error:
        if not event.extensions.get(NO_MODEL_CALL):
            changes["model_calls"] = record.model_calls + 1
        changes["tool_calls"] = record.tool_calls + len(event.message.tool_calls)
        if event.message.content and not event.message.tool_calls:
            changes["answer"] = event.message.content
    if OUTPUT_EXTENSION in event.extensions and not event.partial and not event.is_error:
        # Issue 20: the validated value; the answer is its JSON text (a model's markdown
        # fence around it is gone), so that every surface answers something that parses.
        changes["output"] = event.extensions[OUTPUT_EXTENSION]
        changes["answer"] = json.dumps(changes["output"], ensure_ascii=False)
    if event.usage is not None:
        changes["prompt_tokens"] = record.prompt_tokens + event.usage.prompt_tokens
        changes["completion_tokens"] = record.completion_tokens + event.usage.completion_tokens
    return record.replace(**changes)


def _output_of(record: RunRecord, held: Sequence[Event]) -> dict[str, Any]:
    """The completion event's `output` extension: the run's validated structured answer
    (issue 20), from its last step when that is still held for this write."""
    for event in reversed(held):
        if OUTPUT_EXTENSION in event.extensions and not event.is_error:
            return {OUTPUT_EXTENSION: event.extensions[OUTPUT_EXTENSION]}
    return {OUTPUT_EXTENSION: record.output} if record.output is not None else {}


def _trace_of(handle: RunHandle, status: RunStatusName, ended_at: datetime) -> dict[str, Any] | None:
    """The run's execution trace; a run resumed after pauses (issue 20) keeps the traces of
    its earlier segments, oldest first, under `earlier_segments`."""
    if handle._trace is None:
        return None
    trace = handle._trace.finish(status=status, ended_at=ended_at)
    earlier = handle._earlier_trace
    if earlier:
        before = [*earlier.get("earlier_segments", ()), {k: v for k, v in earlier.items() if k != "earlier_segments"}]
        trace = {**trace, "earlier_segments": before}
    return trace


def _to_persist(events: Sequence[Event], persisted: set[str]) -> list[Event]:
    """The events of `events` a write stores: complete ones (and the completion marker)
    not stored yet."""
    return [e for e in events if (should_persist(e) or e.is_runner_completion) and e.id not in persisted]


async def _only(event: Event) -> AsyncGenerator[Event, None]:
    """The events of a run a before_run callback stopped: its error alone."""
    yield event


def _current_turn(message: str | Message | None, tool_results: Sequence[Message]) -> list[Message]:
    """What `start` persists as the current turn: the user message, or the tool results."""
    if not tool_results:
        if message is None:
            raise UsageError("message is empty")
        return [_normalize_message(message)]
    if message is not None:
        raise UsageError("pass a message or tool results, not both")
    for result in tool_results:
        if result.role != "tool" or not result.tool_call_id:
            raise UsageError(
                f"a tool result needs role 'tool' and a tool_call_id, got {result.role!r}, {result.tool_call_id!r}"
            )
    return list(tool_results)


def _answer_pending_calls(
    session: Session, results: Sequence[Message], *, seed: Sequence[Message] = ()
) -> list[Message]:
    """Each result must answer a call of the loaded history (or of `seed`, the history a
    new session is seeded with) that has no result yet; the result takes its tool name
    from that call."""
    messages = [*(event.message for event in session.events if event.message is not None and not event.partial), *seed]
    calls = {call.id: call for message in messages for call in message.tool_calls}
    answered = {message.tool_call_id for message in messages if message.role == "tool"}
    named: list[Message] = []
    for result in results:
        call = calls.get(result.tool_call_id or "")
        if call is None:
            raise UsageError(f"tool result {result.tool_call_id!r} answers no tool call of this session")
        if result.tool_call_id in answered:
            raise UsageError(f"tool call {result.tool_call_id!r} already has a result")
        answered.add(result.tool_call_id)
        named.append(result if result.tool_name else replace(result, tool_name=call.name))
    return named


def _normalize_message(message: str | Message) -> Message:
    if isinstance(message, str):
        message = Message(role="user", content=message)
    message = normalize_role(message)  # SPEC 1.2 step 1
    if not message.content.strip() and not message.attachments:
        raise UsageError("message is empty")
    if message.role != "user":
        raise UsageError(f"the run message must have role 'user', got {message.role!r}")
    return message
