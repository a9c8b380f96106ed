"""Memory extraction: the job."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sessions_app.core.events import Event
from sessions_app.core.memory import (
    ApplyResult,
    ExtractionCursor,
    MemoryEntry,
    MemoryOperation,
    MemoryService,
    SearchOptions,
    UserKey,
)
from sessions_app.core.memory_episodes import AssistantEpisodeExtractor, episode_operations, episode_request
from sessions_app.core.memory_extract.delta import conversation_message, within_budget, without_polluted
from sessions_app.core.memory_extract.prompt import parse_operations
from sessions_app.core.memory_extract.values import (
    EVENT_PAGE,
    EXISTING_FOR_PROMPT,
    EXTRACTION_TOOLS,
    MAX_MESSAGE_CHARS,
    MAX_REQUEST_CHARS,
    POLLUTED,
    POLLUTED_STATE_KEY,
    CheckContext,
    Checker,
    ConversationMessage,
    ExtractionOutcome,
    ExtractionRequest,
    MemoryExtractor,
    Status,
    logger,
)
from sessions_app.core.memory_policy import RECONCILE, UpdatePolicy, apply_update_policy
from sessions_app.core.redo import superseded_event_ids
from sessions_app.core.session import SessionKey, SessionService

# -- the job ------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class AutoMemory:
    """The auto-memory job over a session (see the module docstring)."""

    sessions: SessionService
    memory: MemoryService
    extractor: MemoryExtractor
    checkers: Sequence[Checker] = ()
    checkers_any: bool = False
    enabled_tools: tuple[str, ...] = EXTRACTION_TOOLS
    policy: UpdatePolicy = "merge_similar"
    # SPEC 6.4: the optional second stage; needs an extractor that can do it.
    assistant_episodes: bool = False
    request_chars: int = MAX_REQUEST_CHARS
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def _due(self, context: CheckContext) -> bool:
        if not self.checkers:
            return True
        results = (check(context) for check in self.checkers)
        return any(results) if self.checkers_any else all(results)

    async def process(self, key: SessionKey) -> ExtractionOutcome:
        session = await self.sessions.get_session(key, event_limit=0)
        if session is None:
            return ExtractionOutcome(status="nothing_new", last_seq=0, reason="session not found")
        if session.state.get(POLLUTED_STATE_KEY) == POLLUTED:
            return ExtractionOutcome(status="polluted", last_seq=0, reason="session marked polluted")
        done: list[ExtractionOutcome] = []
        # Page through the delta; each step is extracted and committed on its own, so a
        # long backlog moves forward in bounded steps.
        while True:
            cursor = await self.memory.get_cursor(key)
            events = await self.sessions.list_events(key, after_seq=cursor.last_seq, limit=EVENT_PAGE)
            if not events:
                return _combined(done) if done else ExtractionOutcome(status="nothing_new", last_seq=cursor.last_seq)
            outcome = await self._extract_page(key, cursor, events)
            if outcome.status in ("stale", "not_due"):
                return _combined([*done, outcome]) if done else outcome
            done.append(outcome)
            if len(events) < EVENT_PAGE and outcome.last_seq >= max(e.seq or 0 for e in events):
                return _combined(done)

    async def _extract_page(
        self, key: SessionKey, cursor: ExtractionCursor, events: Sequence[Event]
    ) -> ExtractionOutcome:
        user = UserKey(app=key.app, user_id=key.user_id)
        # Issue 21: a turn the user regenerated or edited away is history they replaced,
        # not something to learn from; the cursor still moves past it.
        superseded = superseded_event_ids(events)
        messages = [m for m in (conversation_message(e) for e in events if e.id not in superseded) if m is not None]
        clean, skipped = without_polluted(messages)
        batch = within_budget(clean, self.request_chars)
        # SPEC 6.3: the cursor never passes a message the extractor was not given; skipped
        # (polluted) messages and tool events before that point count as read.
        new_seq = clean[len(batch)].seq - 1 if len(batch) < len(clean) else max(e.seq or 0 for e in events)
        reasons = [reason for message, reason in skipped if message.seq <= new_seq]
        reason = "; ".join(reasons)

        async def commit(operations: Sequence[MemoryOperation], status: Status) -> ExtractionOutcome:
            result = await self.memory.apply(
                user,
                operations,
                session=key,
                expected_seq=cursor.last_seq,
                new_seq=new_seq,
                reconcile=RECONCILE[self.policy],
            )
            common: dict[str, Any] = {
                "last_seq": new_seq,
                "messages": len(batch),
                "skipped_messages": len(reasons),
                "reason": reason,
            }
            if result.stale:
                return ExtractionOutcome(status="stale", **common)
            return ExtractionOutcome(status=status, result=result, **common)

        if not batch:
            return await commit([], "polluted" if reasons else "nothing_new")
        if not self._due(CheckContext(messages=tuple(batch), cursor=cursor, now=self.clock())):
            return ExtractionOutcome(status="not_due", last_seq=cursor.last_seq, messages=len(batch))
        existing = await self._existing(user, batch)
        request = ExtractionRequest(
            messages=tuple(batch),
            existing=tuple(existing),
            reference_time=batch[-1].at,
            enabled_tools=self.enabled_tools,
            policy=self.policy,
        )
        operations = parse_operations(await self.extractor.extract(request), enabled=self.enabled_tools)
        operations += await self._assistant_episodes(batch, operations)
        current = {
            op.memory_id: entry
            for op in operations
            if op.op == "update"
            for entry in [await self.memory.get(user, op.memory_id)]
            if entry is not None
        }
        return await commit(apply_update_policy(self.policy, operations, current=current), "extracted")

    async def _assistant_episodes(
        self, batch: Sequence[ConversationMessage], operations: Sequence[MemoryOperation]
    ) -> list[MemoryOperation]:
        """SPEC 6.4 stage 2 (`memory_episodes`): best effort, so a failure keeps stage 1."""
        extractor = self.extractor
        if not self.assistant_episodes or not isinstance(extractor, AssistantEpisodeExtractor):
            return []
        if any(op.op in ("delete", "clear") for op in operations):
            return []  # a pair may be what the user asked to forget
        request = episode_request(batch, batch[-1].at)
        if request is None:
            return []
        try:
            calls = await extractor.extract_assistant_episodes(request)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("assistant-episode extraction failed; keeping the ordinary operations", exc_info=True)
            return []
        return episode_operations(calls, request)

    async def _existing(self, user: UserKey, messages: Sequence[ConversationMessage]) -> list[MemoryEntry]:
        """SPEC 6.3 step 5: memories relevant to the conversation, else the 10 most recent.
        Merge-similar searches with the user's text; the history-keeping policies with the
        assistant's too, so an answer's earlier record is found and not repeated."""
        roles = ("user",) if self.policy == "merge_similar" else ("user", "assistant")
        text = " ".join(m.text for m in messages if m.role in roles)[:MAX_MESSAGE_CHARS]
        found: list[MemoryEntry] = []
        if text.strip():
            found = await self.memory.search(
                user, SearchOptions(query=text, max_results=EXISTING_FOR_PROMPT, min_score=0.0, deduplicate=False)
            )
        recent = await self.memory.load(user, limit=10)
        seen = {e.id for e in found}
        return [*found, *(e for e in recent if e.id not in seen)][:EXISTING_FOR_PROMPT]


def _combined(outcomes: Sequence[ExtractionOutcome]) -> ExtractionOutcome:
    """One outcome for the steps of a job: extracted if any step extracted."""
    last = outcomes[-1]
    results = [o.result for o in outcomes if o.result is not None]
    statuses = {o.status for o in outcomes}
    status: Status = "extracted" if "extracted" in statuses else last.status
    if status != "extracted" and "polluted" in statuses and last.status == "nothing_new":
        status = "polluted"
    return ExtractionOutcome(
        status=status,
        last_seq=last.last_seq,
        messages=sum(o.messages for o in outcomes),
        skipped_messages=sum(o.skipped_messages for o in outcomes),
        result=ApplyResult(
            stale=last.status == "stale",
            added=tuple(i for r in results for i in r.added),
            updated=tuple(i for r in results for i in r.updated),
            deleted=tuple(i for r in results for i in r.deleted),
            skipped=sum(r.skipped for r in results),
        )
        if results
        else None,
        reason="; ".join(o.reason for o in outcomes if o.reason),
    )
