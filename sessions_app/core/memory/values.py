"""Long-term memory: errors and values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sessions_app.core.events import utcnow
from sessions_app.core.memory.defaults import (
    DEFAULT_MAX_RESULTS,
    DEFAULT_MIN_SCORE,
    DEFAULT_RRF_K,
    MAX_TEXT_CHARS,
    MAX_TOPICS,
    MEMORY_KINDS,
    MemoryKind,
)

# -- errors -----------------------------------------------------------------------------------


class InvalidMemoryError(ValueError):
    """A memory that cannot be stored: empty text, unknown kind, an episode without time."""


class MemoryLimitError(ValueError):
    """The user already holds the most memories allowed."""

    def __init__(self, user_id: str, limit: int) -> None:
        super().__init__(
            f"user {user_id!r} already has {limit} memories, the most allowed; delete some before adding more"
        )
        self.user_id = user_id
        self.limit = limit


class MemoryNotFoundError(LookupError):
    """No memory with this id for this user."""


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UserKey:
    """Whose memories: the app and the user (both required)."""

    app: str
    user_id: str

    def __post_init__(self) -> None:
        if not self.app or not self.user_id:
            raise ValueError(f"UserKey needs an app and a user id, got {self.app!r}, {self.user_id!r}")


@dataclass(frozen=True, kw_only=True)
class MemoryDraft:
    """What a write stores: the text and its metadata."""

    text: str
    kind: MemoryKind = "fact"
    topics: tuple[str, ...] = ()
    event_time: datetime | None = None
    participants: tuple[str, ...] = ()
    location: str = ""

    def normalized(self) -> MemoryDraft:
        """Trimmed and checked; raises `InvalidMemoryError`."""
        text = " ".join(self.text.split())
        if not text:
            raise InvalidMemoryError("a memory needs text")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidMemoryError(f"a memory is at most {MAX_TEXT_CHARS} characters, got {len(text)}")
        if self.kind not in MEMORY_KINDS:
            raise InvalidMemoryError(f"kind must be one of {list(MEMORY_KINDS)!r}, got {self.kind!r}")
        if self.kind == "episode" and self.event_time is None:
            raise InvalidMemoryError("an episode needs an event_time")
        if self.event_time is not None and self.event_time.tzinfo is None:
            raise InvalidMemoryError(f"event_time must carry a time zone, got {self.event_time.isoformat()!r}")
        topics = _clean_list(self.topics, MAX_TOPICS)
        participants = _clean_list(self.participants, MAX_TOPICS)
        return replace(self, text=text, topics=topics, participants=participants, location=self.location.strip())


@dataclass(frozen=True, kw_only=True)
class MemoryEntry:
    """A stored memory. `score` is set on search results (0..1, higher is closer)."""

    id: str
    app: str
    user_id: str
    text: str
    kind: MemoryKind = "fact"
    topics: tuple[str, ...] = ()
    event_time: datetime | None = None
    participants: tuple[str, ...] = ()
    location: str = ""
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    score: float | None = None

    @property
    def draft(self) -> MemoryDraft:
        return MemoryDraft(
            text=self.text,
            kind=self.kind,
            topics=self.topics,
            event_time=self.event_time,
            participants=self.participants,
            location=self.location,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape tools and the API return (SPEC 6.2 result fields)."""
        data: dict[str, Any] = {
            "id": self.id,
            "memory": self.text,
            "kind": self.kind,
            "topics": list(self.topics),
            "created": self.created_at.isoformat(),
            "updated": self.updated_at.isoformat(),
        }
        if self.event_time is not None:
            data["event_time"] = self.event_time.date().isoformat()
        if self.participants:
            data["participants"] = list(self.participants)
        if self.location:
            data["location"] = self.location
        if self.score is not None:
            data["score"] = round(self.score, 3)
        return data

    def describe(self) -> str:
        """One line: `text (kind=…, event_time=…, …)`, as the preload block and prompts show it."""
        details = [f"kind={self.kind}"]
        if self.event_time is not None:
            details.append(f"event_time={self.event_time.date().isoformat()}")
        if self.topics:
            details.append("topics=" + ", ".join(self.topics))
        if self.participants:
            details.append("participants=" + ", ".join(self.participants))
        if self.location:
            details.append(f"location={self.location}")
        return f"{self.text} ({'; '.join(details)})"


WriteAction = Literal["added", "updated", "skipped"]
# How an add is compared with the memories already stored: "similar" is the SPEC 6.3 tiers
# (merge_similar policy), "exact" drops only an exact duplicate (preserve_history and
# append_only: a near duplicate there is history worth keeping), "none" stores it as is.
Reconcile = Literal["similar", "exact", "none"]


@dataclass(frozen=True, kw_only=True)
class MemoryWrite:
    """The outcome of an add: what happened and the memory it concerns."""

    action: WriteAction
    entry: MemoryEntry
    similarity: float | None = None


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """SPEC 6.1 search options.

    `kind` prefers one kind; with `kind_fallback`, fewer than 3 hits of that kind are
    topped up with hits of any kind. `time_after` / `time_before` bound the event time
    (memories without one are left out). `min_score` drops weak lexical hits.
    """

    query: str
    kind: MemoryKind | None = None
    kind_fallback: bool = True
    time_after: datetime | None = None
    time_before: datetime | None = None
    max_results: int = DEFAULT_MAX_RESULTS
    min_score: float = DEFAULT_MIN_SCORE
    order_by_event_time: bool = False
    deduplicate: bool = True
    hybrid: bool = True
    rrf_k: int = DEFAULT_RRF_K


@dataclass(frozen=True, kw_only=True)
class MemoryOperation:
    """One write an extractor asked for (SPEC 6.4: from its tool calls)."""

    op: Literal["add", "update", "delete", "clear"]
    memory_id: str = ""
    draft: MemoryDraft | None = None


@dataclass(frozen=True, kw_only=True)
class ExtractionCursor:
    """How far auto memory has read a session's ledger: events up to `last_seq` are done."""

    last_seq: int = 0
    extracted_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    """What `apply` did. `stale` means another worker had moved the cursor: nothing applied."""

    stale: bool = False
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    skipped: int = 0


def _clean_list(values: Iterable[str], limit: int) -> tuple[str, ...]:
    cleaned = [" ".join(str(v).split()) for v in values]
    return tuple(dict.fromkeys(v for v in cleaned if v))[:limit]
