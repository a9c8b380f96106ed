"""Opening a run (SPEC 1.2): the session it runs in, its registration (a request id runs
once per user), the paused run a client's tool results continue, the checks on the
current turn and the ledger events it writes; `Runner.start` calls these in order. Also
the before_run callbacks, which may stop the run before its agent starts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runs.core.agents.base import Agent
from runs.core.callbacks import CallbackContext, run_before_run, with_changes
from runs.core.context.seeding import own_tool_names, seeded_events
from runs.core.errors import DuplicateRequestError, UsageError
from runs.core.invocation import Invocation, RunOptions
from runs.core.records import REQUIRES_ACTION, JoinableRunCreate, RunRecord
from runs.core.rewriting import normalize_role
from runs.core.runner.handle import RunHandle
from runs.core.tools.client import CLIENT_CALLS_EXTENSION
from sessions_app.core.events import (
    OBJECT_ERROR,
    OBJECT_RUNNER_COMPLETION,
    OBJECT_TOOL_RESPONSE,
    Event,
    EventError,
    Message,
    utcnow,
)
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError

if TYPE_CHECKING:
    from runs.core.runner.runner import Runner

logger = logging.getLogger(__name__)


class RunOpening:
    """The steps of `Runner.start` that find the session and claim the run (they keep the
    runner's tables of requests and starting runs), and the before_run callbacks."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    async def open_session(self, *, user_id: str, session_id: str | None, agent: str | None) -> tuple[Session, bool]:
        """The session to run in, and whether this call created it."""
        if session_id:
            key = SessionKey(app=self.runner.app, user_id=user_id, session_id=session_id)
            if self.runner.load_after_summary:
                session = await self.runner.session_service.get_session(
                    key, event_limit=self.runner.history_event_limit, after_summary=self.runner.app
                )
            else:
                session = await self.runner.session_service.get_session(
                    key, event_limit=self.runner.history_event_limit
                )
            if session is not None:
                return session, False
        try:
            created = await self.runner.session_service.create_session(
                app=self.runner.app, user_id=user_id, session_id=session_id, agent=agent or self.runner.default_agent
            )
        except ValueError:
            # The id exists but belongs to another user: indistinguishable from "not found".
            raise SessionNotFoundError(f"session {session_id!r} not found") from None
        return created, True

    async def drop_session(self, session: Session) -> None:
        try:
            await self.runner.session_service.delete_session(session.key)
        except Exception:
            logger.exception("could not delete session %s after a refused start", session.id)

    async def register(self, invocation: Invocation, *, user_id: str, agent: str, defer: bool = False) -> RunRecord:
        """Create the run's record; `DuplicateRequestError` when the user used its request id.
        With `defer`, the record is only built: the user message's append inserts it
        (`Runner.start`, `row_after_failed_start`)."""
        request = (user_id, invocation.request_id)
        if request in self.runner._active_requests:
            raise DuplicateRequestError(invocation.request_id)
        self.runner._active_requests.add(request)
        # Counted as this process's before the row exists: the reaper takes a row of ours
        # that is neither running nor starting for a zombie.
        self.runner._starting.add(invocation.run_id)
        try:
            record = RunRecord(
                id=invocation.run_id,
                app=self.runner.app,
                user_id=user_id,
                session_id=invocation.session.id,
                agent=agent,
                request_id=invocation.request_id,
                owner=self.runner.owner,
                status="running",
                started_at=utcnow(),
                heartbeat_at=utcnow(),
            )
            return record if defer else await self.runner.run_store.create(record)
        except BaseException:
            self.runner._active_requests.discard(request)
            self.runner._starting.discard(invocation.run_id)
            raise

    def joins_create(self, session: Session, turn: Sequence[Message], seed: Sequence[Message]) -> bool:
        """Whether the run's row can be inserted with its user message (issue 18): both
        stores can share a transaction, and nothing else is written between the row and
        the message (no paused run to abandon, no upload to store), so that a duplicate
        request id, found by that write, has still changed nothing."""
        if not getattr(self.runner.session_service, "joins_writes", False) or not isinstance(
            self.runner.run_store, JoinableRunCreate
        ):
            return False
        completion = next((e for e in reversed(session.events) if e.is_runner_completion), None)
        if completion is not None and completion.extensions.get("status") == REQUIRES_ACTION:
            return False
        return not any(p.data is not None and p.artifact is None for m in (*turn, *seed) for p in m.parts)

    async def row_after_failed_start(self, handle: RunHandle, *, created: bool) -> bool:
        """A start whose row was to go in with its user message failed before that write
        held: create the row alone, to learn why and so that the run can end visibly. A
        duplicate request id is refused as before (`DuplicateRequestError`, a session this
        start created dropped); False when the row cannot be created either (the start is
        then undone in memory and the caller re-raises its failure)."""
        request = (handle.record.user_id, handle.record.request_id)
        try:
            await self.runner.run_store.create(handle.record)
            return True
        except DuplicateRequestError:
            with contextlib.suppress(Exception):
                if await self.runner.run_store.get(handle.run_id) is not None:
                    return True  # the append held after all (its answer was lost to a cancel)
            self.runner._active_requests.discard(request)
            self.runner._starting.discard(handle.run_id)
            self.runner._steering.pop(handle.run_id, None)
            if created:
                await self.drop_session(handle.invocation.session)
            raise
        except BaseException:
            self.runner._active_requests.discard(request)
            self.runner._starting.discard(handle.run_id)
            self.runner._steering.pop(handle.run_id, None)
            logger.warning(
                "run %s: its record could not be created after its start failed", handle.run_id, exc_info=True
            )
            return False

    async def paused_run(self, session: Session, results: Sequence[Message], *, agent: str) -> RunRecord | None:
        """Issue 20: the run of this session paused for the client-tool calls `results`
        answer, when its completion event (the session's last) says so and it is still
        paused, for this agent; else None (the results start a new run)."""
        completion = next((e for e in reversed(session.events) if e.is_runner_completion), None)
        if completion is None or completion.extensions.get("status") != REQUIRES_ACTION:
            return None
        waiting = set(completion.extensions.get(CLIENT_CALLS_EXTENSION) or ())
        if not waiting or not {r.tool_call_id for r in results} <= waiting:
            return None
        record = await self.runner.run_store.get(str(completion.extensions.get("run_id") or ""))
        if (
            record is None
            or record.status != REQUIRES_ACTION
            or record.agent != agent
            or record.session_id != session.id
        ):
            return None
        return record

    async def abandon_paused(self, session: Session, *, user_id: str, by: str) -> Event | None:
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
        if await self.runner.run_store.abandon(run_id, user_id=user_id, at=utcnow(), reason=reason) is None:
            return None
        return Event(
            author=self.runner.app,
            object=OBJECT_RUNNER_COMPLETION,
            done=True,
            invocation_id=completion.invocation_id,
            request_id=completion.request_id,
            branch=completion.branch,
            filter_key=completion.filter_key,
            extensions={"run_id": run_id, "status": "cancelled", "abandoned_by": by, CLIENT_CALLS_EXTENSION: calls},
        )

    async def resume(self, invocation: Invocation, *, user_id: str) -> RunRecord:
        """Claim the paused run `invocation` continues (a conditional update: of two
        requests with its results, one wins; the other's results answer calls that have
        one, a `UsageError`)."""
        request = (user_id, invocation.request_id)
        if request in self.runner._active_requests:
            raise DuplicateRequestError(invocation.request_id)
        self.runner._active_requests.add(request)
        self.runner._starting.add(invocation.run_id)
        try:
            record = await self.runner.run_store.resume(
                invocation.run_id,
                user_id=user_id,
                request_id=invocation.request_id,
                owner=self.runner.owner,
                at=utcnow(),
            )
            if record is None:
                raise UsageError(f"run {invocation.run_id!r} is no longer waiting for tool results")
            return record
        except BaseException:
            self.runner._active_requests.discard(request)
            self.runner._starting.discard(invocation.run_id)
            raise

    async def before_run(self, handle: RunHandle) -> Event | None:
        """Issue 20, item 4: the before_run callbacks; the error event that ends the run when
        one of them stops it, else None."""
        if not self.runner.callbacks.before_run:
            return None
        invocation = handle.invocation
        stop, changes = await run_before_run(
            self.runner.callbacks,
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


def turn_events(
    turn: Sequence[Message],
    *,
    seed: Sequence[Message],
    agent: Agent,
    invocation: Invocation,
    options: RunOptions,
    turn_extensions: Mapping[str, Any] | None,
) -> list[Event]:
    """The ledger events `start` writes for the current turn: the seed history first (only
    into an empty session: the caller passes none otherwise), then the turn's messages."""
    opening: list[Event] = []
    if seed:
        # as earlier turns of their own, not as part of this run (runs.core.context.seeding)
        opening.extend(
            seeded_events(
                seed,
                agent=agent.name,
                branch=invocation.branch,
                filter_key=invocation.filter_key,
                own_tools=own_tool_names(agent) | {t.name for t in options.client_tools},
            )
        )
    for current in turn:
        # A tool result is authored by the agent whose call it answers (SPEC 1.4).
        turn_event = (
            Event(
                author=agent.name,
                object=OBJECT_TOOL_RESPONSE,
                message=current,
                extensions=dict(turn_extensions or {}),
            )
            if current.role == "tool"
            else Event(
                author="user" if current.role == "user" else agent.name,
                message=current,
                extensions=dict(turn_extensions or {}),
            )
        )
        opening.append(invocation.stamp(turn_event))
    return opening


def current_turn(message: str | Message | None, tool_results: Sequence[Message]) -> list[Message]:
    """What `start` persists as the current turn: the user message, or the tool results."""
    if not tool_results:
        if message is None:
            raise UsageError("message is empty")
        return [normalize_message(message)]
    if message is not None:
        raise UsageError("pass a message or tool results, not both")
    for result in tool_results:
        if result.role != "tool" or not result.tool_call_id:
            raise UsageError(
                f"a tool result needs role 'tool' and a tool_call_id, got {result.role!r}, {result.tool_call_id!r}"
            )
    return list(tool_results)


def answer_pending_calls(
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


def normalize_message(message: str | Message) -> Message:
    if isinstance(message, str):
        message = Message(role="user", content=message)
    message = normalize_role(message)  # SPEC 1.2 step 1
    if not message.content.strip() and not message.attachments:
        raise UsageError("message is empty")
    if message.role != "user":
        raise UsageError(f"the run message must have role 'user', got {message.role!r}")
    return message
