"""Rolling summaries (SPEC 3.4, 3.6): the LLM summarizer, cache-safe forking and the extractive summarizer."""

from __future__ import annotations

from typing import Any

import pytest

from runs.core.context.governance import TIKTOKEN, extractive_summarizer
from sessions_app.core.events import Message, ToolCall
from sessions_app.core.session import Summary
from sessions_app.core.summary import (
    ForkParent,
    LLMSummarizer,
    SummaryRequest,
    SummaryResult,
    TranscriptFormat,
    conversation_lines,
    default_fork_prompt,
    default_summary_prompt,
    is_context_length_error,
)
from tests.sessions.ledger_builders import APP, Ledger
from tests.sessions.summary_doubles import ContextLengthError, FakeSummaryModel, two_turns

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
