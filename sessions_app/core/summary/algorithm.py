"""Summaries: the algorithm (SPEC 3.3, cascade 3.1) and one summariser at a time per (session, filter key)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from sessions_app.core.events import Event, filter_matches, new_id, utcnow
from sessions_app.core.redo import superseded_positions
from sessions_app.core.session import (
    SessionKey,
    SessionNotFoundError,
    SessionService,
    Summary,
    SummaryBoundary,
)
from sessions_app.core.summary.sections import (
    SummarySection,
    anchor_sections,
    render_sections,
    strip_section_headers,
)
from sessions_app.core.summary.summarizers import (
    ForkParent,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from sessions_app.core.summary.transcript import (
    APPROX_TOKENIZER,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_EVENTS,
    FULL_SESSION,
    Tokenizer,
    conversation_lines,
    model_message,
    render_conversation,
)
from sessions_app.core.summary.triggers import (
    Checker,
    RequestGap,
    TriggerInput,
    _counts_only,
    observe_request_gap,
)

logger = logging.getLogger(__name__)


# -- one summariser at a time per (session, filter key) ---------------------------------------


@runtime_checkable
class SummaryLock(Protocol):
    """Mutual exclusion per (session, filter key) across whatever shares the lock."""

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        """A token once the lock is held, or None when `wait_s` ran out first."""
        ...

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        """Give the lock back; a token that no longer holds it releases nothing."""
        ...


class InProcessSummaryLock:
    """SPEC 3.3 step 1: a process-wide lock per (app, user, session, filter key).

    Threads and event loops of one process share it (a Celery task's loop, the run loop),
    so waiting polls instead of parking on one loop's primitive.
    """

    def __init__(self, *, poll_s: float = 0.01) -> None:
        self._guard = threading.Lock()
        self._held: dict[tuple[str, str, str, str], str] = {}
        self.poll_s = poll_s

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        name = (key.app, key.user_id, key.session_id, filter_key)
        deadline = time.monotonic() + wait_s
        while True:
            with self._guard:
                if name not in self._held:
                    token = new_id()
                    self._held[name] = token
                    return token
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(self.poll_s)

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        name = (key.app, key.user_id, key.session_id, filter_key)
        with self._guard:
            if self._held.get(name) == token:
                del self._held[name]


# -- the algorithm (SPEC 3.3, cascade 3.1) ----------------------------------------------------


Reason = Literal[
    "updated",  # text and boundary moved
    "copied",  # the full-session summary took the branch's (SPEC 3.1: no model call)
    "persist_failed",  # summarized, but the write failed: advanced in memory only
    "no_summarizer",
    "busy",  # another summariser held the lock for too long
    "covered",  # the stored summary already covers the job's seq (idempotent job)
    "no_delta",
    "not_triggered",
    "empty_text",
    "error",
    "stale",  # someone else moved the boundary past ours meanwhile
    "follows_branch",  # the full-session summary would only repeat the branch's no-op
    "missing",  # the session was deleted meanwhile
    "not_allowed",  # the filter key is not in the allowlist and there is no cascade (SPEC 3.1)
]


def summary_key_allowed(filter_key: str, allowlist: Sequence[str] | None) -> bool:
    """Whether a filter key gets its own summary (SPEC 2.6 filter allowlist): always without
    an allowlist (None) and for the full session; else when an allowed key is the key, a
    `/`-path prefix of it or below it (matching both ways, as `Event.Filter` does)."""
    if allowlist is None or filter_key == FULL_SESSION:
        return True
    return any(allowed and filter_matches(allowed, filter_key) for allowed in allowlist)


def summary_targets(filter_key: str, *, allowlist: Sequence[str] | None = None, cascade: bool = True) -> list[str]:
    """SPEC 3.1 `SummaryTargets`: the filter keys a summary for `filter_key` rolls forward,
    in order. The full session: itself. A branch: itself when the allowlist lets it, then
    the full session when the cascade is on. Empty: nothing to do."""
    if filter_key == FULL_SESSION:
        return [FULL_SESSION]
    targets = [filter_key] if summary_key_allowed(filter_key, allowlist) else []
    if cascade:
        targets.append(FULL_SESSION)
    return targets


@dataclass(frozen=True, kw_only=True)
class TargetOutcome:
    """What happened to one filter key's summary."""

    filter_key: str
    reason: Reason
    previous: Summary | None = None
    summary: Summary | None = None
    error: str | None = None
    # Read by the cascade: where this run started and whether every event after it matched.
    start_seq: int | None = None
    all_matched: bool | None = None

    @property
    def advanced(self) -> bool:
        """The summary moved on (persisted, or in memory only after a failed write)."""
        return self.reason in ("updated", "copied", "persist_failed")

    @property
    def persisted(self) -> bool:
        return self.reason in ("updated", "copied")


@dataclass(frozen=True, kw_only=True)
class SummaryOutcome:
    """One `summarize_session` call: the requested key first, then the cascade's."""

    targets: tuple[TargetOutcome, ...]

    @property
    def primary(self) -> TargetOutcome:
        return self.targets[0]

    @property
    def advanced(self) -> bool:
        return self.primary.advanced

    def summaries(self) -> dict[str, Summary]:
        """The summaries that advanced, by filter key (to refresh a loaded session)."""
        return {t.filter_key: t.summary for t in self.targets if t.advanced and t.summary is not None}


@dataclass(frozen=True, kw_only=True)
class _Start:
    """Where one target's run started, which every outcome after the summary read carries."""

    filter_key: str
    previous: Summary | None
    start_seq: int
    all_matched: bool | None = None

    def outcome(self, reason: Reason, *, summary: Summary | None = None, error: str | None = None) -> TargetOutcome:
        return TargetOutcome(
            filter_key=self.filter_key,
            reason=reason,
            previous=self.previous,
            summary=summary,
            error=error,
            start_seq=self.start_seq,
            all_matched=self.all_matched,
        )


async def _events_after(service: SessionService, key: SessionKey, after_seq: int, limit: int) -> list[Event]:
    events: list[Event] = []
    cursor = after_seq
    while len(events) < limit:
        want = min(500, limit - len(events))
        page = await service.list_events(key, after_seq=cursor, limit=want)
        events.extend(page)
        if len(page) < want:
            break
        cursor = page[-1].seq or cursor
    return events


@dataclass(frozen=True, kw_only=True)
class _Run:
    """The arguments of one `summarize_session` call, shared by its targets."""

    service: SessionService
    key: SessionKey
    summarizer: Summarizer | None
    checker: Checker | None
    force: bool
    lock: SummaryLock
    lock_wait_s: float
    parent: ForkParent | None
    context_window: int | None
    request_tokens: int | None
    covers_seq: int | None
    tokenizer: Tokenizer
    max_events: int
    now: Callable[[], datetime]


async def summarize_session(
    service: SessionService,
    key: SessionKey,
    *,
    filter_key: str,
    summarizer: Summarizer | None,
    checker: Checker | None = None,
    force: bool = False,
    lock: SummaryLock | None = None,
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
    parent: ForkParent | None = None,
    context_window: int | None = None,
    request_tokens: int | None = None,
    covers_seq: int | None = None,
    tokenizer: Tokenizer = APPROX_TOKENIZER,
    cascade: bool = True,
    allowlist: Sequence[str] | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    now: Callable[[], datetime] = utcnow,
) -> SummaryOutcome:
    """Roll the summary of `filter_key` forward (SPEC 3.3), then the full session's (3.1).

    1. Under the lock for (session, key), read the previous summary; with `covers_seq`,
       stop when it already covers that seq (jobs are idempotent).
    2. Read the events after its boundary that match the key (`Event.filter_key`).
    3. Stop unless there is something to summarize and, unless `force`, `checker` fires
       (no checker: always).
    4. Ask the summarizer; an error or an empty text stops here.
    5. The boundary becomes the last included event (time, id, seq), never earlier than
       the previous one; text and boundary are written together with `advance_summary`.
    A failed write leaves the summary advanced in memory only (`persist_failed`).

    Cascade: for a non-empty key, the full-session summary `""` follows. When it started
    where the branch did and every new event matched the branch, the branch's summary is
    copied (no model call); otherwise it is summarized on its own (never forked: a branch
    request is not a full-session one).

    Allowlist (SPEC 2.6, 3.1 `SummaryTargets`): a branch key it does not let through gets no
    summary of its own; with the cascade on, the full session is summarized instead, its
    trigger checked on the branch's events (what triggered it), never forked from the
    branch's request. Without the cascade nothing happens (`not_allowed`).
    """
    run = _Run(
        service=service,
        key=key,
        summarizer=summarizer,
        checker=checker,
        force=force,
        lock=lock or _PROCESS_LOCK,
        lock_wait_s=lock_wait_s,
        parent=parent,
        context_window=context_window,
        request_tokens=request_tokens,
        covers_seq=covers_seq,
        tokenizer=tokenizer,
        max_events=max_events,
        now=now,
    )
    keys = summary_targets(filter_key, allowlist=allowlist, cascade=cascade)
    if not keys:
        return SummaryOutcome(targets=(TargetOutcome(filter_key=filter_key, reason="not_allowed"),))
    try:
        if keys[0] != filter_key:
            full = await _summarize_target(run, FULL_SESSION, parent=None, check_key=filter_key)
            return SummaryOutcome(targets=(full,))
        primary = await _summarize_target(run, filter_key, parent=parent)
        targets = [primary]
        if filter_key != FULL_SESSION and cascade and primary.all_matched is not None:
            targets.append(await _cascade(run, primary))
    except SessionNotFoundError:
        # Deleted while its summary was due: nothing left to summarize, not a failure.
        return SummaryOutcome(targets=(TargetOutcome(filter_key=filter_key, reason="missing"),))
    return SummaryOutcome(targets=tuple(targets))


_PROCESS_LOCK = InProcessSummaryLock()


def without_superseded(events: tuple[Event, ...]) -> tuple[Event, ...]:
    """`events` less the turns a later one of them regenerates or edits (issue 21,
    `sessions_app.core.redo`): the model no longer sees those, so a summary should not
    bring them back. The boundary still moves past them (it is taken from all the events)."""
    shown = [(e, m) for e in events if (m := model_message(e)) is not None]
    hidden = superseded_positions(shown)
    if not hidden:
        return events
    dropped = {shown[i][0].id for i in hidden}
    return tuple(e for e in events if e.id not in dropped)


async def _summarize_target(
    run: _Run, filter_key: str, *, parent: ForkParent | None, check_key: str | None = None
) -> TargetOutcome:
    if run.summarizer is None:
        return TargetOutcome(filter_key=filter_key, reason="no_summarizer")
    token = await run.lock.acquire(run.key, filter_key, wait_s=run.lock_wait_s)
    if token is None:
        return TargetOutcome(filter_key=filter_key, reason="busy")
    try:
        return await _summarize_locked(run, filter_key, parent=parent, check_key=check_key)
    finally:
        try:
            await run.lock.release(run.key, filter_key, token)
        except Exception:
            logger.warning("summary lock for %s/%r not released (it expires)", run.key.session_id, filter_key)


async def _summarize_locked(
    run: _Run, filter_key: str, *, parent: ForkParent | None, check_key: str | None = None
) -> TargetOutcome:
    """`check_key`: the branch whose events the trigger checks (SPEC 3.1: a full-session
    summary a branch triggered)."""
    assert run.summarizer is not None
    previous = await run.service.get_summary(run.key, filter_key=filter_key)
    start = previous.last_seq if previous is not None else 0
    base = _Start(filter_key=filter_key, previous=previous, start_seq=start)
    if run.covers_seq is not None and start >= run.covers_seq:
        return base.outcome("covered")
    raw = await _events_after(run.service, run.key, start, run.max_events)
    delta = tuple(e for e in raw if filter_matches(e.filter_key, filter_key) and not e.partial)
    base = dataclasses.replace(base, all_matched=len(delta) == len(raw))
    if not any(conversation_lines(e) for e in delta):
        return base.outcome("no_delta")
    if not run.force and run.checker is not None:
        checked = delta if check_key is None else tuple(e for e in delta if filter_matches(e.filter_key, check_key))
        # SPEC 3.4: a summarizer that leaves some events for later (skip-recent) is triggered
        # by the events it would summarize.
        select = getattr(run.summarizer, "trigger_events", None)
        if callable(select):
            checked = tuple(select(checked))
        gap = None if _counts_only(run.checker) else await _request_gap(run, checked, previous)
        check = TriggerInput(
            events=checked,
            previous=previous,
            conversation_tokens=run.tokenizer.count_text(
                render_conversation(previous.text if previous else "", checked)
            ),
            request_tokens=run.request_tokens,
            context_window=run.context_window,
            now=run.now(),
            request_gap=gap,
        )
        if not run.checker(check):
            return base.outcome("not_triggered")
    try:
        result = await run.summarizer.summarize(
            SummaryRequest(filter_key=filter_key, previous=previous, events=without_superseded(delta), parent=parent)
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("summary of %s/%r failed: %s", run.key.session_id, filter_key, exc)
        return base.outcome("error", error=f"{type(exc).__name__}: {exc}")
    text = result.text.strip()
    if not text:
        return base.outcome("empty_text")
    summary = _next_summary(run, filter_key, previous, delta, result)
    try:
        stored = await run.service.advance_summary(run.key, summary)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("summary of %s/%r advanced but was not stored: %s", run.key.session_id, filter_key, exc)
        return base.outcome("persist_failed", summary=summary, error=f"{type(exc).__name__}: {exc}")
    if stored is None:
        return base.outcome("stale")
    return base.outcome("updated", summary=stored)


async def _request_gap(run: _Run, events: Sequence[Event], previous: Summary | None) -> RequestGap | None:
    """`observe_request_gap`, reading the event the previous boundary ends on when the gap
    reaches back to it (one read, only for checkers that look at time)."""
    gap = observe_request_gap(events, previous)
    if gap is None or gap.available or previous is None or previous.boundary is None:
        return gap
    if previous.boundary.cutoff_at >= gap.started_at or events[0].request_id != gap.request_id:
        return gap  # unavailable for a reason the boundary event does not change
    found = await run.service.list_events(run.key, after_seq=previous.boundary.last_seq - 1, limit=1)
    boundary_event = found[0] if found and found[0].seq == previous.boundary.last_seq else None
    if boundary_event is None:
        return gap
    return observe_request_gap(events, previous, boundary_request_id=boundary_event.request_id)


def anchored_text(result: SummaryResult, *, last_seq: int) -> str:
    """The text stored for a summarizer's result (C1): its sections, anchored to seqs
    1..`last_seq`; a result without sections (a single model summary, a fork) is one
    section covering all of them, since it folds the previous summary in."""
    sections = result.sections or (
        SummarySection(first_seq=1, last_seq=last_seq, text=strip_section_headers(result.text)),
    )
    anchored = anchor_sections(sections, last_seq=last_seq)
    return render_sections(anchored) if anchored else result.text.strip()


def _next_summary(
    run: _Run, filter_key: str, previous: Summary | None, delta: Sequence[Event], result: SummaryResult
) -> Summary:
    last = result.last_included
    if last is None or not any(e.id == last.id for e in delta):
        last = delta[-1]
    assert last.seq is not None
    text = anchored_text(result, last_seq=last.seq)
    covered = [e for e in delta if (e.seq or 0) <= last.seq]
    visible = [m for m in (model_message(e) for e in covered) if m is not None]
    cutoff = last.created_at
    if previous is not None and previous.boundary is not None and previous.boundary.cutoff_at > cutoff:
        cutoff = previous.boundary.cutoff_at  # monotone even if clocks disagree
    return Summary(
        filter_key=filter_key,
        text=text,
        boundary=SummaryBoundary(cutoff_at=cutoff, last_event_id=last.id, last_seq=last.seq),
        updated_at=run.now(),
        version=(previous.version if previous is not None else 0) + 1,
        covered_events=(previous.covered_events if previous is not None else 0) + len(visible),
        covered_tokens=(previous.covered_tokens if previous is not None else 0) + run.tokenizer.count_messages(visible),
    )


async def _cascade(run: _Run, primary: TargetOutcome) -> TargetOutcome:
    full = await run.service.get_summary(run.key, filter_key=FULL_SESSION)
    same_start = (full.last_seq if full is not None else 0) == primary.start_seq and (
        (full.text if full is not None else "") == (primary.previous.text if primary.previous is not None else "")
    )
    if not (same_start and primary.all_matched):
        return await _summarize_target(run, FULL_SESSION, parent=None)
    if not primary.advanced or primary.summary is None:
        return TargetOutcome(filter_key=FULL_SESSION, reason="follows_branch", previous=full)
    copy = dataclasses.replace(primary.summary, filter_key=FULL_SESSION)
    if not primary.persisted:
        return TargetOutcome(filter_key=FULL_SESSION, reason="persist_failed", previous=full, summary=copy)
    try:
        stored = await run.service.advance_summary(run.key, copy)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return TargetOutcome(
            filter_key=FULL_SESSION,
            reason="persist_failed",
            previous=full,
            summary=copy,
            error=f"{type(exc).__name__}: {exc}",
        )
    if stored is None:
        return TargetOutcome(filter_key=FULL_SESSION, reason="stale", previous=full)
    return TargetOutcome(filter_key=FULL_SESSION, reason="copied", previous=full, summary=stored)
