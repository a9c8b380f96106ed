"""The end of a run (SPEC 1.9): the completion event written with what is still held, the
final record, the steering queue closed (its messages dropped or carried into the next
run, SPEC 1.5), the after_run callbacks and the post-run hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runs.core.callbacks import run_after_run
from runs.core.output import OUTPUT_EXTENSION
from runs.core.records import REQUIRES_ACTION, RunRecord, RunStatusName
from runs.core.runner.handle import (
    COMPLETION_BUDGET_S,
    INTERRUPTED_ASSISTANT,
    START_FAILURE_MAX_CHARS,
    RunHandle,
    account,
    notify,
    observe,
)
from runs.core.steering import CARRIED, CARRIED_IDS, DROPPED, QUEUED, QUEUED_ID, QueuedMessage
from runs.core.tools.client import CLIENT_CALLS_EXTENSION
from sessions_app.core.events import (
    OBJECT_ERROR,
    OBJECT_RUNNER_COMPLETION,
    Event,
    EventError,
    Message,
    repair_error,
    utcnow,
)

if TYPE_CHECKING:
    from runs.core.runner.runner import Runner

logger = logging.getLogger(__name__)


class RunCompletion:
    """Ends the runner's runs, also those whose start failed."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    async def end_unstarted(self, handle: RunHandle, exc: BaseException) -> None:
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
            observe(handle, held[-1])
        await self.record_end(handle, status, error, held=held)

    def interrupted_answers(self, handle: RunHandle) -> list[Event]:
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
            observe(handle, event)
            out.append(event)
        return out

    async def complete(
        self,
        handle: RunHandle,
        status: RunStatusName,
        error: EventError | None,
        *,
        held: Sequence[Event] = (),
        persisted: set[str] | None = None,
    ) -> RunRecord:
        """SPEC 1.9: persist and emit the completion event, record the outcome, unregister."""
        await self.record_end(handle, status, error, held=held, persisted=persisted)
        if status == REQUIRES_ACTION:
            # Paused, not ended: after_run and the post-run jobs see the run when it ends.
            await self.after_pause(handle)
            return handle.record
        if self.runner.callbacks.after_run:
            try:
                await run_after_run(self.runner.callbacks, handle.record)
            except Exception:  # the outcome is saved; an observer's failure cannot change it
                logger.exception("run %s: an after_run callback failed", handle.run_id)
        if handle._carried:
            await self.follow_up(handle, handle._carried)
        # Post-run jobs (SPEC 1.9 step 6): after the completion is saved and delivered, so
        # they never delay a reader; a failing hook is logged and the run's outcome stands.
        # The run stays registered meanwhile, so that `close` waits for its hooks; a cancel
        # that arrives now only skips the hooks left.
        try:
            for hook in self.runner.post_run:
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
            self.runner._active.pop(handle.run_id, None)
        return handle.record

    async def after_pause(self, handle: RunHandle) -> None:
        """The end of a run's segment that paused for its client's tool results."""
        try:
            if handle._carried:
                await self.follow_up(handle, handle._carried)
        finally:
            self.runner._active.pop(handle.run_id, None)

    async def follow_up(self, handle: RunHandle, carried: Sequence[QueuedMessage]) -> None:
        """SPEC 1.5: messages still queued when a run ended open the next run of its
        session, in order: the first is its user message, the rest are queued on it and
        taken before its first model step."""
        record = handle.record
        first, *rest = carried
        try:
            follow = await self.runner.start(
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

    def close_steering(self, handle: RunHandle, status: RunStatusName) -> dict[str, Any]:
        """Close the run's queue; what it held is dropped after a cancel (or a start that
        failed), else carried into the next run. The completion event's extensions say which."""
        queue = self.runner._steering.pop(handle.run_id, None)
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

    async def record_end(
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
                author=self.runner.app,
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
                    **self.close_steering(handle, status),
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
        final = self.runner._writer.final_record(handle, last, persisted, status, error, ended_at)
        joined = self.runner._writer.joined_save(final)
        write = self.runner._writer.persist(handle, last, persisted, joined=joined)
        try:
            last = await (asyncio.wait_for(write, COMPLETION_BUDGET_S) if status == "cancelled" else write)
        except Exception:
            logger.exception("run %s: could not persist its completion event", handle.run_id)
        *steps, completion = last
        for event in steps:
            account(handle, event)
            with contextlib.suppress(Exception):
                await self.runner._writer.emit(handle, event)
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
            await asyncio.wait_for(self.runner._writer.emit(handle, completion), COMPLETION_BUDGET_S)
        except Exception:
            logger.exception("run %s: could not emit its completion event", handle.run_id)
        if not saved_with_events:
            try:
                await self.runner.run_store.save(handle.record)
            except Exception:
                logger.exception("run %s: could not save its record", handle.run_id)
        notify(handle, None)
        self.runner._active_requests.discard((handle.record.user_id, handle.record.request_id))


def _output_of(record: RunRecord, held: Sequence[Event]) -> dict[str, Any]:
    """The completion event's `output` extension: the run's validated structured answer
    (issue 20), from its last step when that is still held for this write."""
    for event in reversed(held):
        if OUTPUT_EXTENSION in event.extensions and not event.is_error:
            return {OUTPUT_EXTENSION: event.extensions[OUTPUT_EXTENSION]}
    return {OUTPUT_EXTENSION: record.output} if record.output is not None else {}
