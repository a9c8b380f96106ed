"""SPEC 3.4 summarizer options around any summarizer: skip-recent, pre/post hooks, the report
hook and a summarizer chosen at summary time, driven through `summarize_session`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, Summary
from sessions_app.core.summary import SummaryRequest, SummaryResult, summarize_session
from sessions_app.core.summary_hooks import (
    DynamicSummarizer,
    HookedSummarizer,
    SummaryHookInput,
    SummaryHookOutput,
    SummaryReport,
    skip_last,
)
from tests.sessions.ledger_builders import APP, Ledger


@dataclass
class Recording:
    """A summarizer that answers with the transcript size and records what it was given."""

    name: str = "recording"
    requests: list[SummaryRequest] = field(default_factory=list)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text=f"{len(request.events)} events after: {request.previous_text or '-'}")


async def stored(ledger: Ledger) -> tuple[InMemorySessionService, Session]:
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await ledger.append_to(service, session)
    return service, session


def two_turns() -> Ledger:
    ledger = Ledger()
    ledger.simple_turn("Is checkout slow?", "Yes, 3 timeouts.", tool=("search_logs", '{"timeouts": 3}'))
    ledger.simple_turn("And the ticket?", "INC-7 is open.")
    return ledger


async def summary_of(service: InMemorySessionService, session: Session) -> Summary | None:
    return await service.get_summary(session.key, filter_key=APP)


async def test_spec_3_4_skip_recent_leaves_the_newest_events_for_a_later_summary() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    inner = Recording()
    summarizer = HookedSummarizer(inner, skip_recent=skip_last(3))
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)
    total = len(ledger.events)
    assert outcome.primary.reason == "updated"
    [request] = inner.requests
    assert [e.seq for e in request.events] == list(range(1, total - 2))
    written = await summary_of(service, session)
    assert written is not None and written.last_seq == total - 3  # the skipped events wait
    # What is left after skipping has no user text and there is no summary to fold: nothing to do.
    greeted = Ledger()
    greeted.add(Event(author="support", message=Message(role="assistant", content="Hello, how can I help?")))
    greeted.simple_turn("Is checkout slow?", "Yes.")
    service, session = await stored(greeted)
    without_user = HookedSummarizer(inner := Recording(), skip_recent=lambda events: len(events) - 1)
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=without_user, cascade=False)
    assert outcome.primary.reason == "empty_text" and inner.requests == []
    assert await summary_of(service, session) is None


async def test_spec_3_4_the_pre_hook_rewrites_the_input_and_the_post_hook_the_text() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    await summarize_session(service, session.key, filter_key=APP, summarizer=Recording(), cascade=False)
    ledger.simple_turn("Who owns it?", "The payments team.")
    await service.append_events(session, [e.replace(seq=None) for e in ledger.events[-4:]])

    async def pre(given: SummaryHookInput) -> SummaryHookInput:
        kept = tuple(e for e in given.events if e.role != "system")
        return dataclasses.replace(given, events=kept, previous_text=given.previous_text.upper())

    async def post(written: SummaryHookOutput) -> str:
        return f"[checked] {written.text}"

    inner = Recording()
    outcome = await summarize_session(
        service,
        session.key,
        filter_key=APP,
        summarizer=HookedSummarizer(inner, pre_hook=pre, post_hook=post),
        cascade=False,
    )
    assert outcome.primary.reason == "updated"
    [request] = inner.requests
    assert all(e.role != "system" for e in request.events)
    assert request.previous_text == request.previous_text.upper() and request.previous_text
    written = await summary_of(service, session)
    assert written is not None and "[checked]" in written.text
    assert written.last_seq == len(ledger.events)  # the boundary covers every event given, rewritten or not


@pytest.mark.parametrize("abort", [False, True])
async def test_spec_3_4_a_failing_hook_is_ignored_unless_it_should_abort(abort: bool) -> None:
    service, session = await stored(two_turns())

    async def broken(given: SummaryHookInput) -> SummaryHookInput:
        raise RuntimeError("hook down")

    summarizer = HookedSummarizer(Recording(), pre_hook=broken, abort_on_hook_error=abort)
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)
    if abort:
        assert outcome.primary.reason == "error" and "hook down" in (outcome.primary.error or "")
        assert await summary_of(service, session) is None  # neither text nor boundary moved
    else:
        assert outcome.primary.reason == "updated"


async def test_spec_3_4_the_report_hook_hears_what_each_summary_did() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    reports: list[SummaryReport] = []

    async def post(written: SummaryHookOutput) -> None:
        return None

    summarizer = HookedSummarizer(
        Recording(),
        name="audited",
        skip_recent=skip_last(1),
        post_hook=post,
        report_hook=reports.append,
    )
    await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)
    [report] = reports
    total = len(ledger.events)
    assert (report.summarizer, report.filter_key, report.events_given, report.events_skipped) == (
        "audited",
        APP,
        total,
        1,
    )
    assert report.events_summarized == total - 1 and report.last_included_seq == total - 1
    assert (report.pre_hook, report.post_hook, report.error) == ("none", "none", None) and report.text_chars > 0


async def test_spec_3_4_a_dynamic_summarizer_is_chosen_at_summary_time() -> None:
    service, session = await stored(two_turns())
    short, long = Recording(name="short"), Recording(name="long")

    async def choose(request: SummaryRequest) -> Recording | None:
        if request.filter_key != APP:
            return None
        return long if len(request.events) > 5 else short

    outcome = await summarize_session(
        service, session.key, filter_key=APP, summarizer=DynamicSummarizer(choose), cascade=False
    )
    assert outcome.primary.reason == "updated" and len(long.requests) == 1 and short.requests == []
    other = Ledger(filter_key="elsewhere")
    other.simple_turn("q", "a")
    await service.append_events(session, [e.replace(seq=None) for e in other.events])
    outcome = await summarize_session(
        service, session.key, filter_key="elsewhere", summarizer=DynamicSummarizer(choose), cascade=False
    )
    assert outcome.primary.reason == "empty_text"  # no summarizer for that key: nothing changes


def test_skip_last_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match="-1"):
        skip_last(-1)


async def test_spec_3_4_the_trigger_looks_at_the_events_skip_recent_leaves_in() -> None:
    from sessions_app.core.summary import EventThreshold

    ledger = two_turns()
    total = len(ledger.events)
    for skipped, reason in ((total - 4, "not_triggered"), (total - 5, "updated")):
        service, session = await stored(ledger)
        summarizer = HookedSummarizer(Recording(), skip_recent=skip_last(skipped))
        outcome = await summarize_session(
            service, session.key, filter_key=APP, summarizer=summarizer, checker=EventThreshold(events=4), cascade=False
        )
        assert outcome.primary.reason == reason  # more than four events left in: it fires
