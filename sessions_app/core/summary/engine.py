"""Summaries: the engine (a configured `summarize_session`), the gate and the job schedulers (SPEC 1.8, 3.2)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sessions_app.core.events import Event, filter_matches
from sessions_app.core.session import (
    Session,
    SessionKey,
    SessionService,
    Summary,
)
from sessions_app.core.summary.algorithm import (
    SummaryLock,
    SummaryOutcome,
    summarize_session,
    summary_targets,
)
from sessions_app.core.summary.summarizers import (
    ForkParent,
    Summarizer,
)
from sessions_app.core.summary.transcript import (
    APPROX_TOKENIZER,
    DEFAULT_JOB_TIMEOUT_S,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_EVENTS,
    FULL_SESSION,
    Tokenizer,
    conversation_lines,
    render_conversation,
)
from sessions_app.core.summary.triggers import (
    Checker,
    SummaryBacklog,
    TriggerInput,
    _counts_only,
)

logger = logging.getLogger(__name__)


# -- the engine: a configured summarize_session -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SummaryJob:
    """Summarize (session, filter key) so that the summary covers at least `last_seq`."""

    key: SessionKey
    filter_key: str
    last_seq: int
    context_window: int | None = None
    parent: ForkParent | None = None


@dataclass(frozen=True, kw_only=True)
class SummaryEngine:
    """`summarize_session` with its configuration bound: what the schedulers, the Celery
    task and the LLM flow's synchronous summary call."""

    summarizer: Summarizer | None
    checker: Checker | None = None
    lock: SummaryLock | None = None
    tokenizer: Tokenizer = APPROX_TOKENIZER
    cascade: bool = True
    allowlist: tuple[str, ...] | None = None
    """SPEC 2.6 filter allowlist: the filter keys that get summaries of their own (None: all)."""
    context_window: int | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S

    async def summarize(
        self,
        service: SessionService,
        key: SessionKey,
        *,
        filter_key: str,
        force: bool = False,
        parent: ForkParent | None = None,
        context_window: int | None = None,
        request_tokens: int | None = None,
        covers_seq: int | None = None,
        lock_wait_s: float | None = None,
    ) -> SummaryOutcome:
        return await summarize_session(
            service,
            key,
            filter_key=filter_key,
            summarizer=self.summarizer,
            checker=self.checker,
            force=force,
            lock=self.lock,
            lock_wait_s=self.lock_wait_s if lock_wait_s is None else lock_wait_s,
            parent=parent,
            context_window=context_window or self.context_window,
            request_tokens=request_tokens,
            covers_seq=covers_seq,
            tokenizer=self.tokenizer,
            cascade=self.cascade,
            allowlist=self.allowlist,
            max_events=self.max_events,
        )

    async def run_job(self, service: SessionService, job: SummaryJob) -> SummaryOutcome:
        """Run a job; a second run for the same (session, filter key, last seq) does nothing."""
        return await self.summarize(
            service,
            job.key,
            filter_key=job.filter_key,
            parent=job.parent,
            context_window=job.context_window,
            covers_seq=job.last_seq,
        )


@dataclass(kw_only=True)
class SummaryGate:
    """Decides, for one run's loaded session, whether a summary job is worth enqueueing.

    Keeps a `SummaryBacklog` per filter key, advanced over the events appended since the
    last question and rebuilt when the session's summary moved. A job is due when its key's
    backlog, or the full session's (the job's cascade), may fire. The job still makes its
    own check: this only spares the ones that would find nothing to do.
    """

    checker: Checker | None
    context_window: int | None = None
    tokenizer: Tokenizer = APPROX_TOKENIZER
    cascade: bool = True
    allowlist: tuple[str, ...] | None = None
    backlogs: dict[str, SummaryBacklog] = field(default_factory=dict)

    def due(
        self,
        session: Session,
        filter_key: str,
        *,
        context_window: int | None = None,
        summaries: Mapping[str, Summary] | None = None,
    ) -> bool:
        """Whether a job for `filter_key` may do something. `summaries`: the session's
        summaries when newer than the loaded ones (a job of this run already advanced them)."""
        if not summary_targets(filter_key, allowlist=self.allowlist, cascade=self.cascade):
            return False  # a key outside the allowlist, without the cascade: the job would do nothing
        window = context_window or self.context_window
        known = session.summaries if summaries is None else summaries
        keys = [filter_key] + ([FULL_SESSION] if self.cascade and filter_key != FULL_SESSION else [])
        # Every backlog is brought up to date, even past the first that may fire.
        backlogs = [self.backlog(session, key, known) for key in keys]
        return any(b.may_fire(self.checker, window) and self._fires(session, b, window, known) for b in backlogs)

    def _fires(
        self, session: Session, backlog: SummaryBacklog, window: int | None, summaries: Mapping[str, Summary]
    ) -> bool:
        """The job's own check, made on the loaded events when the bound says it may fire:
        the bound runs ahead of the exact count, and a job near its threshold would read
        the events only to stop at `not_triggered`. Only for checkers that look at counts
        alone (a time threshold may fire later than now)."""
        if not backlog.complete or self.checker is None or not _counts_only(self.checker):
            return True
        previous = summaries.get(backlog.filter_key)
        delta = tuple(
            e
            for e in session.events
            if (e.seq or 0) > backlog.boundary_seq
            and not e.partial
            and filter_matches(e.filter_key, backlog.filter_key)
        )
        if not any(conversation_lines(e) for e in delta):
            return False
        conversation = render_conversation(previous.text if previous is not None else "", delta)
        check = TriggerInput(
            events=delta,
            previous=previous,
            conversation_tokens=self.tokenizer.count_text(conversation),
            context_window=window,
        )
        return bool(self.checker(check))

    def backlog(
        self, session: Session, filter_key: str, summaries: Mapping[str, Summary] | None = None
    ) -> SummaryBacklog:
        previous = (session.summaries if summaries is None else summaries).get(filter_key)
        boundary = previous.last_seq if previous is not None else 0
        known = self.backlogs.get(filter_key)
        if known is None or known.boundary_seq != boundary or known.has_previous != (previous is not None):
            known = SummaryBacklog.rebuild(
                filter_key=filter_key,
                previous=previous,
                events=session.events,
                last_seq=session.last_seq,
                tokenizer=self.tokenizer,
            )
            self.backlogs[filter_key] = known
        else:
            known.advance(session.events, self.tokenizer)
        return known


# -- jobs ------------------------------------------------------------------------------------------


def tool_round_complete(events: Sequence[Event], result: Event) -> bool:
    """Whether every call of the tool round `result` answers has its result in `events`."""
    call_id = result.message.tool_call_id if result.message is not None else None
    answered: set[str] = set()
    for event in reversed(events):
        message = event.message
        if message is None:
            continue
        if message.tool_call_id is not None:
            answered.add(message.tool_call_id)
        if message.tool_calls and call_id in {c.id for c in message.tool_calls}:
            return all(c.id in answered for c in message.tool_calls)
    return True


def should_enqueue_summary(event: Event, *, sync_intra_run: bool = False, round_complete: bool = True) -> bool:
    """SPEC 1.8: whether persisting `event` asks for a summary job.

    Final answers and (complete rounds of) tool results do; user messages, tool calls,
    errors, events without content and those marked `skip_summarization` do not, nor tool
    results while the flow summarizes synchronously within the run.
    """
    if event.is_user_message or event.is_tool_call or event.is_error or not event.has_valid_content:
        return False
    if event.extensions.get("skip_summarization"):
        return False
    if event.is_tool_result:
        return round_complete and not sync_intra_run
    return True


@runtime_checkable
class SummaryScheduler(Protocol):
    """Where summary jobs go: `enqueue` returns at once; the job runs later, elsewhere."""

    async def enqueue(self, job: SummaryJob) -> None:
        """Queue a job (errors are the caller's to log, never the run's to fail)."""
        ...

    async def aclose(self) -> None:
        """Stop running jobs of this scheduler (process shutdown, tests)."""
        ...


def summary_gate(scheduler: SummaryScheduler) -> SummaryGate | None:
    """A fresh gate for one run, from a scheduler that knows its jobs' checker
    (`summary_gate()`); None: every job the rule asks for is enqueued."""
    factory = getattr(scheduler, "summary_gate", None)
    return factory() if callable(factory) else None


def engine_gate(engine: SummaryEngine) -> SummaryGate:
    """The gate of the jobs `engine` runs: its checker, window, tokenizer and cascade."""
    return SummaryGate(
        checker=engine.checker,
        context_window=engine.context_window,
        tokenizer=engine.tokenizer,
        cascade=engine.cascade,
        allowlist=engine.allowlist,
    )


_ADVANCED_SESSIONS = 256


class InProcessSummaryScheduler:
    """Runs jobs as asyncio tasks of the loop that enqueues them, one session at a time in
    order (SPEC 3.2: same session, same worker). Pending jobs of one (session, filter key)
    coalesce into the one with the highest seq: it covers the others. Each job is bounded
    by `job_timeout_s`; failures are logged, never raised.
    """

    def __init__(
        self, engine: SummaryEngine, service: SessionService, *, job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    ) -> None:
        self.engine = engine
        self.service = service
        self.job_timeout_s = job_timeout_s
        self._pending: dict[tuple[str, str], dict[str, SummaryJob]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # The summaries this scheduler's jobs advanced, per session (the newest few sessions).
        self._advanced: OrderedDict[tuple[str, str], dict[str, Summary]] = OrderedDict()
        self.outcomes: list[SummaryOutcome] = []
        """The last outcomes (a few), for tests and the inspector."""

    def summary_gate(self) -> SummaryGate:
        return engine_gate(self.engine)

    def advanced_summaries(self, key: SessionKey) -> dict[str, Summary]:
        """The summaries of `key` that this scheduler's jobs advanced (a run's loaded session
        does not see them: its gate asks here, so that it does not queue jobs they cover)."""
        return dict(self._advanced.get((key.app, key.session_id), {}))

    async def enqueue(self, job: SummaryJob) -> None:
        session = (job.key.app, job.key.session_id)
        pending = self._pending.setdefault(session, {})
        current = pending.get(job.filter_key)
        if current is None or job.last_seq >= current.last_seq:
            pending[job.filter_key] = job
        if session not in self._workers:
            self._workers[session] = asyncio.get_running_loop().create_task(
                self._drain(session), name=f"summary-{job.key.session_id}"
            )

    async def _drain(self, session: tuple[str, str]) -> None:
        try:
            # No await between the emptiness check and leaving: enqueue (same loop) either
            # sees this worker and adds to its queue, or sees none and starts another.
            while pending := self._pending.get(session):
                filter_key = next(iter(pending))
                job = pending.pop(filter_key)
                try:
                    outcome = await asyncio.wait_for(self.engine.run_job(self.service, job), self.job_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Maintenance, not the run's business: one line at warning, details at debug.
                    logger.warning("summary job for session %s failed: %r", job.key.session_id, exc)
                    logger.debug("summary job for session %s failed", job.key.session_id, exc_info=True)
                    continue
                self.outcomes = [*self.outcomes[-49:], outcome]
                if outcome.summaries():
                    self._advanced.setdefault(session, {}).update(outcome.summaries())
                    self._advanced.move_to_end(session)
                    while len(self._advanced) > _ADVANCED_SESSIONS:
                        self._advanced.popitem(last=False)
        finally:
            self._workers.pop(session, None)
            if not self._pending.get(session):
                self._pending.pop(session, None)

    @property
    def idle(self) -> bool:
        return not self._workers

    async def join(self) -> None:
        """Wait until every queued job has run."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def aclose(self) -> None:
        workers = list(self._workers.values())
        for task in workers:
            task.cancel()
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)
        self._pending.clear()


def refresh_summaries(session: Session, outcome: SummaryOutcome) -> None:
    """Put the summaries that advanced into a loaded session (its projection uses them)."""
    session.summaries.update(outcome.summaries())
