"""The recall tools read a session's summaries once per run (issue 23), and again after the
run itself wrote one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from runs.core.tools.base import ToolContext
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex
from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary
from sessions_app.recall_tools import recall_tools

APP = "runsum"


class CountingIndex(InMemoryRecallIndex):
    """The in-memory index, counting its summary reads."""

    def __init__(self, service: InMemorySessionService) -> None:
        super().__init__(service)
        self.summary_reads = 0

    async def summaries(self, key: SessionKey) -> Mapping[str, Summary]:
        self.summary_reads += 1
        return await super().summaries(key)


def said(role: str, text: str) -> Event:
    return Event(author="user" if role == "user" else "agent", message=Message(role=role, content=text))  # type: ignore[arg-type]


def context(session: Session, index: Any, run: str) -> ToolContext:
    return ToolContext(
        session=session,
        invocation_id=run,
        tool_call_id="t",
        agent_name="a",
        cancel_event=asyncio.Event(),
        services={"recall": index},
    )


def tool(name: str) -> Any:
    return next(t for t in recall_tools() if t.name == name)


async def summary_through(service: InMemorySessionService, session: Session, seq: int) -> Summary:
    events = await service.list_events(session.key, limit=100)
    last = next(e for e in events if e.seq == seq)
    return Summary(
        text="Earlier: the deploy key.",
        boundary=SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=seq),
    )


async def loaded(service: InMemorySessionService) -> Session:
    session = await service.create_session(app=APP, user_id="alice")
    for role, text in [
        ("user", "The deploy key for staging is KEY-ALPHA."),
        ("assistant", "Noted, KEY-ALPHA for staging."),
        ("user", "And production uses KEY-OMEGA."),
        ("assistant", "Noted, KEY-OMEGA for production."),
    ]:
        await service.append_event(session, said(role, text))
    await service.put_summary(session.key, await summary_through(service, session, 2))
    found = await service.get_session(session.key)
    assert found is not None
    return found


async def test_a_runs_recall_calls_read_the_summaries_once() -> None:
    service = InMemorySessionService()
    index = CountingIndex(service)
    session = await loaded(service)
    run = context(session, index, "run-1")

    first = await tool("session_search").call(run, {"query": "staging deploy key"})
    await tool("session_search").call(run, {"query": "production deploy key", "scope": "current_session"})
    await tool("search_sections").call(run, {"query": "deploy key"})

    assert index.summary_reads == 1
    assert [r["seq"] for r in first["results"]] and all(r["seq"] <= 2 for r in first["results"])
    # The next run (another invocation, its own session object) reads them again.
    again = await service.get_session(session.key)
    assert again is not None
    await tool("session_search").call(context(again, index, "run-2"), {"query": "staging deploy key"})
    assert index.summary_reads == 2


async def test_a_summary_the_run_writes_is_seen_by_its_next_recall_call() -> None:
    service = InMemorySessionService()
    index = CountingIndex(service)
    session = await loaded(service)
    run = context(session, index, "run-1")
    before = await tool("session_search").call(run, {"query": "production deploy key KEY-OMEGA"})
    assert not any(r["seq"] == 3 for r in before["results"])  # not hidden yet

    # The run compacts: the summary moves to seq 4, stored and put into the run's session
    # (as `refresh_summaries` does).
    moved = await summary_through(service, session, 4)
    await service.put_summary(session.key, moved)
    session.summaries[moved.filter_key] = moved

    after = await tool("session_search").call(run, {"query": "production deploy key KEY-OMEGA"})
    assert index.summary_reads == 2
    assert any(r["seq"] == 3 for r in after["results"])


async def test_a_reused_invocation_id_never_finds_another_runs_summaries() -> None:
    service = InMemorySessionService()
    index = CountingIndex(service)
    session = await loaded(service)
    await tool("session_search").call(context(session, index, "same"), {"query": "staging deploy key"})
    other = dataclasses.replace(session, summaries={})
    await tool("session_search").call(context(other, index, "same"), {"query": "staging deploy key"})
    assert index.summary_reads == 2
