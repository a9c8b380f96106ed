"""Rolling summaries (SPEC 3): the algorithm, the cascade to the full session and the locks.

The summarizers are in test_summary_summarizers.py, the trigger checks in test_summary_triggers.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runs.core.context.governance import TIKTOKEN
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey, Summary
from sessions_app.core.summary import (
    EventThreshold,
    InProcessSummaryLock,
    LLMSummarizer,
    SummaryEngine,
    SummaryJob,
    SummaryRequest,
    SummaryResult,
    summarize_session,
    summary_targets,
)
from tests.sessions.ledger_builders import APP, Ledger
from tests.sessions.summary_doubles import FakeSummaryModel, RecordingSummarizer, stored, summary, two_turns

# -- the algorithm (SPEC 3.3) ---------------------------------------------------------------


async def test_summary_rolls_the_previous_summary_forward_with_only_the_events_after_its_boundary() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    await service.advance_summary(session.key, ledger.summary("earlier: checkout was slow", through=5))
    summarizer = RecordingSummarizer(answers=["checkout slow; INC-7 open"])

    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)

    [request] = summarizer.requests
    assert request.previous is not None and request.previous.text == "earlier: checkout was slow"
    assert [e.seq for e in request.events] == [6, 7, 8]
    assert outcome.primary.reason == "updated"
    new = await summary(service, session)
    # A single model summary folds the previous one in: one section over every seq (C1).
    assert new is not None and new.text == "[events 1-8]\ncheckout slow; INC-7 open"
    # The boundary is the last event of the delta (here the run's completion marker).
    assert new.boundary is not None and (new.boundary.last_seq, new.boundary.last_event_id) == (8, ledger.events[7].id)
    assert new.boundary.cutoff_at == ledger.events[7].created_at


async def test_the_previous_summary_opens_the_transcript_as_a_system_line() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    await service.advance_summary(session.key, ledger.summary("checkout was slow", through=5))
    model = FakeSummaryModel()
    await summarize_session(service, session.key, filter_key=APP, summarizer=LLMSummarizer(model), cascade=False)
    prompt = model.requests[0][0][-1].content
    transcript = prompt.split("<conversation>\n", 1)[1].split("\n</conversation>", 1)[0].splitlines()
    assert transcript == ["system: checkout was slow", "user: And the ticket?", "support: INC-7 is open."]


async def test_a_branch_summary_only_reads_events_of_its_filter_key() -> None:
    ledger = Ledger()
    ledger.simple_turn("mine", "ok")
    other = Ledger(filter_key="other-app", events=ledger.events)
    other.simple_turn("theirs", "ok too")
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer()
    await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)
    assert {e.filter_key for e in summarizer.requests[0].events} == {APP}


@pytest.mark.parametrize(
    ("summarizer", "checker", "reason"),
    [
        (None, None, "no_summarizer"),
        (RecordingSummarizer(answers=[""]), None, "empty_text"),
        (RecordingSummarizer(answers=["   \n"]), None, "empty_text"),
        (RecordingSummarizer(answers=[RuntimeError("model down")]), None, "error"),
        (RecordingSummarizer(), EventThreshold(events=100), "not_triggered"),
    ],
)
async def test_every_no_op_leaves_text_and_boundary_untouched(
    summarizer: RecordingSummarizer | None, checker: Any, reason: str
) -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    before = await service.advance_summary(session.key, ledger.summary("kept", through=4))
    outcome = await summarize_session(
        service, session.key, filter_key=APP, summarizer=summarizer, checker=checker, cascade=False
    )
    assert outcome.primary.reason == reason and not outcome.advanced
    assert await summary(service, session) == before


async def test_no_new_events_means_no_summarizer_call() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    await service.advance_summary(session.key, ledger.summary("all of it", through=len(ledger.events)))
    summarizer = RecordingSummarizer()
    outcome = await summarize_session(
        service, session.key, filter_key=APP, summarizer=summarizer, force=True, cascade=False
    )
    assert outcome.primary.reason == "no_delta" and summarizer.requests == []


async def test_force_fires_even_when_the_trigger_does_not() -> None:
    service, session = await stored(two_turns())
    outcome = await summarize_session(
        service,
        session.key,
        filter_key=APP,
        summarizer=RecordingSummarizer(),
        checker=EventThreshold(events=1000),
        force=True,
        cascade=False,
    )
    assert outcome.primary.reason == "updated"


async def test_the_boundary_stops_at_the_last_event_the_summarizer_included() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer(answers=[SummaryResult(text="first turn", last_included=ledger.events[3])])
    await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)
    new = await summary(service, session)
    assert new is not None and new.last_seq == 4
    again = RecordingSummarizer()
    await summarize_session(service, session.key, filter_key=APP, summarizer=again, cascade=False)
    assert [e.seq for e in again.requests[0].events] == list(range(5, len(ledger.events) + 1))


async def test_a_write_never_moves_the_boundary_backwards() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    assert await service.advance_summary(session.key, ledger.summary("late", through=8)) is not None
    assert await service.advance_summary(session.key, ledger.summary("stale", through=5)) is None
    assert await service.advance_summary(session.key, ledger.summary("same", through=8)) is None
    current = await summary(service, session)
    assert current is not None and (current.text, current.last_seq, current.version) == ("late", 8, 1)


async def test_a_summary_that_lost_the_race_is_reported_stale_and_not_written() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)

    class Racing(RecordingSummarizer):
        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            # Someone else gets further while this one is thinking.
            await service.advance_summary(session.key, ledger.summary("winner", through=len(ledger.events)))
            return SummaryResult(text="loser", last_included=ledger.events[5])

    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=Racing(), cascade=False)
    assert outcome.primary.reason == "stale"
    current = await summary(service, session)
    assert current is not None and current.text == "winner"


async def test_version_and_covered_counts_accumulate_over_rounds() -> None:
    ledger = Ledger()
    ledger.simple_turn("one", "1")
    service, session = await stored(ledger)
    await summarize_session(service, session.key, filter_key=APP, summarizer=RecordingSummarizer(), tokenizer=TIKTOKEN)
    first = await summary(service, session)
    more = Ledger(events=list(ledger.events))
    more.simple_turn("two", "2")
    for event in more.events[len(ledger.events) :]:
        await service.append_event(session, event.replace(seq=None))
    await summarize_session(service, session.key, filter_key=APP, summarizer=RecordingSummarizer(), tokenizer=TIKTOKEN)
    second = await summary(service, session)
    assert first is not None and second is not None
    assert (first.version, second.version) == (1, 2)
    # Completion markers are not model-visible: 2 messages per turn.
    assert (first.covered_events, second.covered_events) == (2, 4)
    assert 0 < first.covered_tokens < second.covered_tokens


async def test_a_failed_write_still_reports_the_summary_it_made() -> None:
    class Broken(InMemorySessionService):
        async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
            raise ConnectionError("database went away")

    service = Broken()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await two_turns().append_to(service, session)
    outcome = await summarize_session(
        service, session.key, filter_key=APP, summarizer=RecordingSummarizer(), cascade=False
    )
    assert outcome.primary.reason == "persist_failed" and outcome.advanced and not outcome.primary.persisted
    assert outcome.primary.summary is not None and outcome.primary.summary.text == "[events 1-8]\nsummary"
    assert await service.get_summary(session.key, filter_key=APP) is None


async def test_a_deleted_session_is_a_quiet_no_op() -> None:
    service, session = await stored(two_turns())
    await service.delete_session(session.key)
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=RecordingSummarizer())
    assert outcome.primary.reason == "missing"


# -- cascade (SPEC 3.1) ---------------------------------------------------------------------


async def test_the_full_session_summary_copies_the_branch_when_every_event_matches_it() -> None:
    service, session = await stored(two_turns())
    summarizer = RecordingSummarizer(answers=["branch summary"])
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer)
    assert [t.reason for t in outcome.targets] == ["updated", "copied"]
    assert len(summarizer.requests) == 1  # the copy costs no model call
    branch, whole = await summary(service, session), await summary(service, session, "")
    assert branch is not None and whole is not None
    assert (whole.text, whole.boundary) == (branch.text, branch.boundary)


async def test_the_full_session_is_summarized_on_its_own_when_other_branches_have_events() -> None:
    ledger = Ledger()
    ledger.simple_turn("mine", "ok")
    other = Ledger(filter_key="other-app", events=ledger.events)
    other.simple_turn("theirs", "ok too")
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer(answers=["branch", "everything"])
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer)
    assert [t.reason for t in outcome.targets] == ["updated", "updated"]
    assert [len(r.events) for r in summarizer.requests] == [3, 6]
    whole = await summary(service, session, "")
    assert whole is not None and whole.text == "[events 1-6]\neverything" and whole.last_seq == 6


def test_spec_3_1_summary_targets_follow_the_allowlist_and_the_cascade() -> None:
    assert summary_targets("") == [""]
    assert summary_targets("", allowlist=[], cascade=False) == [""]
    assert summary_targets("app/a") == ["app/a", ""]
    assert summary_targets("app/a", cascade=False) == ["app/a"]
    # Matching goes both ways along the `/` path: an allowed parent or child lets the key in.
    assert summary_targets("app/a", allowlist=["app"]) == ["app/a", ""]
    assert summary_targets("app", allowlist=["app/a"]) == ["app", ""]
    assert summary_targets("app/b", allowlist=["app/a"]) == [""]
    assert summary_targets("app/ab", allowlist=["app/a"], cascade=False) == []


async def test_spec_2_6_a_key_outside_the_allowlist_gets_no_summary_and_the_full_session_one_instead() -> None:
    ledger = Ledger()
    ledger.simple_turn("mine", "ok")
    other = Ledger(filter_key="other-app", events=ledger.events)
    other.simple_turn("theirs", "ok too")
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer(answers=["everything"])
    engine = SummaryEngine(summarizer=summarizer, allowlist=("other-app",))
    outcome = await engine.summarize(service, session.key, filter_key=APP)
    assert [(t.filter_key, t.reason) for t in outcome.targets] == [("", "updated")]
    assert [len(r.events) for r in summarizer.requests] == [6]  # the whole session, one model call
    assert await summary(service, session) is None
    whole = await summary(service, session, "")
    assert whole is not None and whole.last_seq == 6
    # Without the cascade a key outside the allowlist is left alone.
    quiet = SummaryEngine(summarizer=summarizer, allowlist=("other-app",), cascade=False)
    outcome = await quiet.summarize(service, session.key, filter_key=APP, force=True)
    assert [(t.filter_key, t.reason) for t in outcome.targets] == [(APP, "not_allowed")]
    assert len(summarizer.requests) == 1


async def test_spec_3_1_a_full_session_summary_a_branch_triggered_checks_the_branchs_events() -> None:
    ledger = Ledger()
    ledger.simple_turn("mine", "ok")
    other = Ledger(filter_key="other-app", events=ledger.events)
    for n in range(3):
        other.simple_turn(f"theirs {n}", "ok too")
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer()
    # Twelve events in the session, three of them on the triggering branch: a threshold of
    # more than three events is not met by the branch's.
    engine = SummaryEngine(summarizer=summarizer, checker=EventThreshold(events=3), allowlist=("other-app",))
    outcome = await engine.summarize(service, session.key, filter_key=APP)
    assert [(t.filter_key, t.reason) for t in outcome.targets] == [("", "not_triggered")]
    assert summarizer.requests == []


async def test_a_job_for_a_covered_seq_does_nothing_so_running_it_twice_has_one_effect() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    summarizer = RecordingSummarizer()
    engine = SummaryEngine(summarizer=summarizer)
    job = SummaryJob(key=session.key, filter_key=APP, last_seq=len(ledger.events))
    first = await engine.run_job(service, job)
    second = await engine.run_job(service, job)
    assert first.primary.reason == "updated" and second.primary.reason == "covered"
    assert len(summarizer.requests) == 1
    current = await summary(service, session)
    assert current is not None and current.version == 1


# -- locks ----------------------------------------------------------------------------------


async def test_a_busy_lock_leaves_the_summary_alone() -> None:
    service, session = await stored(two_turns())
    lock = InProcessSummaryLock()
    held = await lock.acquire(session.key, APP, wait_s=0)
    assert held is not None
    outcome = await summarize_session(
        service, session.key, filter_key=APP, summarizer=RecordingSummarizer(), lock=lock, lock_wait_s=0.05
    )
    assert outcome.primary.reason == "busy" and await summary(service, session) is None
    await lock.release(session.key, APP, held)
    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=RecordingSummarizer(), lock=lock)
    assert outcome.primary.reason == "updated"


async def test_one_summariser_at_a_time_per_session_and_filter_key() -> None:
    ledger = two_turns()
    service, session = await stored(ledger)
    running = 0
    overlap = 0

    class Slow(RecordingSummarizer):
        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            nonlocal running, overlap
            running += 1
            overlap = max(overlap, running)
            await asyncio.sleep(0.02)
            running -= 1
            return await super().summarize(request)

    summarizer = Slow()
    lock = InProcessSummaryLock()
    outcomes = await asyncio.gather(
        *(
            summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, lock=lock, cascade=False)
            for _ in range(5)
        )
    )
    assert overlap == 1
    assert len(summarizer.requests) == 1  # the others found nothing new after the boundary
    assert sorted(o.primary.reason for o in outcomes) == ["no_delta"] * 4 + ["updated"]
