"""Summary services: what the Celery task runs, and enqueueing it on commit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from sessions_app import models as orm
from sessions_app.backends import DjangoSessionService, get_session_sync
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import ForkParent, SummaryJob, SummaryOutcome


def session_summarize(
    *, session_id: str, filter_key: str, last_seq: int, parent: Mapping[str, Any] | None = None
) -> SummaryOutcome | None:
    """Run the summary job for (session, filter key, last seq); None when the session is gone.

    Idempotent: once the stored summary covers `last_seq`, running it again does nothing.
    `parent` is the request the job may fork from (SPEC 3.6), as `ForkParent.to_dict` wrote it.
    """
    from agentsite.runtime import summary_engine

    row = orm.Session.objects.filter(id=session_id).only("id", "app", "user_id").first()
    if row is None:
        return None
    key = SessionKey(app=row.app, user_id=str(row.user_id), session_id=row.id)
    job = SummaryJob(
        key=key, filter_key=filter_key, last_seq=last_seq, parent=ForkParent.from_dict(parent) if parent else None
    )
    return async_to_sync(summary_engine().run_job)(DjangoSessionService(), job)


def summary_job_enqueue(
    *,
    session_id: str,
    filter_key: str,
    last_seq: int,
    queue: str | None = None,
    parent: Mapping[str, Any] | None = None,
) -> None:
    """Send the job once the current transaction commits (at once outside of one), with the
    fork parent it may summarize from (JSON, SPEC 3.6) when there is one."""
    from sessions_app.tasks import session_summarize_task

    def send() -> None:
        options = {"queue": queue} if queue else {}
        args = (
            (session_id, filter_key, last_seq) if parent is None else (session_id, filter_key, last_seq, dict(parent))
        )
        session_summarize_task.apply_async(args=args, **options)

    transaction.on_commit(send)


MAX_CALLS = 500


def context_report(*, session: orm.Session) -> dict[str, Any]:
    """What the next model call on `session` would see, block by block, and the context
    stats of its past model calls (the inspector's chart), oldest first."""
    from agentsite.runtime import run_manager
    from runs.core.errors import AgentNotFoundError

    runner = run_manager().runner
    try:
        agent = runner.agent(session.agent or None)
    except AgentNotFoundError:
        agent = runner.agent(None)
    key = SessionKey(app=session.app, user_id=str(session.user_id), session_id=session.id)
    loaded = get_session_sync(
        key, event_limit=runner.history_event_limit, after_summary=runner.app if runner.load_after_summary else None
    )
    assert loaded is not None
    preview = agent.context_preview(loaded, filter_key=runner.app) if hasattr(agent, "context_preview") else None
    summary = preview.projection.summary if preview is not None else None
    rows = (
        orm.Event.objects.filter(session=session, role="assistant", payload__extensions__has_key="context")
        .order_by("-seq")
        .values("seq", "event_id", "invocation_id", "created_at", "payload__extensions__context")[:MAX_CALLS]
    )
    calls = [
        {
            "seq": row["seq"],
            "event_id": row["event_id"],
            "invocation_id": row["invocation_id"],
            "created_at": row["created_at"].isoformat(),
            **(row["payload__extensions__context"] or {}),
        }
        for row in reversed(list(rows))
    ]
    return {
        "session_id": session.id,
        "agent": agent.name,
        "model": agent.model_name,
        "context_window": preview.window if preview is not None else None,
        "filter_key": runner.app,
        "boundary": None
        if summary is None or summary.boundary is None
        else {
            "last_seq": summary.boundary.last_seq,
            "last_event_id": summary.boundary.last_event_id,
            "cutoff_at": summary.boundary.cutoff_at.isoformat(),
        },
        "blocks": preview.blocks() if preview is not None else [],
        "totals": None
        if preview is None
        else {
            "sent_tokens": preview.sent_tokens,
            "raw_tokens": preview.raw_tokens,
            "saved_tokens": max(0, preview.raw_tokens - preview.sent_tokens),
            "tools_tokens": preview.tools_tokens,
            "messages": len(preview.request.messages),
            "history_events": sum(1 for i in preview.items if i.kind == "event"),
            "hidden_events": preview.projection.hidden_events,
            "ledger_events": session.last_seq,
            "compaction": preview.compaction.to_dict(),
        },
        "manifest": preview.manifest.to_dict() if preview is not None and preview.manifest is not None else None,
        "calls": calls,
    }
