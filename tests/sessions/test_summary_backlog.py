"""The summary gate (issue 18): counts kept as events arrive decide whether a job is due.

The ledger stays the truth: a backlog rebuilt from the events equals the one advanced event
by event, its token bound is never below what a job's checker measures, and a job the gate
spares would have found nothing to do.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from runs.core.tokens import count_text
from sessions_app.core.events import Event, Message, ToolCall, utcnow
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Summary, SummaryBoundary
from sessions_app.core.summary import (
    ContextThreshold,
    EventThreshold,
    InProcessSummaryScheduler,
    SummaryBacklog,
    SummaryEngine,
    SummaryGate,
    SummaryJob,
    SummaryRequest,
    SummaryResult,
    Tokenizer,
    checks_all,
    checks_any,
    previous_summary_line,
    render_conversation,
)

TIKTOKEN_COUNT = Tokenizer(count_text=count_text)
WORDS = st.sampled_from(
    ["checkout", "timeout", " ", "\n", "  ", "T-1001", "é", "数据", "!!", "{}", '"q"', "web-3", "."]
)
TEXT = st.lists(WORDS, max_size=12).map("".join)


@st.composite
def events(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from(["user", "call", "result", "answer", "empty", "partial", "other_key"]))
    text = draw(TEXT)
    if kind == "user":
        return Event(author="user", filter_key="app", message=Message(role="user", content=text or "hi"))
    if kind == "call":
        call = ToolCall(id="c", name="lookup", arguments=draw(st.sampled_from(["{}", '{"q": "x"}', text])))
        return Event(author="agent", filter_key="app", message=Message(role="assistant", tool_calls=(call,)))
    if kind == "result":
        return Event(
            author="agent",
            filter_key="app",
            message=Message(role="tool", content=text, tool_call_id="c", tool_name="lookup"),
        )
    if kind == "empty":
        return Event(author="app", filter_key="app", object="runner.completion", done=True)
    if kind == "partial":
        return Event(author="agent", filter_key="app", partial=True, message=Message(role="assistant", content=text))
    if kind == "other_key":
        return Event(author="other", filter_key="elsewhere", message=Message(role="assistant", content=text or "x"))
    return Event(author="agent", filter_key="app", message=Message(role="assistant", content=text or "done"))


def _numbered(items: list[Event]) -> list[Event]:
    return [e.replace(seq=i) for i, e in enumerate(items, start=1)]


def _previous(text: str, last_seq: int) -> Summary | None:
    if last_seq == 0:
        return None
    return Summary(
        filter_key="app",
        text=text or "earlier",
        boundary=SummaryBoundary(cutoff_at=utcnow(), last_event_id=f"e{last_seq}", last_seq=last_seq),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(events(), max_size=25), st.integers(min_value=0, max_value=25), TEXT, st.sampled_from(["app", ""]))
def test_a_backlog_advanced_event_by_event_equals_one_rebuilt_from_the_ledger(
    raw: list[Event], boundary: int, text: str, filter_key: str
) -> None:
    ledger = _numbered(raw)
    boundary = min(boundary, len(ledger))
    previous = _previous(text, boundary)
    # The loaded window starts anywhere at or before the boundary (a turn anchor).
    loaded = ledger[max(0, boundary - 2) :]
    incremental = SummaryBacklog.rebuild(
        filter_key=filter_key,
        previous=previous,
        events=[e for e in loaded if (e.seq or 0) <= boundary],
        last_seq=boundary,
        tokenizer=TIKTOKEN_COUNT,
    )
    for end in range(boundary + 1, len(ledger) + 1):
        incremental.advance(ledger[:end], TIKTOKEN_COUNT)
    rebuilt = SummaryBacklog.rebuild(
        filter_key=filter_key, previous=previous, events=loaded, last_seq=len(ledger), tokenizer=TIKTOKEN_COUNT
    )
    assert incremental == rebuilt
    assert rebuilt.complete


@settings(max_examples=200, deadline=None)
@given(st.lists(events(), max_size=25), TEXT)
def test_the_token_bound_is_never_below_what_a_job_measures(raw: list[Event], previous_text: str) -> None:
    ledger = _numbered(raw)
    previous = Summary(filter_key="app", text=previous_text) if previous_text else None
    backlog = SummaryBacklog.rebuild(
        filter_key="app", previous=previous, events=ledger, last_seq=len(ledger), tokenizer=TIKTOKEN_COUNT
    )
    delta = [e for e in ledger if not e.partial and e.filter_key == "app"]
    measured = count_text(render_conversation(previous.text if previous else "", delta))
    assert measured <= backlog.tokens_bound
    if previous is not None:
        assert backlog.previous_tokens >= count_text(previous_summary_line(previous.text))


def test_a_missing_event_after_the_boundary_makes_the_backlog_prove_nothing() -> None:
    ledger = _numbered([Event(author="user", filter_key="app", message=Message(role="user", content="hi"))] * 4)
    gapped = SummaryBacklog.rebuild(
        filter_key="app", previous=None, events=ledger[2:], last_seq=4, tokenizer=TIKTOKEN_COUNT
    )
    assert not gapped.complete and gapped.may_fire(EventThreshold(events=100), None)
    backlog = SummaryBacklog.rebuild(
        filter_key="app", previous=None, events=ledger[:2], last_seq=2, tokenizer=TIKTOKEN_COUNT
    )
    backlog.advance([*ledger[:2], ledger[3]], TIKTOKEN_COUNT)  # seq 3 came from another writer
    assert not backlog.complete


class EchoSummarizer:
    name = "echo"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(text=f"through {request.events[-1].seq}")


CHECKERS = [
    ContextThreshold(window=200, ratio=0.5, min_tokens=40),
    EventThreshold(events=6),
    checks_all(EventThreshold(events=3), ContextThreshold(window=200, ratio=0.5, min_tokens=20)),
    checks_any(EventThreshold(events=9), ContextThreshold(window=100, ratio=0.5, min_tokens=30)),
    None,
]


@settings(max_examples=60, deadline=None)
@given(st.lists(events(), min_size=1, max_size=30), st.sampled_from(range(len(CHECKERS))))
def test_a_job_the_gate_spares_would_have_found_nothing_to_do(raw: list[Event], which: int) -> None:
    checker = CHECKERS[which]

    async def play() -> None:
        service = InMemorySessionService()
        session = await service.create_session(app="app", user_id="alice")
        engine = SummaryEngine(summarizer=EchoSummarizer(), checker=checker, tokenizer=TIKTOKEN_COUNT)
        gate = SummaryGate(checker=checker, tokenizer=TIKTOKEN_COUNT)
        for event in raw:
            saved = await service.append_event(session, event.replace(filter_key=event.filter_key or "app"))
            due = gate.due(session, "app")
            outcome = await engine.summarize(service, session.key, filter_key="app")
            if not due:
                assert all(not t.advanced for t in outcome.targets), (saved, outcome)
            # What a later run loads: the summaries as they now stand.
            session.summaries.update(outcome.summaries())

    asyncio.run(play())


def test_the_gate_asks_no_job_for_events_a_job_of_the_run_already_summarized() -> None:
    async def play() -> None:
        service = InMemorySessionService()
        session = await service.create_session(app="app", user_id="alice")
        checker = EventThreshold(events=3)
        engine = SummaryEngine(summarizer=EchoSummarizer(), checker=checker, tokenizer=TIKTOKEN_COUNT)
        scheduler = InProcessSummaryScheduler(engine, service)
        gate = SummaryGate(checker=checker, tokenizer=TIKTOKEN_COUNT, cascade=False)
        for n in range(5):
            await service.append_event(
                session, Event(author="agent", filter_key="app", message=Message(role="assistant", content=f"fact {n}"))
            )
        assert gate.due(session, "app")
        await scheduler.enqueue(SummaryJob(key=session.key, filter_key="app", last_seq=session.last_seq))
        await scheduler.join()
        advanced = scheduler.advanced_summaries(session.key)
        assert advanced["app"].last_seq == 5 and "app" not in session.summaries  # the run's session: as loaded
        assert not gate.due(session, "app", summaries=advanced)
        assert gate.due(session, "app")  # without them, the loaded view still counts five events

    asyncio.run(play())


def test_spec_2_6_the_gate_asks_no_job_for_a_key_outside_the_allowlist_without_the_cascade() -> None:
    async def play() -> None:
        service = InMemorySessionService()
        session = await service.create_session(app="app", user_id="alice")
        for n in range(5):
            await service.append_event(
                session,
                Event(author="agent", filter_key="app/a", message=Message(role="assistant", content=f"fact {n}")),
            )
        checker = EventThreshold(events=3)
        assert SummaryGate(checker=checker, cascade=False).due(session, "app/a")
        assert not SummaryGate(checker=checker, cascade=False, allowlist=("app/b",)).due(session, "app/a")
        # With the cascade the full session is still rolled (its check on the branch's events).
        assert SummaryGate(checker=checker, allowlist=("app/b",)).due(session, "app/a")

    asyncio.run(play())
