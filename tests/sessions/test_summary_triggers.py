"""Rolling summaries (SPEC 3.5): the trigger checks and the request gap."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from runs.core.context.governance import TIKTOKEN
from sessions_app.core.events import Event, Message
from sessions_app.core.session import Summary, SummaryBoundary
from sessions_app.core.summary import (
    DEFAULT_SUMMARY_PROMPT,
    ChecksAll,
    ContextThreshold,
    EventThreshold,
    TimeThreshold,
    TokenThreshold,
    TriggerInput,
    checks_all,
    checks_any,
    observe_request_gap,
    summarize_session,
)
from tests.sessions.ledger_builders import APP, T0, Ledger
from tests.sessions.summary_doubles import RecordingSummarizer, stored, two_turns

# -- trigger checks (SPEC 3.5) --------------------------------------------------------------


def trigger(
    events: int = 3,
    tokens: int = 100,
    *,
    previous: bool = False,
    request_tokens: int | None = None,
    window: int | None = None,
    age_s: float = 0,
) -> TriggerInput:
    ledger = Ledger()
    for i in range(events):
        ledger.add(Event(author="user", message=Message(role="user", content=f"m{i}")))
    return TriggerInput(
        events=tuple(ledger.events),
        previous=Summary(filter_key=APP, text="p") if previous else None,
        conversation_tokens=tokens,
        request_tokens=request_tokens,
        context_window=window,
        now=(ledger.events[-1].created_at if ledger.events else T0) + timedelta(seconds=age_s),
    )


def test_event_threshold_counts_the_previous_summary_as_an_event() -> None:
    check = EventThreshold(events=3)
    assert not check(trigger(3))
    assert check(trigger(3, previous=True))
    assert check(trigger(4))


def test_token_threshold_prefers_the_model_visible_request() -> None:
    check = TokenThreshold(tokens=500)
    assert not check(trigger(tokens=400))
    assert check(trigger(tokens=600))
    assert not check(trigger(tokens=600, request_tokens=100))
    assert check(trigger(tokens=10, request_tokens=501))


def test_context_threshold_is_half_the_window_but_at_least_2000_tokens() -> None:
    check = ContextThreshold()
    assert check.threshold(100_000) == 50_000
    assert check.threshold(3000) == 2000
    assert check.threshold(None) == 4096  # the 8,192 fallback window
    assert ContextThreshold(window=20_000).threshold() == 10_000
    assert check(trigger(tokens=4097)) and not check(trigger(tokens=4096))
    assert not check(trigger(tokens=4097, window=100_000))


def test_checks_combine_with_all_any_and_custom_callables() -> None:
    many, big = EventThreshold(events=5), TokenThreshold(tokens=50)
    assert checks_any(many, big)(trigger(events=2, tokens=60))
    assert not checks_all(many, big)(trigger(events=2, tokens=60))
    assert ChecksAll((many, big))(trigger(events=9, tokens=60))
    custom_calls: list[int] = []

    def custom(check: TriggerInput) -> bool:
        custom_calls.append(len(check.events))
        return True

    assert checks_all(big, custom)(trigger(tokens=60)) and custom_calls == [3]
    assert TimeThreshold(seconds=60)(trigger(age_s=61)) and not TimeThreshold(seconds=60)(trigger(age_s=59))


def _two_requests(gap_s: float) -> Ledger:
    """Two turns whose second starts `gap_s` seconds after the first ended."""
    ledger = two_turns()
    second = next(i for i, e in enumerate(ledger.events) if e.request_id != ledger.events[0].request_id)
    shift = timedelta(seconds=gap_s)
    ledger.events[second:] = [e.replace(created_at=e.created_at + shift) for e in ledger.events[second:]]
    return ledger


def test_spec_3_5_the_request_gap_is_the_idle_time_before_the_newest_request() -> None:
    ledger = _two_requests(gap_s=7200)
    second = next(e for e in ledger.events if e.request_id != ledger.events[0].request_id)
    first_end = max(e.created_at for e in ledger.events if e.request_id == ledger.events[0].request_id)
    gap = observe_request_gap(ledger.events, None)
    assert gap is not None and gap.available and gap.request_id == second.request_id
    assert gap.started_at == second.created_at and gap.previous_ended_at == first_end
    assert gap.elapsed_s == pytest.approx(7201)
    # One request only: no gap to speak of; no request ids: no observation at all.
    only_first = [e for e in ledger.events if e.request_id == ledger.events[0].request_id]
    assert observe_request_gap(only_first, None) is not None and not observe_request_gap(only_first, None).available
    assert observe_request_gap([e.replace(request_id="") for e in ledger.events], None) is None
    # A previous summary cut off at or after the request started makes the gap unknown (SPEC 3.3 step 5).
    late = ledger.summary("s", through=len(ledger.events))
    assert not observe_request_gap(ledger.events, late).available


def test_spec_3_5_the_time_threshold_measures_the_request_gap() -> None:
    check = TimeThreshold(seconds=3600)
    for gap_s, fires in ((7200, True), (60, False)):
        ledger = _two_requests(gap_s)
        observed = TriggerInput(
            events=tuple(ledger.events),
            previous=None,
            conversation_tokens=10,
            now=ledger.events[-1].created_at,
            request_gap=observe_request_gap(ledger.events, None),
        )
        assert check(observed) is fires
        # However long ago the last event was, an observed gap decides.
        later = dataclasses.replace(observed, now=observed.now + timedelta(days=2))
        assert check(later) is fires


async def test_spec_3_5_a_gap_reaching_back_to_the_boundary_reads_the_boundary_event() -> None:
    reasons = []
    for gap_s in (7200, 60):
        ledger = _two_requests(gap_s)
        first_len = sum(1 for e in ledger.events if e.request_id == ledger.events[0].request_id)
        service, session = await stored(ledger)
        last_of_first = (await service.list_events(session.key))[first_len - 1]
        # The first request is summarized: the second's events are all the check sees.
        await service.put_summary(
            session.key,
            Summary(
                filter_key=APP,
                text="first turn",
                boundary=SummaryBoundary(
                    cutoff_at=last_of_first.created_at, last_event_id=last_of_first.id, last_seq=first_len
                ),
            ),
        )
        outcome = await summarize_session(
            service,
            session.key,
            filter_key=APP,
            summarizer=RecordingSummarizer(),
            checker=TimeThreshold(seconds=3600),
            cascade=False,
        )
        reasons.append(outcome.primary.reason)
    # Measured from wall-clock time both would fire (the ledger is years old).
    assert reasons == ["updated", "not_triggered"]


async def test_the_trigger_sees_the_window_of_the_run_and_the_conversation_tokens() -> None:
    service, session = await stored(two_turns())
    seen: list[TriggerInput] = []

    def spy(check: TriggerInput) -> bool:
        seen.append(check)
        return False

    await summarize_session(
        service,
        session.key,
        filter_key=APP,
        summarizer=RecordingSummarizer(),
        checker=spy,
        context_window=32_000,
        tokenizer=TIKTOKEN,
    )
    [check] = seen
    assert check.context_window == 32_000 and check.conversation_tokens > 10 and len(check.events) == 8
    assert DEFAULT_SUMMARY_PROMPT.count("{conversation_text}") == 1
