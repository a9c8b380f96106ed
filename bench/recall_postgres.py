"""PostgreSQL part of `bench/recall.py`: LoCoMo recall through `DjangoRecallIndex`, then
`session_search` latency at scale (10k and 100k events of one user) and the search's EXPLAIN."""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.recall_cases import APP, KS, T0, Case, recall

DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/agentsite_recall_bench"
SCALE_SIZES = (10_000, 100_000)
SESSION_EVENTS = 500
TIMED_QUERIES = 200
WARMUP_QUERIES = 10
TARGET_P50_MS = 50.0


# -- PostgreSQL: recall through DjangoRecallIndex, and scale -------------------------------------


def recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def insert_session(
    session_id: str,
    user_pk: int,
    turns: Sequence[tuple[str, str, str]],
    *,
    start: datetime,
    tool_every: int = 0,
    rng: random.Random | None = None,
) -> list[Any]:
    """One session with its events, written as ledger rows in bulk. `turns` are (role,
    author, text); with `tool_every`, every that many turns is followed by a tool call and
    its JSON result. Returns the stored events (core objects)."""
    from sessions_app import mapping
    from sessions_app import models as orm
    from sessions_app.core.events import Event, Message, ToolCall

    orm.Session.objects.create(id=session_id, app=APP, user_id=user_pk, created_at=start, updated_at=start)
    rows = []
    events = []
    clock = start
    for i, (role, author, text) in enumerate(turns):
        batch = [Event(author=author, message=Message(role=role, content=text))]  # type: ignore[arg-type]  # user/assistant
        if tool_every and i % tool_every == tool_every - 1 and rng is not None:
            call_id = f"call-{session_id}-{i}"
            words = text.split()[:6]
            batch.append(
                Event(
                    author="agent",
                    message=Message(
                        role="assistant",
                        tool_calls=(
                            ToolCall(id=call_id, name="search_notes", arguments=json.dumps({"q": " ".join(words)})),
                        ),
                    ),
                )
            )
            batch.append(
                Event(
                    author="agent",
                    object="tool.response",
                    message=Message(
                        role="tool",
                        tool_call_id=call_id,
                        tool_name="search_notes",
                        content=json.dumps(
                            {"matches": rng.randint(1, 9), "first": text[:200], "source": f"notes/{i}.md"}
                        ),
                    ),
                )
            )
        for event in batch:
            clock += timedelta(seconds=5)
            event = event.replace(created_at=clock, seq=len(rows) + 1)
            rows.append(
                mapping.event_to_row(event, session_id=session_id, seq=len(rows) + 1, tokens=len(event.text) // 4)
            )
            events.append(event)
    orm.Event.objects.bulk_create(rows, batch_size=2000)
    orm.Session.objects.filter(pk=session_id).update(last_seq=len(rows))
    return events


def analyze_tables(*, vacuum: bool = False) -> None:
    """Planner statistics; with `vacuum`, also merge the GIN indexes' pending lists (what
    autovacuum does after a burst of inserts), so that searches see the steady state."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"{'VACUUM ' if vacuum else ''}ANALYZE sessions_app_event")
        cursor.execute("ANALYZE sessions_app_session")


async def ours_postgres(cases: list[Case], user_pk: int) -> dict[tuple[str, int], list[float]]:
    from asgiref.sync import sync_to_async

    from sessions_app.backends import DjangoSessionService
    from sessions_app.core.recall import session_search
    from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary
    from sessions_app.recall_backends import DjangoRecallIndex

    service = DjangoSessionService()
    index = DjangoRecallIndex()
    scores: dict[tuple[str, int], list[float]] = defaultdict(list)
    for case in cases:
        turns = [(t.role, t.speaker, t.text) for t in case.turns]
        events = await sync_to_async(insert_session)(f"locomo-{case.name}", user_pk, turns, start=T0)
        keys = {e.id: t.key for e, t in zip(events, case.turns, strict=True)}
        last = events[-1]
        key = SessionKey(app=APP, user_id=str(user_pk), session_id=f"locomo-{case.name}")
        boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or 0)
        await service.put_summary(key, Summary(text="(summary)", boundary=boundary))
        await sync_to_async(analyze_tables)()
        session = Session(app=APP, user_id=str(user_pk), id=key.session_id)
        for question in case.questions:
            for k in KS:
                answer = await session_search(
                    index, session=session, query=question.text, scope="current_hidden", top_k=k
                )
                found = [keys[r["event_id"]] for r in answer["results"]]
                scores[(question.category, k)].append(recall(question.evidence, found))
    return scores


@dataclass
class Timing:
    size: int
    scope: str
    state: str
    p50: float
    p95: float
    searches_per_call: float
    results_per_call: float


async def time_searches(session: Any, questions: list[str], scope: str, size: int, state: str) -> Timing:
    from sessions_app.core.recall import session_search
    from sessions_app.recall_backends import DjangoRecallIndex

    index = DjangoRecallIndex()
    calls = 0
    original = index.search_many

    async def counted(request: Any, queries: Sequence[str]) -> Any:
        nonlocal calls
        calls += len(queries)
        return await original(request, queries)

    index.search_many = counted  # type: ignore[method-assign]  # count the queries each tool call searches
    for q in questions[:WARMUP_QUERIES]:
        await session_search(index, session=session, query=q, scope=scope)
    calls = 0
    latencies = []
    results = 0
    for q in questions:
        started = time.perf_counter()
        answer = await session_search(index, session=session, query=q, scope=scope)
        latencies.append((time.perf_counter() - started) * 1000)
        results += answer["count"]
    latencies.sort()
    return Timing(
        size=size,
        scope=scope,
        state=state,
        p50=statistics.median(latencies),
        p95=latencies[int(0.95 * (len(latencies) - 1))],
        searches_per_call=calls / len(questions),
        results_per_call=results / len(questions),
    )


def condensed_plan(plan: str) -> str:
    keep = ("Index Scan", "Bitmap", "Seq Scan", "Execution Time", "Planning Time", "Index Cond")
    lines = []
    for line in plan.splitlines():
        if any(k in line for k in keep):
            # The index expression is long; the index name says which one it is.
            line = re.sub(r"Index Cond: \(to_tsvector\(.*\) @@ ", "Index Cond: (<fts document> @@ ", line)
            lines.append(line.rstrip())
    return "\n".join(lines)


async def postgres_scale(
    locomo: list[Case], qmsum: list[Case], alice: int, bob: int, log: Callable[[str], None]
) -> tuple[list[Timing], str, dict[str, int]]:
    from asgiref.sync import sync_to_async

    from sessions_app import search
    from sessions_app.backends import DjangoSessionService
    from sessions_app.core.recall import EventSearchRequest, fallback_queries
    from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary

    rng = random.Random(7)
    pool = [(t.role, t.speaker, t.text) for case in (*locomo, *qmsum) for t in case.turns]
    questions = [q.text for case in locomo for q in case.questions][:TIMED_QUERIES]
    service = DjangoSessionService()
    timings: list[Timing] = []
    written = {"alice": 0, "bob": 0}
    plan = ""
    sessions_made = 0

    def fill(user_pk: int, user_name: str, target: int) -> None:
        nonlocal sessions_made
        while written[user_name] < target:
            # 500 events a session: 416 turns + 42 tool call/result pairs
            turns = [rng.choice(pool) for _ in range(416)]
            events = insert_session(
                f"{user_name}-{sessions_made}",
                user_pk,
                turns,
                start=T0 + timedelta(days=sessions_made),
                tool_every=10,
                rng=rng,
            )
            sessions_made += 1
            written[user_name] += len(events)

    for size in SCALE_SIZES:
        started = time.perf_counter()
        await sync_to_async(fill)(alice, "alice", size)
        await sync_to_async(fill)(bob, "bob", size // 5)
        await sync_to_async(analyze_tables)()
        log(
            f"  loaded {written['alice']:,} events for the user ({written['bob']:,} for another) in {time.perf_counter() - started:.0f} s"
        )
        # The current session: the user's first, its first 480 events behind a summary.
        key = SessionKey(app=APP, user_id=str(alice), session_id="alice-0")
        events = await service.list_events(key, after_seq=479, limit=1)
        boundary = SummaryBoundary(cutoff_at=events[0].created_at, last_event_id=events[0].id, last_seq=480)
        await service.put_summary(key, Summary(text="(summary)", boundary=boundary))
        session = Session(app=APP, user_id=str(alice), id="alice-0")
        runs: list[tuple[str, str]] = []
        if size == SCALE_SIZES[-1]:
            runs.append(("all_sessions", "right after the bulk load"))
        runs += [("vacuum", ""), ("all_sessions", "steady state"), ("current_hidden", "steady state")]
        for scope, state in runs:
            if scope == "vacuum":
                await sync_to_async(analyze_tables)(vacuum=True)
                continue
            timing = await time_searches(session, questions, scope, written["alice"], state)
            timings.append(timing)
            log(f"  {scope:>14} at {timing.size:,} ({state}): p50 {timing.p50:.1f} ms, p95 {timing.p95:.1f} ms")
        if size == SCALE_SIZES[-1]:
            request = EventSearchRequest(
                query=questions[0], app=APP, user_id=str(alice), exclude_session_ids=("alice-0",)
            )
            plan = await sync_to_async(search.explain_search)(request, fallback_queries(questions[0]))
    return timings, plan, written


def timing_table(timings: list[Timing]) -> str:
    lines = [
        "| user's events | indexes | scope | p50 ms | p95 ms | queries searched / call | results / call |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for t in timings:
        lines.append(
            f"| {t.size:,} | {t.state} | {t.scope} | {t.p50:.1f} | {t.p95:.1f} | {t.searches_per_call:.2f} "
            f"| {t.results_per_call:.2f} |"
        )
    return "\n".join(lines)
