"""Auto memory (SPEC 6.3, 6.4): after a run, extract memories from the session's new messages.

`AutoMemory.process(session)` is the job. It reads the ledger after the session's
extraction cursor, keeps the user and assistant messages (no tool calls, no tool results),
and, unless the session is polluted or the checkers say "not yet", asks an extractor for
memory operations. An extractor answers with `memory_add` / `memory_update` /
`memory_delete` tool calls (a model call whose tool calls are the operations, or the
offline `PatternMemoryExtractor`). The operations and the cursor move are applied in one
atomic step (`MemoryService.apply`), conditional on the cursor not having moved: a
restarted worker neither re-extracts nor skips, and the same delta twice has one effect.

Pollution: a session whose state says `memory:mode = "polluted"` is never extracted. A
user message that looks like prompt injection or pasted tool output (stack traces, log
dumps, tool-result markup, JSON blobs) is skipped together with the assistant's answers to
it; the rest of the delta is still extracted (SPEC 6.3: one pasted log does not cost the
run its memories).

The cursor only moves past what the extractor was given or chose to skip: the messages of
one request are bounded (`MAX_REQUEST_CHARS`), and when a delta holds more, the cursor
stops before the first message left out and the job goes on from there.

Update policies (`memory_policy`) and the optional assistant-episode stage
(`memory_episodes`) run here too: the policy post-processes the extractor's operations and
chooses how adds are reconciled; the episode stage runs when enabled and the extractor
can do it.

`PatternMemoryExtractor` is what the offline model does instead of a language model: it
recognises a few explicit statements in user messages ("my name is ...", "I prefer ...",
"we run Go in production", "I live in ...", "I work at ...", "yesterday we migrated ...",
"forget ...", "we moved from X to Y") and resolves relative dates against the time the
message was sent.
"""

from __future__ import annotations

from sessions_app.core.memory_extract.delta import (
    conversation_message,
    message_pollution,
    pollution_reason,
    within_budget,
    without_polluted,
)
from sessions_app.core.memory_extract.job import AutoMemory
from sessions_app.core.memory_extract.offline import (
    DATE_EXPRESSION,
    PatternMemoryExtractor,
    extract_by_patterns,
    resolve_date,
)
from sessions_app.core.memory_extract.prompt import (
    EXTRACTION_PROMPT,
    TOOL_DESCRIPTIONS,
    TOOL_SCHEMAS,
    build_extraction_prompt,
    format_existing,
    parse_operations,
)
from sessions_app.core.memory_extract.values import (
    EVENT_PAGE,
    EXISTING_FOR_PROMPT,
    EXTRACT_INSTRUCTION,
    EXTRACTION_TOOLS,
    MAX_MESSAGE_CHARS,
    MAX_REQUEST_CHARS,
    POLLUTED,
    POLLUTED_STATE_KEY,
    CheckContext,
    Checker,
    ConversationMessage,
    ExtractedCall,
    ExtractionOutcome,
    ExtractionRequest,
    MemoryExtractor,
    Status,
    check_message_threshold,
    check_time_interval,
    logger,
)

__all__ = [
    "DATE_EXPRESSION",
    "EVENT_PAGE",
    "EXISTING_FOR_PROMPT",
    "EXTRACTION_PROMPT",
    "EXTRACTION_TOOLS",
    "EXTRACT_INSTRUCTION",
    "MAX_MESSAGE_CHARS",
    "MAX_REQUEST_CHARS",
    "POLLUTED",
    "POLLUTED_STATE_KEY",
    "TOOL_DESCRIPTIONS",
    "TOOL_SCHEMAS",
    "AutoMemory",
    "CheckContext",
    "Checker",
    "ConversationMessage",
    "ExtractedCall",
    "ExtractionOutcome",
    "ExtractionRequest",
    "MemoryExtractor",
    "PatternMemoryExtractor",
    "Status",
    "build_extraction_prompt",
    "check_message_threshold",
    "check_time_interval",
    "conversation_message",
    "extract_by_patterns",
    "format_existing",
    "logger",
    "message_pollution",
    "parse_operations",
    "pollution_reason",
    "resolve_date",
    "within_budget",
    "without_polluted",
]
