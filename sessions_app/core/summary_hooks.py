"""Summarizer options of SPEC 3.4 that wrap any summarizer: pre/post hooks, a report hook,
skip-recent, and a summarizer chosen at summary time.

`HookedSummarizer` wraps a `Summarizer` (model, chunked or extractive alike):

1. skip-recent drops the newest events the callable names (they wait for a later summary);
   when what is left has no user text, and no previous summary to fold with some content,
   there is nothing to summarize and the answer is empty (the boundary stays);
2. the pre-summary hook may rewrite the events and the previous summary's text;
3. the wrapped summarizer writes the text;
4. the post-summary hook may replace the text;
5. the report hook hears what happened.

A hook that raises is logged and ignored, unless `abort_on_hook_error`: then the error goes
up and `summarize_session` records it (`error`), so neither text nor boundary moves.

The boundary is always an event of the request: skip-recent stops it at the last event kept,
and a prefix fallback of the wrapped summarizer on rewritten events is mapped back to the
request's events by id, else by seq.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sessions_app.core.events import Event
from sessions_app.core.session import Summary
from sessions_app.core.summary import Summarizer, SummaryRequest, SummaryResult, conversation_lines

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SummaryHookInput:
    """What the pre-summary hook sees, and returns changed (or None to keep it)."""

    filter_key: str
    previous_text: str
    events: tuple[Event, ...]


@dataclass(frozen=True, kw_only=True)
class SummaryHookOutput:
    """What the post-summary hook sees: the text and the events it was written from."""

    filter_key: str
    text: str
    events: tuple[Event, ...]


HookOutcome = Literal["none", "applied", "failed"]


@dataclass(frozen=True, kw_only=True)
class SummaryReport:
    """One summary through a `HookedSummarizer`, for the report hook."""

    summarizer: str
    filter_key: str
    events_given: int
    events_skipped: int
    events_summarized: int
    last_included_seq: int | None
    text_chars: int
    pre_hook: HookOutcome
    post_hook: HookOutcome
    error: str | None = None


PreSummaryHook = Callable[[SummaryHookInput], Awaitable[SummaryHookInput | None]]
PostSummaryHook = Callable[[SummaryHookOutput], Awaitable[str | None]]
ReportHook = Callable[[SummaryReport], None]
SkipRecent = Callable[[Sequence[Event]], int]
"""How many of the newest events to leave for a later summary (SPEC 3.4 `WithSkipRecent`)."""


def skip_last(count: int) -> SkipRecent:
    """A skip-recent that always leaves the newest `count` events."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count!r}")
    return lambda events: count


class HookedSummarizer:
    """A summarizer with SPEC 3.4's hooks and skip-recent around another one."""

    def __init__(
        self,
        inner: Summarizer,
        *,
        name: str | None = None,
        pre_hook: PreSummaryHook | None = None,
        post_hook: PostSummaryHook | None = None,
        abort_on_hook_error: bool = False,
        skip_recent: SkipRecent | None = None,
        report_hook: ReportHook | None = None,
    ) -> None:
        self.inner = inner
        self.name = name or inner.name
        self.pre_hook = pre_hook
        self.post_hook = post_hook
        self.abort_on_hook_error = abort_on_hook_error
        self.skip_recent = skip_recent
        self.report_hook = report_hook

    def trigger_events(self, events: Sequence[Event]) -> Sequence[Event]:
        """The events a trigger check looks at (SPEC 3.4): those it would summarize, the
        newest ones skip-recent leaves for later taken off (`summarize_session` asks)."""
        if self.skip_recent is None:
            return events
        skipped = min(len(events), max(0, int(self.skip_recent(events))))
        return events[: len(events) - skipped]

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        report: dict[str, Any] = {
            "events_given": len(request.events),
            "events_skipped": 0,
            "events_summarized": 0,
            "pre_hook": "none",
            "post_hook": "none",
        }
        try:
            result = await self._summarize(request, report)
        except Exception as exc:
            self._report(request, report, SummaryResult(text=""), error=f"{type(exc).__name__}: {exc}")
            raise
        self._report(request, report, result)
        return result

    async def _summarize(self, request: SummaryRequest, report: dict[str, Any]) -> SummaryResult:
        """The summary; `report` is filled in on the way."""
        events = tuple(self.trigger_events(request.events))
        report["events_skipped"] = len(request.events) - len(events)
        kept = events
        if not _worth_summarizing(kept, request.previous_text):
            return SummaryResult(text="")
        previous_text = request.previous_text
        if self.pre_hook is not None:
            try:
                changed = await self.pre_hook(
                    SummaryHookInput(filter_key=request.filter_key, previous_text=previous_text, events=events)
                )
            except Exception as exc:
                if self.abort_on_hook_error:
                    raise
                logger.warning("pre-summary hook of %s failed, ignored: %s", self.name, exc)
                report["pre_hook"] = "failed"
            else:
                if changed is not None:
                    events, previous_text = tuple(changed.events), changed.previous_text
                    report["pre_hook"] = "applied"
        rewritten = events != kept or previous_text != request.previous_text
        inner_request = SummaryRequest(
            filter_key=request.filter_key,
            previous=_with_text(request.previous, previous_text, request.filter_key),
            events=events,
            # A forked request carries the original messages: not after a rewrite or a skip.
            parent=None if rewritten or kept != request.events else request.parent,
        )
        report["events_summarized"] = len(events)
        result = await self.inner.summarize(inner_request)
        last = _original_last(request.events, kept, result.last_included, rewritten=rewritten)
        if last is False:
            return SummaryResult(text="")  # a cut the request's events cannot express
        text = result.text
        if self.post_hook is not None and text.strip():
            try:
                replaced = await self.post_hook(
                    SummaryHookOutput(filter_key=request.filter_key, text=text, events=events)
                )
            except Exception as exc:
                if self.abort_on_hook_error:
                    raise
                logger.warning("post-summary hook of %s failed, ignored: %s", self.name, exc)
                report["post_hook"] = "failed"
            else:
                if replaced is not None:
                    text = replaced
                    report["post_hook"] = "applied"
        # Sections belong to the text they were rendered into: a replaced text has none.
        sections = result.sections if text == result.text else ()
        return SummaryResult(text=text, last_included=last, sections=sections)

    def _report(
        self, request: SummaryRequest, report: dict[str, Any], result: SummaryResult, *, error: str | None = None
    ) -> None:
        if self.report_hook is None:
            return
        last = result.last_included or (request.events[-1] if result.text and request.events else None)
        try:
            self.report_hook(
                SummaryReport(
                    summarizer=self.name,
                    filter_key=request.filter_key,
                    events_given=report["events_given"],
                    events_skipped=report["events_skipped"],
                    events_summarized=report.get("events_summarized", 0),
                    last_included_seq=last.seq if last is not None else None,
                    text_chars=len(result.text),
                    pre_hook=report["pre_hook"],
                    post_hook=report["post_hook"],
                    error=error,
                )
            )
        except Exception:
            logger.warning("summary report hook of %s failed, ignored", self.name, exc_info=True)


def _worth_summarizing(events: Sequence[Event], previous_text: str) -> bool:
    """SPEC 3.4 after skip-recent: some user text, or a previous summary to fold together
    with some content."""
    if any(e.is_user_message and e.text for e in events):
        return True
    return bool(previous_text) and any(conversation_lines(e) for e in events)


def _with_text(previous: Summary | None, text: str, filter_key: str) -> Summary | None:
    if previous is not None:
        return previous if previous.text == text else dataclasses.replace(previous, text=text)
    return Summary(filter_key=filter_key, text=text) if text else None


def _original_last(
    given: Sequence[Event], kept: Sequence[Event], last: Event | None, *, rewritten: bool
) -> Event | Literal[False] | None:
    """The request event the summary ends on (None: every event given). False when a cut
    of rewritten events maps to none of the request's."""
    if last is None:
        return None if len(kept) == len(given) else kept[-1]
    if not rewritten:
        return last
    by_id = next((e for e in kept if e.id == last.id), None)
    if by_id is not None:
        return by_id
    if last.seq is not None:
        earlier = [e for e in kept if e.seq is not None and e.seq <= last.seq]
        if earlier:
            return earlier[-1]
    return False


SummarizerChoice = Callable[[SummaryRequest], "Summarizer | Awaitable[Summarizer | None] | None"]


class DynamicSummarizer:
    """SPEC 3.4: the summarizer is chosen at summary time (by filter key, size, tenant...).
    `choose` returns a summarizer (or an awaitable of one); None: no summary this time."""

    def __init__(self, choose: SummarizerChoice, *, name: str = "dynamic") -> None:
        self.choose = choose
        self.name = name

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        chosen = self.choose(request)
        if inspect.isawaitable(chosen):
            chosen = await chosen
        if chosen is None:
            return SummaryResult(text="")
        return await chosen.summarize(request)
