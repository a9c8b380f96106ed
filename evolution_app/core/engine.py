"""The review job (SPEC 9.2): one session's new events in, candidates and a review record out.

`EvolutionEngine.review(key)`:

1. read the events after the session's review cursor (nothing new: nothing to do);
2. scan the delta; without any conversation, stop (cursor unchanged, SPEC 9.2 step 3);
3. the agent wrote a SKILL.md itself, or the evidence gate declines: record the skip and
   its reason, and move the cursor past the delta;
4. ask the reviewer (a reviewer error propagates: the cursor stays, the job is retried);
5. reconcile with the library (near-duplicates become updates, conflicts flagged, user
   facts refused), render each proposal's files, run the gates;
6. commit the review record, its candidates and the cursor move in one step, conditional
   on the cursor still being where step 1 read it: the job run twice, or by two workers
   at once, has one effect.

The store decides what a candidate's outcome means on its side: `publish` becomes a
published skill revision, `hold` a candidate waiting for a person, `rejected` a candidate
kept with the gate results that stopped it (the audit trail).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from evolution_app.core.delta import ReviewPolicy, scan_delta
from evolution_app.core.gates import Gate, GateContext, GateRun, run_gates
from evolution_app.core.reconcile import Proposal, UserFacts, reconcile
from evolution_app.core.review import Reviewer, ReviewInput, pick_evidence
from evolution_app.core.spec import LibraryEntry, render_files
from sessions_app.core.events import Event
from sessions_app.core.session import SessionKey, SessionService

logger = logging.getLogger(__name__)

EVENT_PAGE = 500
MAX_DELTA_EVENTS = 5000
ReviewStatus = Literal["reviewed", "skipped", "nothing_new", "no_conversation", "stale", "missing"]


@dataclass(frozen=True, kw_only=True)
class CandidateDraft:
    """A gated proposal, ready to be stored."""

    proposal: Proposal
    files: dict[str, str]
    gates: GateRun
    evidence: tuple[dict[str, Any], ...] = ()

    @property
    def unchanged(self) -> bool:
        base = self.proposal.base
        return base is not None and dict(base.files) == self.files


@dataclass(frozen=True, kw_only=True)
class ReviewRecord:
    """What one review of one delta did (kept by the store: the skips' reasons too)."""

    from_seq: int
    to_seq: int
    status: ReviewStatus
    reason: str = ""
    notes: tuple[str, ...] = ()
    candidates: tuple[CandidateDraft, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "from_seq": self.from_seq,
            "to_seq": self.to_seq,
            "reason": self.reason,
            "notes": list(self.notes),
            "candidates": [
                {
                    "name": c.proposal.name,
                    "action": c.proposal.action,
                    "outcome": c.gates.outcome,
                    "conflict": c.proposal.conflict,
                }
                for c in self.candidates
            ],
        }


class ReviewStore(Protocol):
    """Where the review job keeps its cursor and writes what it decided."""

    async def cursor(self, key: SessionKey) -> int:
        """The last seq reviewed (0 before the first review)."""
        ...

    async def library(self, key: SessionKey) -> list[LibraryEntry]:
        """The skills the session's agent can load now."""
        ...

    async def user_facts(self, key: SessionKey) -> UserFacts:
        """What is known about the session's user (never to enter a skill)."""
        ...

    async def waiting(self, key: SessionKey) -> set[str]:
        """Names of skills that have a candidate waiting for a person."""
        ...

    async def commit(self, key: SessionKey, *, expected_seq: int, record: ReviewRecord) -> bool:
        """Store the record and its candidates and move the cursor to `record.to_seq`, in one
        step, only if the cursor is still `expected_seq`; False (nothing stored) otherwise."""
        ...


@dataclass(kw_only=True)
class EvolutionEngine:
    """The review job over a session (see the module docstring)."""

    sessions: SessionService
    store: ReviewStore
    reviewer: Reviewer
    gates: Sequence[Gate] = ()
    policy: ReviewPolicy = field(default_factory=ReviewPolicy)

    async def _delta_events(self, key: SessionKey, after: int) -> list[Event]:
        events: list[Event] = []
        while len(events) < MAX_DELTA_EVENTS:
            page = await self.sessions.list_events(key, after_seq=after, limit=EVENT_PAGE)
            events.extend(page)
            if len(page) < EVENT_PAGE:
                break
            after = page[-1].seq or after
        return events

    async def review(self, key: SessionKey) -> ReviewRecord:
        cursor = await self.store.cursor(key)
        events = await self._delta_events(key, cursor)
        if not events:
            return ReviewRecord(from_seq=cursor, to_seq=cursor, status="nothing_new")
        delta = scan_delta(events)
        if not delta.has_conversation:
            return ReviewRecord(from_seq=cursor, to_seq=cursor, status="no_conversation")
        if delta.wrote_skill:
            return await self._commit(
                key,
                cursor,
                ReviewRecord(
                    from_seq=cursor,
                    to_seq=delta.last_seq,
                    status="skipped",
                    reason="the agent wrote a SKILL.md itself in this delta",
                ),
            )
        review, why = self.policy.decide(delta)
        if not review:
            return await self._commit(
                key,
                cursor,
                ReviewRecord(
                    from_seq=cursor,
                    to_seq=delta.last_seq,
                    status="skipped",
                    reason=why,
                ),
            )
        library = await self.store.library(key)
        decision = await self.reviewer.review(
            ReviewInput(
                app=key.app,
                user_id=key.user_id,
                session_id=key.session_id,
                delta=delta,
                existing=tuple(library),
            )
        )
        if decision.skip_reason or decision.empty:
            return await self._commit(
                key,
                cursor,
                ReviewRecord(
                    from_seq=cursor,
                    to_seq=delta.last_seq,
                    status="skipped",
                    reason=f"reviewer: {decision.skip_reason or 'nothing to learn'}",
                    notes=decision.dropped,
                ),
            )
        reconciled = reconcile(
            decision, library, facts=await self.store.user_facts(key), waiting=await self.store.waiting(key)
        )
        names = frozenset(e.name for e in library)
        drafts: list[CandidateDraft] = []
        notes = list(reconciled.notes)
        for proposal in reconciled.proposals:
            files = render_files(proposal.spec)
            if proposal.base is not None and dict(proposal.base.files) == files:
                notes.append(f"{proposal.name!r}: the library already holds these files; nothing to change")
                continue
            gates = await run_gates(
                self.gates,
                GateContext(
                    proposal=proposal,
                    files=files,
                    delta=delta,
                    library_names=names,
                ),
            )
            drafts.append(
                CandidateDraft(
                    proposal=proposal,
                    files=files,
                    gates=gates,
                    evidence=tuple(pick_evidence(delta, proposal.spec.evidence)),
                )
            )
        reason = f"evidence gate: {why}"
        return await self._commit(
            key,
            cursor,
            ReviewRecord(
                from_seq=cursor,
                to_seq=delta.last_seq,
                status="reviewed",
                reason=reason,
                notes=tuple(notes),
                candidates=tuple(drafts),
            ),
        )

    async def _commit(self, key: SessionKey, cursor: int, record: ReviewRecord) -> ReviewRecord:
        if await self.store.commit(key, expected_seq=cursor, record=record):
            return record
        logger.info("evolution review of %s: the cursor moved meanwhile; this review is dropped", key.session_id)
        return ReviewRecord(from_seq=cursor, to_seq=cursor, status="stale", reason="another review got there first")


@dataclass(kw_only=True)
class InMemoryReviewStore:
    """`ReviewStore` in memory (tests, embedding): records kept in a list per session."""

    entries: list[LibraryEntry] = field(default_factory=list)
    facts: UserFacts = field(default_factory=UserFacts)
    cursors: dict[str, int] = field(default_factory=dict)
    records: dict[str, list[ReviewRecord]] = field(default_factory=dict)

    async def cursor(self, key: SessionKey) -> int:
        return self.cursors.get(key.session_id, 0)

    async def library(self, key: SessionKey) -> list[LibraryEntry]:
        return list(self.entries)

    async def user_facts(self, key: SessionKey) -> UserFacts:
        return self.facts

    async def waiting(self, key: SessionKey) -> set[str]:
        return {
            c.proposal.name
            for rs in self.records.values()
            for r in rs
            for c in r.candidates
            if c.gates.outcome == "hold"
        }

    async def commit(self, key: SessionKey, *, expected_seq: int, record: ReviewRecord) -> bool:
        if self.cursors.get(key.session_id, 0) != expected_seq:
            return False
        self.cursors[key.session_id] = record.to_seq
        self.records.setdefault(key.session_id, []).append(record)
        return True
