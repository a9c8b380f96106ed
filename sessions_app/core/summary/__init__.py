"""Rolling session summaries (SPEC 2.4, 3): summarizers, trigger checks, the algorithm, jobs.

A summary stands for the events of one filter key up to a boundary (the last event it
includes). `summarize_session` rolls it forward: the previous summary, as a system line,
plus only the events after its boundary go to a `Summarizer`; the new text and the new
boundary are written together, and only after a non-empty result. Anything else (no
summarizer, no new events, trigger not met, empty text, an error) leaves both as they were.
Writes go through `SessionService.advance_summary`, which refuses to move a boundary
backwards, and each (session, filter key) has one summariser at a time (`SummaryLock`).

Jobs: the Runner enqueues a `SummaryJob` after persisting a final answer or a tool result
(`should_enqueue_summary`, SPEC 1.8) on a `SummaryScheduler`: `InProcessSummaryScheduler`
here (asyncio tasks, in order per session), a Celery one in `sessions_app.tasks`. A job is
idempotent for its (session, filter key, last seq): once a summary covers that seq, it does
nothing.

Plain Python: the model and the token counter are injected (`SummaryModel`, `Tokenizer`),
so this package depends on neither Django nor the run layer.

The modules, each importing only those listed before it: `transcript` (defaults, token
counting, the transcript a summarizer reads), `sections` (provenance-anchored sections),
`summarizers` (the protocol, request and result, `LLMSummarizer`), `chunked`
(`ChunkedSummarizer`, `ExtractiveSummarizer`), `triggers` (checks and the backlog that
bounds them), `algorithm` (`summarize_session`, the lock) and `engine` (the engine, the
gate, the schedulers). Every public name is re-exported here.
"""

from __future__ import annotations

from sessions_app.core.summary.algorithm import (
    InProcessSummaryLock,
    Reason,
    SummaryLock,
    SummaryOutcome,
    TargetOutcome,
    anchored_text,
    summarize_session,
    summary_key_allowed,
    summary_targets,
    without_superseded,
)
from sessions_app.core.summary.chunked import (
    ChunkedSummarizer,
    ExtractiveSummarizer,
)
from sessions_app.core.summary.engine import (
    InProcessSummaryScheduler,
    SummaryEngine,
    SummaryGate,
    SummaryJob,
    SummaryScheduler,
    engine_gate,
    refresh_summaries,
    should_enqueue_summary,
    summary_gate,
    tool_round_complete,
)
from sessions_app.core.summary.sections import (
    SectionMerge,
    SummarySection,
    anchor_sections,
    fit_sections,
    parse_sections,
    render_sections,
    section_cost,
    section_header,
    strip_section_headers,
    summary_sections,
)
from sessions_app.core.summary.summarizers import (
    DEFAULT_FORK_PROMPT,
    DEFAULT_SUMMARY_PROMPT,
    MAX_SUMMARY_WORDS,
    ForkParent,
    LLMSummarizer,
    Summarizer,
    SummaryModel,
    SummaryRequest,
    SummaryResult,
    default_fork_prompt,
    default_summary_prompt,
    is_context_length_error,
    shorten_middle,
)
from sessions_app.core.summary.transcript import (
    APPROX_TOKENIZER,
    CONTEXT_THRESHOLD_MIN_TOKENS,
    CONTEXT_THRESHOLD_RATIO,
    DEFAULT_JOB_TIMEOUT_S,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_EVENTS,
    DEFAULT_SECTION_TOKENS,
    DEFAULT_SUMMARY_TOKENS,
    DEFAULT_TRANSCRIPT,
    FALLBACK_CONTEXT_WINDOW,
    FULL_SESSION,
    MIN_SUMMARY_TOKENS,
    SUMMARY_BUDGET_RATIO,
    SUMMARY_RETRY_RATIO,
    Tokenizer,
    ToolCallFormatter,
    ToolResultFormatter,
    TranscriptFormat,
    conversation_lines,
    default_tool_call_text,
    default_tool_result_text,
    model_message,
    previous_summary_line,
    render_conversation,
)
from sessions_app.core.summary.triggers import (
    Checker,
    ChecksAll,
    ChecksAny,
    ContextThreshold,
    EventThreshold,
    RequestGap,
    SummaryBacklog,
    TimeThreshold,
    TokenThreshold,
    TriggerInput,
    checker_may_fire,
    checks_all,
    checks_any,
    observe_request_gap,
)

__all__ = [
    "APPROX_TOKENIZER",
    "CONTEXT_THRESHOLD_MIN_TOKENS",
    "CONTEXT_THRESHOLD_RATIO",
    "DEFAULT_FORK_PROMPT",
    "DEFAULT_JOB_TIMEOUT_S",
    "DEFAULT_LOCK_WAIT_S",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_SECTION_TOKENS",
    "DEFAULT_SUMMARY_PROMPT",
    "DEFAULT_SUMMARY_TOKENS",
    "DEFAULT_TRANSCRIPT",
    "FALLBACK_CONTEXT_WINDOW",
    "FULL_SESSION",
    "MAX_SUMMARY_WORDS",
    "MIN_SUMMARY_TOKENS",
    "SUMMARY_BUDGET_RATIO",
    "SUMMARY_RETRY_RATIO",
    "Checker",
    "ChecksAll",
    "ChecksAny",
    "ChunkedSummarizer",
    "ContextThreshold",
    "EventThreshold",
    "ExtractiveSummarizer",
    "ForkParent",
    "InProcessSummaryLock",
    "InProcessSummaryScheduler",
    "LLMSummarizer",
    "Reason",
    "RequestGap",
    "SectionMerge",
    "Summarizer",
    "SummaryBacklog",
    "SummaryEngine",
    "SummaryGate",
    "SummaryJob",
    "SummaryLock",
    "SummaryModel",
    "SummaryOutcome",
    "SummaryRequest",
    "SummaryResult",
    "SummaryScheduler",
    "SummarySection",
    "TargetOutcome",
    "TimeThreshold",
    "TokenThreshold",
    "Tokenizer",
    "ToolCallFormatter",
    "ToolResultFormatter",
    "TranscriptFormat",
    "TriggerInput",
    "anchor_sections",
    "anchored_text",
    "checker_may_fire",
    "checks_all",
    "checks_any",
    "conversation_lines",
    "default_fork_prompt",
    "default_summary_prompt",
    "default_tool_call_text",
    "default_tool_result_text",
    "engine_gate",
    "fit_sections",
    "is_context_length_error",
    "model_message",
    "observe_request_gap",
    "parse_sections",
    "previous_summary_line",
    "refresh_summaries",
    "render_conversation",
    "render_sections",
    "section_cost",
    "section_header",
    "shorten_middle",
    "should_enqueue_summary",
    "strip_section_headers",
    "summarize_session",
    "summary_gate",
    "summary_key_allowed",
    "summary_sections",
    "summary_targets",
    "tool_round_complete",
    "without_superseded",
]
