"""Memory extraction: limits and values."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from sessions_app.core.memory import (
    ApplyResult,
    ExtractionCursor,
    MemoryEntry,
)
from sessions_app.core.memory_policy import UpdatePolicy

logger = logging.getLogger(__name__)

POLLUTED_STATE_KEY = "memory:mode"
POLLUTED = "polluted"
EXTRACTION_TOOLS = ("memory_add", "memory_update", "memory_delete")
EXISTING_FOR_PROMPT = 20
EVENT_PAGE = 500
MAX_MESSAGE_CHARS = 4000
# The conversation text of one extraction request (about 6k tokens): a long backlog is
# extracted in several requests, the cursor moving only past what each one held.
MAX_REQUEST_CHARS = 24_000
EXTRACT_INSTRUCTION = "Extract and manage memories from the conversation above."


# -- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConversationMessage:
    """A user or assistant message of the delta, with when it was sent."""

    role: Literal["user", "assistant"]
    text: str
    at: datetime
    seq: int = 0


@dataclass(frozen=True, kw_only=True)
class ExtractedCall:
    """One tool call of an extractor: a tool name and its arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ExtractionRequest:
    messages: tuple[ConversationMessage, ...]
    existing: tuple[MemoryEntry, ...]
    reference_time: datetime
    enabled_tools: tuple[str, ...] = EXTRACTION_TOOLS
    policy: UpdatePolicy = "merge_similar"


class MemoryExtractor(Protocol):
    async def extract(self, request: ExtractionRequest) -> list[ExtractedCall]:
        """The memory tool calls for a conversation delta (SPEC 6.4)."""
        ...


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    messages: tuple[ConversationMessage, ...]
    cursor: ExtractionCursor
    now: datetime


Checker = Callable[[CheckContext], bool]


def check_message_threshold(minimum: int) -> Checker:
    """SPEC 6.4 `CheckMessageThreshold(n)`: extract when the delta has more than n messages."""
    return lambda context: len(context.messages) > minimum


def check_time_interval(seconds: float) -> Checker:
    """SPEC 6.4 `CheckTimeInterval(d)`: extract on the first run, or once d has passed."""

    def check(context: CheckContext) -> bool:
        last = context.cursor.extracted_at
        return last is None or (context.now - last).total_seconds() > seconds

    return check


Status = Literal["extracted", "nothing_new", "not_due", "polluted", "stale"]


@dataclass(frozen=True, kw_only=True)
class ExtractionOutcome:
    status: Status
    last_seq: int
    messages: int = 0
    skipped_messages: int = 0
    result: ApplyResult | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "last_seq": self.last_seq, "messages": self.messages}
        if self.skipped_messages:
            data["skipped_messages"] = self.skipped_messages
        if self.result is not None:
            data.update(
                added=len(self.result.added),
                updated=len(self.result.updated),
                deleted=len(self.result.deleted),
                skipped=self.result.skipped,
            )
        if self.reason:
            data["reason"] = self.reason
        return data
