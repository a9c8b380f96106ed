"""Synchronous summaries inside a run (SPEC 4.7) and pre-call compaction (SPEC 4.8).

Before a model call whose request reaches the pre-call threshold (0.7 of the window, at
least 2,000 tokens), the flow asks for a summary now, with the request itself as the
cache-safe parent. Only if the summary advanced is the request rebuilt, from the
pre-content snapshot (the instruction and tools) through the projection and compaction
again. A summary that advanced in memory but failed to persist still yields the rebuilt
request (with a warning); a rebuild that fails, or that would change the active turn,
keeps the original request.

Non-blocking compaction (issue 12, C5): with `ContextGovernance.background`, a request that
reaches the soft threshold (0.55 of the window) starts that summary as a background task
and goes out unchanged; the next call swaps the finished summary in. The synchronous path
above stays as the fallback for a request that reaches 0.7 first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.core.context.governance import ContextGovernance
from runs.core.context.request import BuiltRequest
from runs.core.invocation import SPAWN_SERVICE, Invocation
from sessions_app.core.session import Summary
from sessions_app.core.summary import ForkParent, SummaryOutcome, refresh_summaries

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PrecallReport:
    """What pre-call compaction did for one model call (kept in the call's stats)."""

    threshold: int
    tokens_before: int
    status: str
    """`advanced` (rebuilt), `not_advanced`, `unsafe_rebuild`, `rebuild_failed`, `error`;
    `below_threshold` when only the background summary (C5) did something."""
    summary_reason: str | None = None
    tokens_after: int | None = None
    persisted: bool | None = None
    soft_threshold: int | None = None
    background: str | None = None
    """Issue 12, C5: `started`, `running`, `swapped` (a finished summary went in before this
    call), `waited` (this call waited for it at the pre-call threshold), `wait_timeout`;
    `unused_<reason>` (it did not advance: `error`, `busy`...), `swapped_unsafe_rebuild` and
    the like when it advanced but the rebuilt request could not be used."""
    stall_ms: float = 0.0
    """How long compaction held this call back (waits, summaries and rebuilds)."""
    wait_ms: float = 0.0
    """The part of `stall_ms` spent waiting for a summary (synchronous or in flight)."""
    fallback: str | None = None
    """The request was still over the threshold after the summary (or without one):
    `placeholders` (the run's older results replaced), `truncated` (results cut too) or
    `over` (nothing more could be taken out)."""
    lock_timeout: bool = False
    """SPEC 3.3.1: the synchronous summary waited `ContextGovernance.sync_lock_wait_s` (5 s)
    for another summariser's lock and gave up; the request went out without that summary
    (fitted, see `fallback`, when it was still over the threshold)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "status": self.status,
            "summary_reason": self.summary_reason,
            "persisted": self.persisted,
            "soft_threshold": self.soft_threshold,
            "background": self.background,
            "stall_ms": self.stall_ms,
            "wait_ms": self.wait_ms,
            "fallback": self.fallback,
            "lock_timeout": self.lock_timeout,
        }


def advanced(before: Summary | None, after: Summary | None) -> bool:
    """SPEC 4.8 step 4: the summary exists now and did not, or moved on in any way."""
    if after is None:
        return False
    if before is None:
        return True
    return (
        after.last_seq > before.last_seq
        or (
            after.boundary is not None
            and before.boundary is not None
            and (
                after.boundary.cutoff_at > before.boundary.cutoff_at
                or (
                    after.boundary.cutoff_at == before.boundary.cutoff_at
                    and after.boundary.last_event_id != before.boundary.last_event_id
                )
            )
        )
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
    refresh: bool = True,
) -> SummaryOutcome | None:
    """A synchronous summary of the invocation's filter key; with `refresh`, the loaded
    session is refreshed with what advanced. None when the agent has no summary engine or
    it failed."""
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
    if refresh:
        refresh_summaries(invocation.session, outcome)
    return outcome


def _kept_active(built: BuiltRequest, boundary_seq: int) -> list[tuple[str, Any]]:
    """What of the running invocation a rebuild must keep exactly: its user messages, and
    its events after `boundary_seq` (what the new summary does not stand for)."""
    return [
        (i.event.id, i.message)
        for i in built.items
        if i.active
        and i.event is not None
        and (i.message.role == "user" or (i.event.seq or 0) > boundary_seq)
        and i.compaction is None
    ]


@dataclass
class _Background:
    task: asyncio.Task[SummaryOutcome]
    invocation_id: str
    tokens: int
    orphan: bool = False
    """The run that started it has ended: drop the entry once the task is done."""


class BackgroundCompactions:
    """Issue 12, C5: summaries started at the soft threshold, one per (session, filter key).

    The task runs beside the model calls of the run that started it; the next call takes
    its outcome and swaps the new summary in (`take`). A run that ends first leaves the
    task to finish on its loop (the summary is stored; the next run loads it), as the
    in-process summary jobs do. The task is the Runner's (`SPAWN_SERVICE`), so closing the
    runner cancels it. One instance per agent.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], _Background] = {}

    @staticmethod
    def _key(invocation: Invocation) -> tuple[str, str, str]:
        key = invocation.session.key
        return (key.app, key.session_id, invocation.filter_key)

    def _entry(self, invocation: Invocation) -> _Background | None:
        key = self._key(invocation)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not entry.task.done() and entry.task.get_loop() is not asyncio.get_running_loop():
            # Started on a loop this run cannot wait on: it stores its summary or not; the
            # synchronous path reads whatever is stored.
            return None
        if entry.invocation_id != invocation.invocation_id:
            entry.invocation_id, entry.orphan = invocation.invocation_id, False
        return entry

    def in_flight(self, invocation: Invocation) -> bool:
        entry = self._entry(invocation)
        return entry is not None and not entry.task.done()

    def start(self, invocation: Invocation, governance: ContextGovernance, built: BuiltRequest) -> bool:
        """Start a summary of the invocation's filter key unless one is in flight."""
        engine = governance.summaries
        key = self._key(invocation)
        if engine is None or self.in_flight(invocation):
            return False
        summary = engine.summarize(
            invocation.session_service,
            invocation.session.key,
            filter_key=invocation.filter_key,
            force=True,  # the soft threshold is the trigger
            parent=built.fork_parent(),
            context_window=built.window,
            request_tokens=built.sent_tokens,
            lock_wait_s=governance.sync_lock_wait_s,
        )
        name = f"soft-summary-{invocation.session.key.session_id}"
        # The runner's own task when there is a runner: its shutdown cancels the summary
        # cleanly, on its loop (lock released), instead of leaving it pending on a dead loop.
        spawn = invocation.services.get(SPAWN_SERVICE)
        task = (
            spawn(summary, name=name) if callable(spawn) else asyncio.get_running_loop().create_task(summary, name=name)
        )
        entry = _Background(task=task, invocation_id=invocation.invocation_id, tokens=built.sent_tokens)
        self._entries[key] = entry
        task.add_done_callback(lambda t: self._finished(key, entry, t))
        return True

    def _finished(self, key: tuple[str, str, str], entry: _Background, task: asyncio.Task[SummaryOutcome]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background summary of session %s failed: %r", key[1], task.exception())
        if entry.orphan and self._entries.get(key) is entry:
            del self._entries[key]

    def take(self, invocation: Invocation) -> SummaryOutcome | None:
        """The outcome of a finished background summary (once); None when there is none."""
        entry = self._entry(invocation)
        if entry is None or not entry.task.done():
            return None
        del self._entries[self._key(invocation)]
        if entry.task.cancelled() or entry.task.exception() is not None:
            return None
        return entry.task.result()

    async def wait(self, invocation: Invocation, timeout_s: float) -> SummaryOutcome | None:
        """Wait up to `timeout_s` for the summary in flight; its outcome, else None."""
        entry = self._entry(invocation)
        if entry is None:
            return None
        if not entry.task.done():
            # asyncio.wait neither cancels the task on timeout nor when this run is cancelled.
            await asyncio.wait({entry.task}, timeout=timeout_s)
        return self.take(invocation)

    def release(self, invocation: Invocation) -> None:
        """The run ended: forget what it finished, leave what still runs to finish alone."""
        for key, entry in list(self._entries.items()):
            if entry.invocation_id != invocation.invocation_id:
                continue
            if entry.task.done():
                del self._entries[key]
            else:
                entry.orphan = True

    async def join(self) -> None:
        """Wait for every background summary (tests, shutdown)."""
        tasks = [e.task for e in self._entries.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _swap_in(
    invocation: Invocation, built: BuiltRequest, outcome: SummaryOutcome, rebuild: Callable[[], BuiltRequest]
) -> tuple[BuiltRequest, str]:
    """Put a summary outcome into the loaded session and rebuild the request (SPEC 4.8
    steps 4-6): the request to send and `advanced`, `not_advanced`, `unsafe_rebuild` or
    `rebuild_failed`."""
    filter_key = invocation.filter_key
    before = invocation.session.summaries.get(filter_key)
    refresh_summaries(invocation.session, outcome)
    if not advanced(before, invocation.session.summaries.get(filter_key)):
        return built, "not_advanced"
    if not outcome.primary.persisted:
        logger.warning(
            "run %s: the summary advanced in memory but was not stored (%s); using the rebuilt request",
            invocation.run_id,
            outcome.primary.error,
        )
    try:
        rebuilt = rebuild()
    except Exception:
        logger.warning("run %s: could not rebuild the request after a summary", invocation.run_id, exc_info=True)
        return built, "rebuild_failed"
    boundary = rebuilt.projection.boundary_seq
    if _kept_active(rebuilt, boundary) != _kept_active(built, boundary):
        # Not safe: the active user message, and what of the run the summary does not
        # cover, must reach the model exactly as they would have.
        logger.warning("run %s: the rebuilt request changed the active turn; keeping the original", invocation.run_id)
        return built, "unsafe_rebuild"
    return rebuilt, "advanced"


def _fallback(fitted: BuiltRequest) -> str:
    stats = fitted.compaction
    if stats.fallback == 0:
        return "over"
    truncated = any(i.compaction == "pass2" and i.active for i in fitted.items)
    return "truncated" if truncated else "placeholders"


def _used(how: str, status: str, outcome: SummaryOutcome) -> str:
    if status == "advanced":
        return how
    if status == "not_advanced":
        return f"unused_{outcome.primary.reason}"  # error, busy, empty_text...
    return f"{how}_{status}"


async def compact_before_call(
    invocation: Invocation,
    built: BuiltRequest,
    *,
    governance: ContextGovernance,
    rebuild: Callable[[], BuiltRequest],
    background: BackgroundCompactions | None = None,
    fit: Callable[[int], BuiltRequest] | None = None,
) -> tuple[BuiltRequest, PrecallReport | None]:
    """SPEC 4.8 with issue 12's C5: the request to send, and a report when anything was
    done (a background summary swapped in or started, or the pre-call threshold reached).

    1. A background summary that finished since the last call is swapped in.
    2. Below the pre-call threshold: at or above the soft one, a background summary starts
       (unless one runs) and this request goes out as it is, without waiting.
    3. At the pre-call threshold: a background summary in flight is waited for (up to
       `wait_s`); if the request is still over, the synchronous summary and rebuild follow.
    4. A request still at the threshold after all that (no summary, a failed one, or a run
       whose own rounds outgrow the window) is fitted by `fit`: the run's older tool
       results become placeholders, then are cut (`fallback` in the report).
    `stall_ms` in the report is the time this call waited for all of it.
    """
    config = governance.precall
    if not config.enabled:
        return built, None
    if governance.summaries is None:
        threshold = config.threshold(built.window)
        if fit is None or built.sent_tokens < threshold:
            return built, None
        fitted = fit(threshold)
        return fitted, PrecallReport(
            threshold=threshold,
            tokens_before=built.sent_tokens,
            tokens_after=fitted.sent_tokens,
            status="no_summaries",
            fallback=_fallback(fitted),
        )
    began = time.perf_counter()
    soft = governance.background if background is not None else None
    threshold = config.threshold(built.window)
    report: dict[str, Any] = {"threshold": threshold, "tokens_before": built.sent_tokens}
    if soft is not None:
        report["soft_threshold"] = soft.threshold(built.window)
    background_status: str | None = None
    waited_s = 0.0

    def done(result: BuiltRequest, status: str, **extra: Any) -> tuple[BuiltRequest, PrecallReport]:
        if fit is not None and result.sent_tokens >= threshold:
            try:
                result = fit(threshold)
            except Exception:
                logger.warning("run %s: could not fit the request after compaction", invocation.run_id, exc_info=True)
            else:
                extra = {**extra, "tokens_after": result.sent_tokens, "fallback": _fallback(result)}
        stall = (time.perf_counter() - began) * 1000
        return result, PrecallReport(
            status=status,
            background=background_status,
            stall_ms=round(stall, 3),
            wait_ms=round(waited_s * 1000, 3),
            **{**report, **extra},
        )

    if background is not None and (finished := background.take(invocation)) is not None:
        built, swapped = _swap_in(invocation, built, finished, rebuild)
        background_status = _used("swapped", swapped, finished)
        report["tokens_before"] = built.sent_tokens
    tokens = built.sent_tokens
    if tokens < threshold:
        if soft is not None and tokens >= report["soft_threshold"]:
            assert background is not None
            if background.start(invocation, governance, built):
                background_status = "started"
            elif background_status is None:
                background_status = "running"
        if background_status is None:
            return built, None
        return done(built, "below_threshold")
    if soft is not None and background is not None and background.in_flight(invocation):
        wait_began = time.perf_counter()
        waited = await background.wait(invocation, soft.wait_s)
        waited_s += time.perf_counter() - wait_began
        if waited is None:
            background_status = "wait_timeout"
        else:
            built, swapped = _swap_in(invocation, built, waited, rebuild)
            background_status = _used("waited", swapped, waited)
            if built.sent_tokens < threshold:
                return done(
                    built,
                    "advanced",
                    tokens_after=built.sent_tokens,
                    summary_reason=waited.primary.reason,
                    persisted=waited.primary.persisted,
                )
    wait_began = time.perf_counter()
    outcome = await summarize_now(
        invocation,
        governance,
        parent=built.fork_parent(),
        window=built.window,
        request_tokens=built.sent_tokens,
        refresh=False,
    )
    waited_s += time.perf_counter() - wait_began
    if outcome is None:
        return done(built, "error")
    extra = {"summary_reason": outcome.primary.reason, "persisted": outcome.primary.persisted}
    rebuilt, status = _swap_in(invocation, built, outcome, rebuild)
    if status == "not_advanced":
        # "busy": the bounded lock wait ran out (SPEC 3.3.1); `done` fits the request instead.
        return done(built, status, summary_reason=outcome.primary.reason, lock_timeout=outcome.primary.reason == "busy")
    if status != "advanced":
        return done(built, status, **extra)
    return done(rebuilt, "advanced", tokens_after=rebuilt.sent_tokens, **extra)
