"""Synchronous summaries inside a run (SPEC 4.7) and pre-call compaction (SPEC 4.8).

Before a model call whose request reaches the pre-call threshold (0.7 of the window, at
least 2,000 tokens), the flow asks for a summary now, with the request itself as the
cache-safe parent. Only if the summary advanced is the request rebuilt, from the
pre-content snapshot (the instruction and tools) through the projection and compaction
again. A summary that advanced in memory but failed to persist still yields the rebuilt
request (with a warning); a rebuild that fails, or that would change the active turn,
keeps the original request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.core.flow.governance import ContextGovernance
from runs.core.flow.request import BuiltRequest
from runs.core.invocation import Invocation
from sessions_app.core.session import Summary
from sessions_app.core.summary import ForkParent, SummaryOutcome, refresh_summaries

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PrecallReport:
    """What pre-call compaction did for one model call (kept in the call's stats)."""

    threshold: int
    tokens_before: int
    status: str
    """`advanced` (rebuilt), `not_advanced`, `unsafe_rebuild`, `rebuild_failed`, `error`."""
    summary_reason: str | None = None
    tokens_after: int | None = None
    persisted: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "status": self.status,
            "summary_reason": self.summary_reason,
            "persisted": self.persisted,
        }


def advanced(before: Summary | None, after: Summary | None) -> bool:
    """SPEC 4.8 step 4: the summary exists now and did not, or moved on in any way."""
    if after is None:
        return False
    if before is None:
        return True
    return (
        after.last_seq > before.last_seq
        or (after.boundary is not None and before.boundary is not None and (
            after.boundary.cutoff_at > before.boundary.cutoff_at
            or (after.boundary.cutoff_at == before.boundary.cutoff_at
                and after.boundary.last_event_id != before.boundary.last_event_id)
        ))
        or after.updated_at > before.updated_at
        or after.text != before.text
    )


async def summarize_now(
    invocation: Invocation,
    governance: ContextGovernance,
    *,
    parent: ForkParent | None,
    window: int,
    request_tokens: int | None = None,
) -> SummaryOutcome | None:
    """A synchronous summary of the invocation's filter key; the loaded session is
    refreshed with what advanced. None when the agent has no summary engine or it failed."""
    engine = governance.summaries
    if engine is None:
        return None
    try:
        outcome = await engine.summarize(
            invocation.session_service,
            invocation.session.key,
            filter_key=invocation.filter_key,
            parent=parent,
            context_window=window,
            request_tokens=request_tokens,
            lock_wait_s=governance.sync_lock_wait_s,
        )
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.debug("run %s: synchronous summary failed", invocation.run_id, exc_info=True)
        return None
    refresh_summaries(invocation.session, outcome)
    return outcome


def _active_turn(built: BuiltRequest) -> list[tuple[str, Any]]:
    return [(i.event.id if i.event else "", i.message) for i in built.items if i.active]


async def compact_before_call(
    invocation: Invocation,
    built: BuiltRequest,
    *,
    governance: ContextGovernance,
    rebuild: Callable[[], BuiltRequest],
) -> tuple[BuiltRequest, PrecallReport | None]:
    """SPEC 4.8: the request to send, and a report when the threshold was reached."""
    config = governance.precall
    if not config.enabled or governance.summaries is None:
        return built, None
    threshold = config.threshold(built.window)
    tokens = built.sent_tokens
    if tokens < threshold:
        return built, None
    filter_key = invocation.filter_key
    before = invocation.session.summaries.get(filter_key)
    outcome = await summarize_now(
        invocation, governance, parent=built.fork_parent(), window=built.window, request_tokens=tokens
    )
    if outcome is None:
        return built, PrecallReport(threshold=threshold, tokens_before=tokens, status="error")
    reason = outcome.primary.reason
    if not advanced(before, invocation.session.summaries.get(filter_key)):
        return built, PrecallReport(threshold=threshold, tokens_before=tokens, status="not_advanced", summary_reason=reason)
    persisted = outcome.primary.persisted
    if not persisted:
        logger.warning(
            "run %s: the summary advanced in memory but was not stored (%s); using the rebuilt request",
            invocation.run_id, outcome.primary.error,
        )
    report = {"threshold": threshold, "tokens_before": tokens, "summary_reason": reason, "persisted": persisted}
    try:
        rebuilt = rebuild()
    except Exception:
        logger.warning("run %s: could not rebuild the request after a summary", invocation.run_id, exc_info=True)
        return built, PrecallReport(status="rebuild_failed", **report)
    if _active_turn(rebuilt) != _active_turn(built):
        # Not safe: the active turn must reach the model exactly as it would have.
        logger.warning("run %s: the rebuilt request changed the active turn; keeping the original", invocation.run_id)
        return built, PrecallReport(status="unsafe_rebuild", **report)
    return rebuilt, PrecallReport(status="advanced", tokens_after=rebuilt.sent_tokens, **report)
