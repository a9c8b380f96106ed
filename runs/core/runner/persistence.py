"""Writing a run's events (SPEC 1.7, 1.8): a step's held events in one transaction, then
emitted in order; the summary jobs the writes call for; the run's final record, written
with its last step when the stores share a transaction (issue 18).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runs.core.records import REQUIRES_ACTION, JoinableRunStore, RunRecord, RunStatusName
from runs.core.runner.handle import (
    RunHandle,
    account,
    accounted,
    notify,
)
from sessions_app.core.events import (
    Event,
    EventError,
    should_persist,
)
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, Summary
from sessions_app.core.summary import (
    SummaryGate,
    SummaryJob,
    should_enqueue_summary,
    summary_gate,
    tool_round_complete,
)

if TYPE_CHECKING:
    from runs.core.runner.runner import Runner

logger = logging.getLogger(__name__)

# Sessions whose summary gate a runner keeps between runs (least recently used first out).
MAX_KEPT_GATES = 256


class RunWriter:
    """Persists and emits the events of the runner's runs."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        # The summary gate of each session this runner wrote to lately (issue 18, item 6),
        # by session key and creation time (a session made anew under its id starts afresh).
        self._gates: OrderedDict[tuple[SessionKey, datetime], SummaryGate] = OrderedDict()

    def over_event_limit(self, event: Event, persisted: set[str], held: Sequence[Event]) -> bool:
        """Whether persisting this event would exceed `max_events_per_run` (checked before
        the write, so the ledger keeps at most the limit plus the error and completion)."""
        limit = self.runner.max_events_per_run
        if not limit or not should_persist(event) or event.id in persisted:
            return False
        pending = sum(1 for e in held if should_persist(e) and e.id not in persisted)
        return len(persisted) + pending >= limit

    async def flush(self, handle: RunHandle, held: list[Event], persisted: set[str]) -> None:
        """Persist the held events in one transaction, then emit them in order: nothing goes
        out before the write that holds it has committed (SPEC 1.7)."""
        events = await self.persist(handle, held, persisted)
        held.clear()
        for event in events:
            account(handle, event)
            await self.emit(handle, event)

    async def persist(
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
        # The completion marker has no content but is part of the ledger (`RunCompletion.record_end`).
        todo = _to_persist(events, persisted)
        if not todo:
            return list(events)
        try:
            saved = await self.append(handle, todo, joined)
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
                if await self.enqueue_summary(handle, event):
                    asked.add(event.filter_key)
        return [stored.get(id(e), e) for e in events]

    async def append(self, handle: RunHandle, todo: list[Event], joined: Any) -> list[Event]:
        """Append `todo`, with the record write `joined` in its transaction when given. When
        that write fails (a value the run table refuses, a store that cannot join after all)
        the events are written alone: a record's failure never costs the ledger its steps."""
        session = handle.invocation.session
        if joined is not None:
            try:
                saved = await self.runner.session_service.append_events(session, todo, joined=[joined])  # type: ignore[call-arg]  # joined_save checked joins_writes
            except (asyncio.CancelledError, SessionNotFoundError):
                raise
            except Exception:
                logger.warning(
                    "run %s: its record could not go with its last step; written apart", handle.run_id, exc_info=True
                )
            else:
                handle._record_joined = True
                return saved
        return await self.runner.session_service.append_events(session, todo)

    def final_record(
        self,
        handle: RunHandle,
        last: Sequence[Event],
        persisted: set[str],
        status: RunStatusName,
        error: EventError | None,
        ended_at: datetime,
    ) -> RunRecord:
        """The run's record once `last` (its held steps and the completion) is stored and
        emitted: what `RunCompletion.record_end` saves."""
        todo = {e.id for e in _to_persist(last, persisted)}
        record = handle.record
        *steps, completion = last
        for event in steps:
            record = accounted(record, event.replace(seq=0) if event.id in todo and event.seq is None else event)
        return record.replace(
            # The completion marker is a ledger event of the run too.
            event_count=record.event_count + (1 if completion.id in todo or completion.seq is not None else 0),
            status=status,
            ended_at=None if status == REQUIRES_ACTION else ended_at,
            error=error.to_dict() if error is not None else None,
            # SPEC 1.9.3: the execution trace, written with the record (no statement per event).
            trace=_trace_of(handle, status, ended_at),
        )

    def joined_save(self, record: RunRecord) -> Any:
        """The run store's write of `record`, to commit with the run's last ledger append,
        when both stores can (Django's, on one database); else None."""
        if not getattr(self.runner.session_service, "joins_writes", False) or not isinstance(
            self.runner.run_store, JoinableRunStore
        ):
            return None
        return self.runner.run_store.joined_save(record)

    async def enqueue_summary(self, handle: RunHandle, event: Event) -> bool:
        """SPEC 1.8: after a successful append, ask for a summary job when the rule says so;
        whether the rule took `event` (a job was asked for, or the gate spared it)."""
        if self.runner.summary_scheduler is None or event.seq is None:
            return False
        invocation, agent = handle.invocation, handle.agent
        complete = not event.is_tool_result or tool_round_complete(invocation.session.events, event)
        sync = bool(getattr(agent, "sync_summary_intra_run", False))
        if not should_enqueue_summary(event, sync_intra_run=sync, round_complete=complete):
            return False
        if handle._summary_gate is None:
            handle._summary_gate = self.session_gate(invocation.session)
        gate = handle._summary_gate
        # Issue 18: most jobs would read the events after the boundary only to find their
        # trigger short; the gate's counts, kept as events arrive, spare those.
        if gate is not None and not gate.due(
            invocation.session,
            event.filter_key,
            context_window=getattr(agent, "context_window", None),
            summaries=self.newest_summaries(invocation.session),
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
            await self.runner.summary_scheduler.enqueue(job)
        except asyncio.CancelledError:
            raise
        except Exception:  # a summary is maintenance: it never fails a run
            logger.debug("run %s: summary job not enqueued", handle.run_id, exc_info=True)
        return True

    def session_gate(self, session: Session) -> SummaryGate | None:
        """The summary gate for a run of `session`, kept between its runs (issue 18, item 6):
        its backlogs advance over each run's new events instead of being rebuilt from the
        loaded window at every run's first write. A backlog that proves nothing (a gap in
        what it saw: a concurrent run's append), or whose events after its boundary this run
        did not load (a window cut), is dropped and rebuilt from this run's events, as
        before; one whose summary moved is rebuilt by the gate itself."""
        scheduler = self.runner.summary_scheduler
        if scheduler is None:
            return None
        key = (session.key, session.created_at)
        gate = self._gates.get(key)
        if gate is not None:
            self._gates.move_to_end(key)
            # The gate checks a backlog near its threshold on the loaded events after its
            # boundary: kept only when this run loaded all of them.
            loaded_from = min((e.seq for e in session.events if e.seq), default=session.last_seq + 1)
            gate.backlogs = {k: b for k, b in gate.backlogs.items() if b.complete and loaded_from <= b.boundary_seq + 1}
            return gate
        gate = summary_gate(scheduler)
        if gate is None:
            return None
        self._gates[key] = gate
        while len(self._gates) > MAX_KEPT_GATES:
            self._gates.popitem(last=False)
        return gate

    def newest_summaries(self, session: Session) -> dict[str, Summary] | None:
        """The loaded summaries, with those the scheduler's jobs advanced since in their
        place: a job of this run that already ran makes the next ones of its key moot."""
        advanced = getattr(self.runner.summary_scheduler, "advanced_summaries", None)
        newer = advanced(session.key) if callable(advanced) else {}
        if not newer:
            return None
        merged = dict(session.summaries)
        for key, summary in newer.items():
            current = merged.get(key)
            if current is None or summary.last_seq > current.last_seq:
                merged[key] = summary
        return merged

    async def emit(self, handle: RunHandle, event: Event) -> None:
        notify(handle, event)
        for sink in self.runner.sinks:
            try:
                await sink.publish(handle.record, event)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("run %s: sink %r failed", handle.run_id, sink)


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
