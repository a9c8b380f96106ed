"""The Runner: owns the life of a run (SPEC 1).

`start` does the work that must happen before anything runs, in SPEC 1.2's order, and
raises for a bad request: get or create the session, choose the agent, build the
invocation, register the run (a duplicate request id is refused), persist the user message.
The event loop then runs as its own asyncio task, so a run outlives whoever started it:
each agent event is stamped, repaired, persisted when the rule says so, and only then
emitted. The loop always ends with a persisted and emitted completion event, also after a
cancel.

The phases live beside it: opening a run (`opening`), writing its events (`persistence`),
ending it (`completion`), tool progress (`progress`); the handle and the sink protocol in
`handle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runs.core.agents.base import Agent
from runs.core.attachments import store_turn_attachments
from runs.core.callbacks import (
    CALLBACKS_SERVICE,
    CallbackContext,
    Callbacks,
    run_on_event,
)
from runs.core.errors import AgentNotFoundError, EventLimitError
from runs.core.invocation import SPAWN_SERVICE, Invocation, RunOptions
from runs.core.pacing import DEFAULT_MAX_SETTING_UP, SETUP_SLOT_SERVICE, SetupGate, setup_done
from runs.core.records import REQUIRES_ACTION, InMemoryRunStore, RunRecord, RunStatusName, RunStore
from runs.core.rewriting import REWRITTEN, RewriteContext, UserMessageRewriter, rewrite_user_message
from runs.core.routing import resolve_route
from runs.core.runner.completion import RunCompletion
from runs.core.runner.handle import (
    COMPLETION_BUDGET_S,
    DEFAULT_HISTORY_EVENT_LIMIT,
    Admission,
    EventListener,
    EventSink,
    PostRunHook,
    RunHandle,
    observe,
)
from runs.core.runner.opening import RunOpening, answer_pending_calls, current_turn, normalize_message, turn_events
from runs.core.runner.persistence import RunWriter
from runs.core.runner.progress import progress_sink
from runs.core.steering import (
    DEFAULT_MAX_QUEUED,
    STEERING_SERVICE,
    QueuedMessage,
    RunNotActiveError,
    SteeringQueue,
)
from runs.core.steps import take_mark
from runs.core.tools.progress import PROGRESS_SINK
from runs.core.trace import TraceRecorder
from sessions_app.core.events import (
    OBJECT_ERROR,
    Event,
    EventError,
    Message,
    new_id,
    repair_error,
    utcnow,
)
from sessions_app.core.session import SessionService
from sessions_app.core.summary import SummaryScheduler

logger = logging.getLogger(__name__)


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
        max_setting_up: int = DEFAULT_MAX_SETTING_UP,
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
        # Issue 23: runs that set up at once (runs.core.pacing); the others wait their turn.
        self.setup_gate = SetupGate(max_setting_up)
        self._active: dict[str, _Registered] = {}
        self._active_requests: set[tuple[str, str]] = set()  # (user id, request id)
        self._starting: set[str] = set()  # run ids registered whose user message is not saved yet
        self._background: set[asyncio.Task[Any]] = set()
        # The steering queue of each run from its registration to its end (also while it
        # starts: a message sent then is taken before the first model step).
        self._steering: dict[str, SteeringQueue] = {}
        # The phases of a run, each with its own module; they read the settings above and
        # keep these tables.
        self._opening = RunOpening(self)
        self._writer = RunWriter(self)
        self._completion = RunCompletion(self)

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
        turn = current_turn(message, tool_results)
        msg = turn[-1]
        options = options or RunOptions()
        request_id = request_id or new_id()
        # Issue 23: the setup waits for a place in the gate, left before the first model call.
        slot = await self.setup_gate.enter()
        try:
            if self.admission is not None:
                # Before anything is written: a refused run leaves no session and no message.
                await self.admission(user_id)
            # 1. get or create the session
            session, created = await self._opening.open_session(user_id=user_id, session_id=session_id, agent=agent)
        except BaseException:
            slot.release()
            raise
        try:
            if tool_results:
                # Issue 20: a new session's seeded history may hold the calls they answer.
                turn = answer_pending_calls(session, turn, seed=seed if session.last_seq == 0 else ())
            # 2. choose the agent: a pending await-user-reply route (SPEC 1.2 step 6,
            # runs.core.routing), else the request's, else the session's, else the default
            routed = resolve_route(session.state, self.agents, requested=agent, user_turn=not tool_results)
            chosen = routed.agent or self.agent(agent or session.agent or None)
            options = routed.options(options)
            if self.user_message_rewriter is not None and not tool_results:
                # SPEC 1.2 step 8: the rewritten messages are the current turn; the last
                # is the invocation message. A rewriter may call a model: its I/O holds no
                # setup place, and the run queues again for one afterwards.
                slot.release()
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
                slot = await self.setup_gate.enter()
            paused = (
                await self._opening.paused_run(session, turn, agent=chosen.name)
                if tool_results and not created
                else None
            )
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
                services={**self.services, STEERING_SERVICE: steering, SETUP_SLOT_SERVICE: slot},
            )
            # 3. register the run (or claim the paused one); a request id may run once per user.
            # Issue 18: when nothing is written before the user message, the run's row is
            # inserted with it (one commit less); a duplicate request id then fails that write.
            join = paused is None and self._opening.joins_create(session, turn, seed)
            record = await (
                self._opening.resume(invocation, user_id=user_id)
                if paused is not None
                else self._opening.register(invocation, user_id=user_id, agent=chosen.name, defer=join)
            )
            self._steering[record.id] = steering
        except BaseException:
            slot.release()
            if created:
                # A refused start leaves no session behind (a duplicate request id, a bad agent).
                await self._opening.drop_session(session)
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
            abandoned = (
                await self._opening.abandon_paused(session, user_id=user_id, by=record.id) if not tool_results else None
            )
            if abandoned is not None:
                opening.append(abandoned)
            opening.extend(
                turn_events(
                    turn,
                    seed=seed if session.last_seq == 0 else (),
                    agent=chosen,
                    invocation=invocation,
                    options=options,
                    turn_extensions=turn_extensions,
                )
            )
            if (route_note := routed.note(author=chosen.name)) is not None:
                opening.append(invocation.stamp(route_note))  # the route is consumed or cleared
            # One transaction: a seeded history is in the ledger with its turn or not at all.
            if join:
                create = self.run_store.joined_create(handle.record)  # type: ignore[attr-defined]  # joins_create checked
                await self.session_service.append_events(session, opening, joined=[create])  # type: ignore[call-arg]  # joins_writes
                join = False  # the row is in
            else:
                await self.session_service.append_events(session, opening)
            # Issue 21: event_count counts the ledger events this run wrote, its turn included.
            written = len(opening) - (1 if abandoned is not None else 0)  # the ended run's completion is its own
            handle.record = handle.record.replace(event_count=handle.record.event_count + written)
        except BaseException as exc:
            slot.release()
            if join and not await self._opening.row_after_failed_start(handle, created=created):
                raise
            # The run row exists: end it here, or it stays `running` for good (this process
            # owns it, so no reaper takes it; it holds the thread and a slot of the user's cap).
            await self._completion.end_unstarted(handle, exc)
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
        normalized = normalize_message(message)
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

    # -- the event loop ---------------------------------------------------------------------

    async def _event_loop(self, handle: RunHandle, agent: Agent) -> RunRecord:
        invocation = handle.invocation
        # Issue 21: the run's tools (their tasks and threads inherit this context) report
        # progress through this sink.
        PROGRESS_SINK.set(progress_sink(self, handle))
        persisted: set[str] = set()
        # Events of the current model step, held until the step's last one arrives so that
        # the step is one transaction (runs.core.steps); none of them is emitted before it.
        held: list[Event] = []
        status: RunStatusName = "completed"
        final_error: EventError | None = None
        if not getattr(agent, "paces_setup", False):
            # Issue 23: its setup was the start's; what it does first may be I/O (a remote agent).
            setup_done(invocation)
        stopped = await self._opening.before_run(handle)
        agen = _only(stopped) if stopped is not None else agent.run(invocation)
        try:
            async for event in agen:
                setup_done(invocation)  # an agent that calls no model leaves the gate here
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
                if self._writer.over_event_limit(event, persisted, held):
                    raise EventLimitError(self.max_events_per_run)
                if event.is_error:
                    status, final_error = "failed", event.error
                observe(handle, event)
                held.append(event)
                if continues:
                    continue
                await self._writer.flush(handle, held, persisted)
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
            observe(handle, held[-1])
            await self._writer.flush(handle, held, persisted)
        finally:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(agen.aclose(), COMPLETION_BUDGET_S)
        if status == "completed" and handle._client_calls:
            # Issue 20: the last step called client tools: the run pauses for their results,
            # durably (the record and the completion event say so); it is not over.
            status = REQUIRES_ACTION
        if status == "cancelled" and handle._streamed:
            try:
                held.extend(self._completion.interrupted_answers(handle))
            except Exception:  # the completion must still go out
                logger.exception("run %s: could not keep its interrupted answer", handle.run_id)
        setup_done(invocation)  # a run that made no event
        # Events still held (the run's last step, or what a cancel cut short) are written
        # with the completion event.
        return await self._completion.complete(handle, status, final_error, held=held, persisted=persisted)

    def _persists_interrupted(self, options: RunOptions) -> bool:
        """SPEC 1.2 step 2: the run's choice, else the runner's default (off)."""
        chosen = options.persist_interrupted_assistant
        return self.persist_interrupted_assistant if chosen is None else chosen


async def _only(event: Event) -> AsyncGenerator[Event, None]:
    """The events of a run a before_run callback stopped: its error alone."""
    yield event
