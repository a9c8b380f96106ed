"""Summaries: trigger checks (SPEC 3.5) and the backlog that tells cheaply whether one may fire (issue 18)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sessions_app.core.events import Event, filter_matches, utcnow
from sessions_app.core.session import (
    Summary,
)
from sessions_app.core.summary.transcript import (
    CONTEXT_THRESHOLD_MIN_TOKENS,
    CONTEXT_THRESHOLD_RATIO,
    FALLBACK_CONTEXT_WINDOW,
    Tokenizer,
    conversation_lines,
    previous_summary_line,
)


@dataclass(frozen=True, kw_only=True)
class RequestGap:
    """The idle gap before the newest request among the events to summarize (SPEC 3.3 step
    5, 3.5): from the last event of the request before it to its first event. Not
    `available` when that boundary cannot be told safely: no earlier request, the previous
    summary's last event in the same request, or that summary cut off at or after the
    request started."""

    request_id: str
    started_at: datetime
    previous_ended_at: datetime | None = None
    available: bool = False

    @property
    def elapsed_s(self) -> float:
        if not self.available or self.previous_ended_at is None:
            return 0.0
        return (self.started_at - self.previous_ended_at).total_seconds()


@dataclass(frozen=True, kw_only=True)
class TriggerInput:
    """What a check sees: the new events, the previous summary, token counts and the
    window of the model the summary is for; `request_gap` when the events carry request ids
    (None: no observation, as when a summarizer is used on its own)."""

    events: tuple[Event, ...]
    previous: Summary | None
    conversation_tokens: int
    request_tokens: int | None = None
    context_window: int | None = None
    now: datetime = field(default_factory=utcnow)
    request_gap: RequestGap | None = None


Checker = Callable[[TriggerInput], bool]
"""A trigger check: any callable from `TriggerInput` to bool (a custom checker is one)."""


@dataclass(frozen=True, kw_only=True)
class EventThreshold:
    """Fires when more than `events` events are to be summarized (the previous summary counts as one)."""

    events: int

    def __call__(self, check: TriggerInput) -> bool:
        return len(check.events) + (1 if check.previous is not None else 0) > self.events

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return backlog.events + (1 if backlog.has_previous else 0) > self.events


@dataclass(frozen=True, kw_only=True)
class TokenThreshold:
    """Fires when the model-visible request (when known), else the conversation to be
    summarized, has more than `tokens` tokens."""

    tokens: int

    def __call__(self, check: TriggerInput) -> bool:
        measured = check.request_tokens if check.request_tokens is not None else check.conversation_tokens
        return measured > self.tokens

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        # A job passes no request tokens: its check measures the conversation.
        return backlog.tokens_bound > self.tokens


@dataclass(frozen=True, kw_only=True)
class ContextThreshold:
    """A token threshold of max(window × `ratio`, `min_tokens`); the window is the run's
    model's when the caller knows it, else `window`, else `fallback_window`."""

    ratio: float = CONTEXT_THRESHOLD_RATIO
    min_tokens: int = CONTEXT_THRESHOLD_MIN_TOKENS
    window: int | None = None
    fallback_window: int = FALLBACK_CONTEXT_WINDOW

    def threshold(self, window: int | None = None) -> int:
        chosen = window or self.window or self.fallback_window
        return max(int(chosen * self.ratio), self.min_tokens)

    def __call__(self, check: TriggerInput) -> bool:
        return TokenThreshold(tokens=self.threshold(check.context_window))(check)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return TokenThreshold(tokens=self.threshold(context_window)).may_fire(backlog, context_window)


@dataclass(frozen=True, kw_only=True)
class TimeThreshold:
    """Fires when the idle gap before the newest request is longer than `seconds` (SPEC
    3.5): the user came back after a pause, so the history before it is worth folding.
    Without a request-gap observation (a summarizer used on its own), when the newest event
    to summarize is older than `seconds`; with one that is not available, never."""

    seconds: float

    def __call__(self, check: TriggerInput) -> bool:
        if check.request_gap is not None:
            return check.request_gap.available and check.request_gap.elapsed_s > self.seconds
        if not check.events:
            return False
        return (check.now - check.events[-1].created_at).total_seconds() > self.seconds


def observe_request_gap(
    events: Sequence[Event], previous: Summary | None, *, boundary_request_id: str | None = None
) -> RequestGap | None:
    """The request gap before the newest request in `events` (the events after the previous
    summary's boundary that the check looks at, oldest first). None when the newest event
    has no request id. `boundary_request_id`: the request of the event the previous boundary
    ends on, when the caller read it (else a gap reaching back to the boundary is not
    available: the boundary may cut the current request)."""
    if not events or not events[-1].request_id:
        return None
    request_id = events[-1].request_id
    first = next(i for i, e in enumerate(events) if e.request_id == request_id)
    started_at = events[first].created_at
    gap = RequestGap(request_id=request_id, started_at=started_at)
    cutoff = previous.boundary.cutoff_at if previous is not None and previous.boundary is not None else None
    if cutoff is not None and cutoff >= started_at:
        return gap  # the previous summary reaches into this request (SPEC 3.3 step 5)
    # The request starts at its first event here (not at the newest run of them: two runs of
    # one session may interleave); the events before it belong to other requests.
    for event in reversed(events[:first]):
        if event.created_at < started_at:
            return dataclasses.replace(gap, previous_ended_at=event.created_at, available=True)
    if previous is None or previous.boundary is None or cutoff is None:
        return gap  # nothing before this request: no gap to speak of
    if boundary_request_id is None or boundary_request_id == request_id:
        return gap
    return dataclasses.replace(gap, previous_ended_at=cutoff, available=cutoff < started_at)


@dataclass(frozen=True)
class ChecksAll:
    """Fires when every check fires (evaluated in order, stopping at the first that does not)."""

    checks: tuple[Checker, ...]

    def __call__(self, check: TriggerInput) -> bool:
        return all(c(check) for c in self.checks)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return all(checker_may_fire(c, backlog, context_window) for c in self.checks)


@dataclass(frozen=True)
class ChecksAny:
    """Fires when any check fires."""

    checks: tuple[Checker, ...]

    def __call__(self, check: TriggerInput) -> bool:
        return any(c(check) for c in self.checks)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return any(checker_may_fire(c, backlog, context_window) for c in self.checks)


def checker_may_fire(checker: Checker, backlog: SummaryBacklog, context_window: int | None) -> bool:
    """Whether `checker` could fire on a job's input, judged from a backlog's counts.

    Checkers that know how (`may_fire`) answer from the counts; any other callable, a
    `TimeThreshold` included (a job runs later than it is asked for), may always fire.
    """
    may_fire = getattr(checker, "may_fire", None)
    return True if may_fire is None else bool(may_fire(backlog, context_window))


def checks_all(*checks: Checker) -> ChecksAll:
    return ChecksAll(tuple(checks))


def checks_any(*checks: Checker) -> ChecksAny:
    return ChecksAny(tuple(checks))


# -- is a job due? (issue 18: a cheap hot path) -----------------------------------------------------


def _line_cost(line: str, tokenizer: Tokenizer) -> int:
    # One more than the line: the line break that joins it to the next, and any merge
    # across that break, never make the joined transcript cost more than this (a bound
    # tests/sessions/test_summary_backlog.py checks against tiktoken).
    return tokenizer.count_text(line) + 1


@dataclass(kw_only=True)
class SummaryBacklog:
    """What a summary job for `filter_key` would read, counted as events are appended.

    A job reads the events after its summary's boundary and asks its checker; most jobs
    find nothing due. The backlog keeps, for one loaded session, the counts a checker
    looks at (events after the boundary that match the key, an upper bound of the
    transcript's tokens), so that the Runner enqueues a job only when its trigger could
    fire. It is derived data: `rebuild` from the ledger equals `advance` event by event.
    `complete` is False when the loaded events miss one after the boundary (a window cut,
    another writer's append): the counts then prove nothing and the job is enqueued.
    """

    filter_key: str
    boundary_seq: int = 0
    has_previous: bool = False
    previous_tokens: int = 0
    last_seq: int = 0
    events: int = 0
    """Events after the boundary that match the key (what `EventThreshold` counts)."""
    talking: int = 0
    """Of those, events with transcript lines (none: the job has no delta)."""
    tokens: int = 0
    """Upper bound of their transcript's tokens."""
    complete: bool = True

    @classmethod
    def rebuild(
        cls, *, filter_key: str, previous: Summary | None, events: Sequence[Event], last_seq: int, tokenizer: Tokenizer
    ) -> SummaryBacklog:
        """The backlog of a session whose ledger ends at `last_seq`, from its loaded `events`."""
        boundary = previous.last_seq if previous is not None else 0
        backlog = cls(
            filter_key=filter_key,
            boundary_seq=boundary,
            has_previous=previous is not None,
            previous_tokens=_line_cost(previous_summary_line(previous.text), tokenizer) if previous is not None else 0,
            last_seq=boundary,
        )
        backlog.advance(events, tokenizer)
        if backlog.last_seq != last_seq:
            backlog.complete = False
        return backlog

    def advance(self, events: Sequence[Event], tokenizer: Tokenizer) -> None:
        """Count the events of `events` (oldest first) past `last_seq`; only the tail is read."""
        start = len(events)
        while start > 0 and (events[start - 1].seq or 0) > self.last_seq:
            start -= 1
        for event in events[start:]:
            seq = event.seq or 0
            if seq != self.last_seq + 1:
                self.complete = False
            self.last_seq = max(self.last_seq, seq)
            if event.partial or not filter_matches(event.filter_key, self.filter_key):
                continue
            self.events += 1
            lines = conversation_lines(event)
            if lines:
                self.talking += 1
                self.tokens += sum(_line_cost(line, tokenizer) for line in lines)

    @property
    def tokens_bound(self) -> int:
        """At least the tokens of the transcript a job's checker measures."""
        return self.previous_tokens + self.tokens

    def may_fire(self, checker: Checker | None, context_window: int | None) -> bool:
        """Whether a job for this key could do anything now (False: it would stop at
        `no_delta` or `not_triggered`)."""
        if not self.complete:
            return True
        if self.talking == 0:
            return False
        return checker is None or checker_may_fire(checker, self, context_window)


def _counts_only(checker: Checker) -> bool:
    """Whether `checker` decides from the events and token counts alone (not the time)."""
    if isinstance(checker, EventThreshold | TokenThreshold | ContextThreshold):
        return True
    if isinstance(checker, ChecksAll | ChecksAny):
        return all(_counts_only(c) for c in checker.checks)
    return False
