"""bench/turns.py's child process (`turns.py --backend NAME`): one backend, its sessions, timed."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.turns_agent import (
    AGENT,
    APP,
    EVENTS_PER_TURN,
    USERNAME,
    _answer,
    _script,
    _user_message,
    inspect_host,
    lookup_ticket,
    search_logs,
)
from bench.turns_sql import SqlCounter

WARMUP_TURNS = 3
# Tools (asyncio.to_thread) and ORM calls (sync_to_async, thread_sensitive=False) share the
# loop's default executor. A fixed pool whose threads are started, and connected to the
# database, before the first measured turn keeps thread and connection start-up out of
# the early turns.
EXECUTOR_THREADS = 8
PROGRESS_EVERY = 50


@dataclass(kw_only=True)
class Backend:
    name: str
    database: str
    user_id: str
    session_service: Any
    run_store: Any
    counter: SqlCounter | None
    connect: Callable[[], None] | None


def _setup_memory() -> Backend:
    from runs.core.records import InMemoryRunStore
    from sessions_app.core.inmemory import InMemorySessionService

    return Backend(
        name="memory",
        database="in-memory",
        user_id="1",
        session_service=InMemorySessionService(),
        run_store=InMemoryRunStore(),
        counter=None,
        connect=None,
    )


def _setup_django(name: str) -> Backend:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService
    from sessions_app.core.cache import CachedSessionService

    call_command("migrate", verbosity=0, interactive=False)
    user = get_user_model().objects.create_user(username=USERNAME, password="not-used")
    if connection.vendor == "sqlite":
        database = f"SQLite {connection.Database.sqlite_version} (temp file, WAL)"
    else:
        major, minor = divmod(connection.pg_version, 10000)
        database = f"PostgreSQL {major}.{minor} ({connection.settings_dict['NAME']})"
    counter = SqlCounter()
    counter.install()

    def connect() -> None:
        connection.ensure_connection()

    return Backend(
        name=name,
        database=database,
        user_id=str(user.pk),
        session_service=CachedSessionService(DjangoSessionService()),  # as agentsite.composition
        run_store=DjangoRunStore(),
        counter=counter,
        connect=connect,
    )


async def _warm_executor(connect: Callable[[], None] | None) -> None:
    """Start every executor thread (and its database connection) before measuring."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="bench"))
    barrier = threading.Barrier(EXECUTOR_THREADS)

    def occupy() -> None:
        if connect is not None:
            connect()
        barrier.wait(timeout=60)

    await asyncio.gather(*(loop.run_in_executor(None, occupy) for _ in range(EXECUTOR_THREADS)))


GOVERNANCE_ENV = "AGENTSITE_BENCH_GOVERNANCE"


def _governed(agent: Any, backend: Backend) -> Any:
    """The production set-up of context governance (DESIGN 6 defaults, 8,192-token window):
    rolling summaries in the background, projection after the boundary, compaction."""
    from runs.core.context.governance import ContextGovernance, extractive_summarizer
    from runs.core.runner import Runner
    from sessions_app.core.summary import ContextThreshold, InProcessSummaryScheduler, SummaryEngine

    engine = SummaryEngine(
        summarizer=extractive_summarizer(), checker=ContextThreshold(window=8192), context_window=8192
    )
    agent.governance = ContextGovernance(summaries=engine, context_window=8192)
    return Runner(
        app=APP,
        agents=[agent],
        session_service=backend.session_service,
        run_store=backend.run_store,
        summary_scheduler=InProcessSummaryScheduler(engine, backend.session_service),
        load_after_summary=True,
    )


async def _drive(backend: Backend, turns: int, repeats: int) -> dict[str, Any]:
    from runs.core.agents.llm import LLMAgent
    from runs.core.llm.scripted import ScriptedModel
    from runs.core.runner import Runner
    from runs.core.tools.function import FunctionTool

    await _warm_executor(backend.connect)
    model = ScriptedModel(name="bench-scripted-model")
    agent = LLMAgent(
        name=AGENT,
        model=model,
        instruction="You are the on-call assistant. Use the tools, then answer in one sentence.",
        tools=[FunctionTool(search_logs), FunctionTool(lookup_ticket), FunctionTool(inspect_host)],
    )
    runner = Runner(app=APP, agents=[agent], session_service=backend.session_service, run_store=backend.run_store)
    if os.environ.get(GOVERNANCE_ENV, "on") == "on":
        runner = _governed(agent, backend)

    async def turn(session_id: str, number: int) -> float:
        model.requests.clear()
        model.extend(_script(number))
        started = time.perf_counter()
        handle = await runner.start(user_id=backend.user_id, session_id=session_id, message=_user_message(number))
        record = await handle.wait()
        elapsed_ms = (time.perf_counter() - started) * 1000
        model.assert_consumed()
        if record.status != "completed" or record.tool_calls != 3 or record.answer != _answer(number):
            raise RuntimeError(f"turn {number} did not complete as scripted: {record!r}")
        return elapsed_ms

    # A throwaway session warms code paths and caches. Each measured session starts empty
    # and exists before its turn 1, so every measured turn takes the same path (get, not
    # create). Several sessions, one after the other, spread the samples of each window
    # over the run, so a passing disturbance on the machine does not decide a verdict.
    warmup = await backend.session_service.create_session(app=APP, user_id=backend.user_id, agent=AGENT)
    for number in range(1, WARMUP_TURNS + 1):
        await turn(warmup.id, number)

    measured: dict[str, list[list[Any]]] = {
        "latency_ms": [],
        "queries": [],
        "rows": [],
        "request_messages": [],
        "statements": [],
    }
    began = time.perf_counter()
    for repeat in range(1, repeats + 1):
        session = await backend.session_service.create_session(app=APP, user_id=backend.user_id, agent=AGENT)
        series: dict[str, list[Any]] = {name: [] for name in measured}
        for number in range(1, turns + 1):
            if backend.counter is not None:
                backend.counter.take()
            series["latency_ms"].append(round(await turn(session.id, number), 3))
            queries, rows, statements = backend.counter.take() if backend.counter is not None else (0, 0, {})
            series["queries"].append(queries)
            series["rows"].append(rows)
            series["statements"].append(statements)
            series["request_messages"].append(len(model.requests[-1].messages))
            if number % PROGRESS_EVERY == 0 or number == turns:
                recent = sorted(series["latency_ms"][-PROGRESS_EVERY:])
                print(
                    f"  [{backend.name}] session {repeat}/{repeats}, turn {number}/{turns}: "
                    f"{time.perf_counter() - began:.1f}s, p50 of the last {len(recent)} turns "
                    f"{recent[len(recent) // 2]:.1f} ms, last turn {queries} queries and {rows} rows",
                    file=sys.stderr,
                    flush=True,
                )
        stored = await backend.session_service.get_session(session.key, event_limit=0)
        ledger = stored.last_seq if stored is not None else -1
        if ledger != turns * EVENTS_PER_TURN:
            raise RuntimeError(f"the ledger holds {ledger} events, expected {turns * EVENTS_PER_TURN}")
        for name, values in series.items():
            measured[name].append(values)
    return {
        "backend": backend.name,
        "database": backend.database,
        "turns": turns,
        "repeats": repeats,
        "elapsed_s": round(time.perf_counter() - began, 2),
        **measured,
    }


def child_main(name: str, turns: int, repeats: int) -> int:
    backend = _setup_memory() if name == "memory" else _setup_django(name)
    result = asyncio.run(_drive(backend, turns, repeats))
    print(json.dumps(result), flush=True)
    return 0
