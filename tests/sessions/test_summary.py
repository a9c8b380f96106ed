"""Rolling summaries (SPEC 3): the algorithm, the summarizers and the trigger checks."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from runs.core.context.governance import TIKTOKEN, extractive_summarizer
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary
from sessions_app.core.summary import (
    DEFAULT_SUMMARY_PROMPT,
    ChecksAll,
    ContextThreshold,
    EventThreshold,
    ForkParent,
    InProcessSummaryLock,
    LLMSummarizer,
    SummaryEngine,
    SummaryJob,
    SummaryRequest,
    SummaryResult,
    TimeThreshold,
    TokenThreshold,
    TranscriptFormat,
    TriggerInput,
    checks_all,
    checks_any,
    conversation_lines,
    default_fork_prompt,
    default_summary_prompt,
    is_context_length_error,
    observe_request_gap,
    summarize_session,
    summary_targets,
)
from tests.sessions.ledger_builders import APP, T0, Ledger

# -- doubles ----------------------------------------------------------------------------------


@dataclass
class RecordingSummarizer:
    """Answers from a script (text, an exception, or a SummaryResult) and records requests."""

    answers: list[Any] = field(default_factory=lambda: ["summary"])
    requests: list[SummaryRequest] = field(default_factory=list)
    name: str = "recording"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, SummaryResult):
            return answer
        return SummaryResult(text=answer)


@dataclass
class FakeSummaryModel:
    """A SummaryModel with a script of answers (text or exception) that records requests."""

    answers: list[Any] = field(default_factory=lambda: ["model summary"])
    window: int = 8192
    requests: list[tuple[list[Message], tuple[Any, ...]]] = field(default_factory=list)

    @property
    def context_window(self) -> int:
        return self.window

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        self.requests.append((list(messages), tuple(tools)))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class ContextLengthError(Exception):
    code = "context_length_exceeded"


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


async def summary(service: InMemorySessionService, session: Session, key: str = APP) -> Summary | None:
    return await service.get_summary(session.key, filter_key=key)


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


# -- the LLM summarizer (SPEC 3.4) ----------------------------------------------------------


def request_for(ledger: Ledger, previous: Summary | None = None, parent: ForkParent | None = None) -> SummaryRequest:
    events = tuple(e for e in ledger.events if previous is None or (e.seq or 0) > previous.last_seq)
    return SummaryRequest(filter_key=APP, previous=previous, events=events, parent=parent)


def test_transcript_lines_follow_the_spec_format() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("check INC-7")
    turn.calls(("lookup", {"id": "INC-7"}, "c1"), ("ping", {}, "c2"))
    turn.result("c1", '{"status": "open"}')
    turn.result("c2", "", tool="ping")
    turn.answer("INC-7 is open.")
    lines = [line for e in ledger.events for line in conversation_lines(e)]
    assert lines == [
        "user: check INC-7",
        'support: [Called tool: lookup with args: {"id": "INC-7"}]',
        "support: [Called tool: ping]",
        'support: [lookup returned: {"status": "open"}]',
        "support: INC-7 is open.",
    ]


async def test_the_llm_summarizer_sends_one_standalone_prompt_with_the_conversation() -> None:
    model = FakeSummaryModel(answers=["  the summary  "])
    result = await LLMSummarizer(model, max_summary_words=50).summarize(request_for(two_turns()))
    assert result == SummaryResult(text="the summary", last_included=None)
    [(messages, tools)] = model.requests
    assert len(messages) == 1 and messages[0].role == "user" and tools == ()
    assert "<conversation>\nuser: Is checkout slow?" in messages[0].content
    assert "within 50 words" in messages[0].content and messages[0].content.endswith("Summary:")


def test_prompts_are_validated() -> None:
    with pytest.raises(ValueError, match="conversation_text"):
        LLMSummarizer(FakeSummaryModel(), prompt="summarize this")
    with pytest.raises(ValueError, match="system prompt"):
        LLMSummarizer(FakeSummaryModel(), system_prompt="here: {conversation_text}")


async def test_spec_3_4_max_summary_words_is_named_in_the_prompts() -> None:
    assert "{max_summary_words}" in default_summary_prompt(50) and "{max_summary_words}" not in default_summary_prompt(
        0
    )
    assert "{max_summary_words}" in default_fork_prompt(50)
    # A limit no prompt states is refused; the system prompt may state it instead.
    with pytest.raises(ValueError, match="max_summary_words"):
        LLMSummarizer(FakeSummaryModel(), prompt="Summarize: {conversation_text}", max_summary_words=40)
    model = FakeSummaryModel()
    summarizer = LLMSummarizer(
        model,
        prompt="Summarize: {conversation_text}",
        system_prompt="At most {max_summary_words} words.",
        max_summary_words=40,
    )
    await summarizer.summarize(request_for(two_turns()))
    [(messages, _)] = model.requests
    assert messages[0] == Message(role="system", content="At most 40 words.")
    assert messages[1].content.startswith("Summarize: user: Is checkout slow?")
    with pytest.raises(ValueError, match="fork prompt"):
        LLMSummarizer(FakeSummaryModel(), fork_prompt="{conversation_text}")


async def test_spec_3_4_tool_call_and_result_formatters_shape_the_transcript() -> None:
    def call_text(call: ToolCall) -> str:
        return f"<{call.name}>"

    def result_text(message: Message) -> str:
        return "" if message.tool_name == "search_logs" else f"<{message.tool_name} said {message.content}>"

    transcript = TranscriptFormat(tool_call=call_text, tool_result=result_text)
    ledger = two_turns()
    lines = [line for e in ledger.events for line in conversation_lines(e, transcript)]
    assert "support: <search_logs>" in lines
    assert not any(
        "returned" in line or '{"timeouts": 3}' in line for line in lines
    )  # the result formatter left it out
    model = FakeSummaryModel()
    await LLMSummarizer(model, transcript=transcript).summarize(request_for(ledger))
    [(messages, _)] = model.requests
    assert "support: <search_logs>" in messages[0].content and '{"timeouts": 3}' not in messages[0].content


def test_the_budget_is_seventy_percent_of_the_window_with_a_fallback() -> None:
    assert LLMSummarizer(FakeSummaryModel(window=10_000)).budget() == 7000
    assert LLMSummarizer(FakeSummaryModel(window=0)).budget() == int(8192 * 0.7)
    assert LLMSummarizer(FakeSummaryModel(window=10_000), input_token_budget=500).budget() == 500


async def test_a_source_too_large_keeps_the_longest_prefix_and_stops_the_boundary_there() -> None:
    ledger = Ledger()
    for i in range(30):
        ledger.simple_turn(f"question {i} " + "detail " * 40, f"answer {i}")
    model = FakeSummaryModel(window=1000)  # budget 700 tokens
    summarizer = LLMSummarizer(model, tokenizer=TIKTOKEN)
    result = await summarizer.summarize(request_for(ledger))
    [(messages, _)] = model.requests
    assert TIKTOKEN.count_messages(messages) <= 700
    assert result.last_included is not None and result.last_included.seq is not None
    included = result.last_included.seq
    assert 1 < included < len(ledger.events)
    assert f"question {(included - 1) // 3} " in messages[0].content
    assert f"question {(included - 1) // 3 + 1} " not in messages[0].content


async def test_a_long_previous_summary_keeps_its_head_and_tail() -> None:
    ledger = two_turns()
    previous = Summary(filter_key=APP, text="HEAD " + "filler words here " * 2000 + " TAIL")
    model = FakeSummaryModel(window=2000)
    await LLMSummarizer(model, tokenizer=TIKTOKEN).summarize(request_for(ledger, previous))
    content = model.requests[0][0][0].content
    assert "system: HEAD" in content and "TAIL" in content and "left out to fit" in content
    assert TIKTOKEN.count_messages(model.requests[0][0]) <= 1400


@pytest.mark.parametrize(
    "first", [ContextLengthError("too long"), RuntimeError("This model's maximum context length is 8192"), ""]
)
async def test_a_context_length_error_or_an_empty_answer_is_retried_once_at_half_the_budget(first: Any) -> None:
    ledger = Ledger()
    for i in range(40):
        ledger.simple_turn(f"question {i} " + "detail " * 30, f"answer {i}")
    model = FakeSummaryModel(window=4000, answers=[first, "second try"])
    result = await LLMSummarizer(model, tokenizer=TIKTOKEN).summarize(request_for(ledger))
    assert result.text == "second try" and len(model.requests) == 2
    assert TIKTOKEN.count_messages(model.requests[1][0]) <= 1400 < TIKTOKEN.count_messages(model.requests[0][0])


async def test_other_model_errors_are_not_retried() -> None:
    model = FakeSummaryModel(answers=[PermissionError("401 bad key")])
    with pytest.raises(PermissionError):
        await LLMSummarizer(model).summarize(request_for(two_turns()))
    assert len(model.requests) == 1


def test_context_length_errors_are_recognised_by_code_or_message() -> None:
    assert is_context_length_error(ContextLengthError("x"))
    assert is_context_length_error(RuntimeError("prompt is too long: 250000 tokens"))
    assert not is_context_length_error(RuntimeError("rate limited"))


# -- cache-safe forking (SPEC 3.6) ------------------------------------------------------------


def parent_for(
    ledger: Ledger, *, tools: tuple[Any, ...] = (), tools_tokens: int = 0, summary_last_seq: int = 0
) -> ForkParent:
    messages = [Message(role="system", content="You are support.")]
    messages += [m for e in ledger.events if (m := e.message) is not None and e.seq and e.seq > summary_last_seq]
    return ForkParent(
        messages=tuple(messages),
        tools=tools,
        tools_tokens=tools_tokens,
        summary_last_seq=summary_last_seq,
        covered_last_seq=len(ledger.events),
    )


async def test_a_fork_reuses_the_parent_request_as_sent_and_appends_the_fork_prompt() -> None:
    ledger = two_turns()
    parent = parent_for(ledger, tools=("tool-spec",), tools_tokens=50)
    model = FakeSummaryModel()
    result = await LLMSummarizer(model, cache_safe_forking=True).summarize(request_for(ledger, parent=parent))
    [(messages, tools)] = model.requests
    assert messages[: len(parent.messages)] == list(parent.messages)
    assert messages[-1].role == "user" and "Do not call any tool" in messages[-1].content
    assert tools == ("tool-spec",)
    assert result.last_included is not None and result.last_included.seq == len(ledger.events)


async def test_a_fork_that_does_not_fit_drops_tools_then_tool_payloads() -> None:
    ledger = Ledger()
    ledger.simple_turn("logs?", "found it", tool=("search_logs", "log line " * 600))
    parent = parent_for(ledger, tools=("spec",), tools_tokens=5000)
    model = FakeSummaryModel(window=1500)
    await LLMSummarizer(model, cache_safe_forking=True, tokenizer=TIKTOKEN).summarize(
        request_for(ledger, parent=parent)
    )
    [(messages, tools)] = model.requests
    assert tools == ()
    tool_message = next(m for m in messages if m.role == "tool")
    assert tool_message.content.startswith("[tool result left out to fit the summary request; tool_name=search_logs")
    assert messages[0].content == "You are support."


async def test_a_fork_that_cannot_fit_falls_back_to_the_bounded_standalone_request() -> None:
    ledger = Ledger()
    ledger.simple_turn("question " + "words " * 3000, "answer")
    model = FakeSummaryModel(window=1000)
    await LLMSummarizer(model, cache_safe_forking=True, tokenizer=TIKTOKEN).summarize(
        request_for(ledger, parent=parent_for(ledger))
    )
    [(messages, _)] = model.requests
    assert "<conversation>" in messages[-1].content  # the standalone prompt


async def test_no_fork_from_a_request_built_on_another_summary() -> None:
    ledger = two_turns()
    previous = ledger.summary("newer summary", through=3)
    model = FakeSummaryModel()
    parent = parent_for(ledger, summary_last_seq=0)  # built before that summary existed
    await LLMSummarizer(model, cache_safe_forking=True).summarize(request_for(ledger, previous, parent))
    assert "<conversation>" in model.requests[0][0][-1].content


async def test_forking_is_off_unless_asked_for() -> None:
    ledger = two_turns()
    model = FakeSummaryModel()
    await LLMSummarizer(model).summarize(request_for(ledger, parent=parent_for(ledger)))
    assert "<conversation>" in model.requests[0][0][-1].content


# -- the extractive summarizer (offline model) -------------------------------------------------


async def test_the_extractive_summary_stays_within_its_budget_and_keeps_the_facts() -> None:
    ledger = Ledger()
    for i in range(20):
        ledger.simple_turn(f"Anything on host web-{i}?", f"web-{i} had 3 errors at 10:0{i % 10}. Fine otherwise.")
    summarizer = extractive_summarizer(budget_tokens=80)
    result = await summarizer.summarize(request_for(ledger))
    assert 0 < TIKTOKEN.count_text(result.text) <= 80
    assert "errors at 10:0" in result.text and "Fine otherwise" not in result.text


async def test_the_extractive_summary_does_not_stack_system_prefixes_over_rounds() -> None:
    ledger = two_turns()
    summarizer = extractive_summarizer(budget_tokens=60)
    text = "previous facts: INC-7 opened on 2026-01-01."
    for _ in range(3):
        text = (await summarizer.summarize(request_for(ledger, Summary(filter_key=APP, text=text)))).text
    assert "system:" not in text


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
