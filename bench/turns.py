"""Turn benchmark: does the cost of one turn grow with the length of the session?

A session of N turns (default 200), played --repeats times (default 3) one session after
the other. Each turn is one `Runner.start` + `handle.wait()`: the user sends a message, the
scripted model asks for three tool calls in one response (`search_logs`, `lookup_ticket`,
`inspect_host`), then answers with text: seven ledger events per turn. The same sessions
run on three backends in one invocation:

- `memory`: InMemorySessionService + InMemoryRunStore, the peer baseline;
- `sqlite`: DjangoSessionService + DjangoRunStore on a fresh temporary SQLite file;
- `postgres`: the same on `agentsite_bench` (dropped and recreated at every run; skipped
  with a message when PostgreSQL does not answer).

Django settings are per process, so each backend runs in a child process of this script
(`turns.py --backend NAME`) that prints its raw measurements as one JSON line; the parent
compares turns 1-10 with the last ten turns (the samples of every session pooled), prints
a table and a verdict per backend and writes `bench/results/turns.json`. See
bench/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/turns.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

BACKENDS = ("memory", "sqlite", "postgres")
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/agentsite_bench"
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "turns.json"
TARGET = "the cost of a turn does not grow with the session: late/early ratio at most 1.3"
TARGET_RATIO = 1.3
WINDOW = 10
APP = "bench"
AGENT = "oncall"
USERNAME = "bench-alice"
WARMUP_TURNS = 3
DEFAULT_REPEATS = 3
# Tools (asyncio.to_thread) and ORM calls (sync_to_async, thread_sensitive=False) share the
# loop's default executor. A fixed pool whose threads are started, and connected to the
# database, before the first measured turn keeps thread and connection start-up out of
# the early turns.
EXECUTOR_THREADS = 8
PROGRESS_EVERY = 50
CHILD_TIMEOUT_S = 900
EVENTS_PER_TURN = 7  # user, assistant tool calls, 3 tool results, assistant answer, completion


# -- the agent: three small tools and a scripted model ------------------------------------


def search_logs(query: str, hours: int = 24) -> dict[str, Any]:
    """Search the service logs.

    Args:
        query: words to look for.
        hours: how far back to search.
    """
    return {
        "query": query,
        "hours": hours,
        "matches": 3,
        "first": "2024-05-01T10:02:11Z ERROR upstream timeout after 30s (pool exhausted)",
    }


def lookup_ticket(ticket_id: str) -> dict[str, Any]:
    """Look up a support ticket by its id.

    Args:
        ticket_id: the ticket id, e.g. T-1042.
    """
    return {"id": ticket_id, "status": "open", "priority": "P2", "owner": "bob", "title": "checkout latency"}


def inspect_host(host: str) -> dict[str, Any]:
    """Show the health of one host.

    Args:
        host: the host name.
    """
    return {"host": host, "cpu": 0.41, "memory": 0.63, "disk": 0.72, "status": "healthy", "uptime_days": 12}


def _user_message(turn: int) -> str:
    return f"Turn {turn}: checkout is slow again. Check the logs, ticket T-{1000 + turn} and host web-{turn % 7}."


def _script(turn: int) -> list[Any]:
    """The model's two responses for one turn: three tool calls, then the answer."""
    from runs.core.llm.scripted import ScriptStep

    return [
        ScriptStep.calls(
            ("search_logs", {"query": f"checkout timeout turn {turn}", "hours": 6}),
            ("lookup_ticket", {"ticket_id": f"T-{1000 + turn}"}),
            ("inspect_host", {"host": f"web-{turn % 7}"}),
        ),
        ScriptStep.answer(_answer(turn)),
    ]


def _answer(turn: int) -> str:
    return f"Turn {turn}: 3 upstream timeouts in the logs, T-{1000 + turn} is open (P2), web-{turn % 7} is healthy."


# -- counting SQL on every connection, from every thread ---------------------------------

_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)
_WHERE_COLUMN = re.compile(r'"(\w+)"\s*(?:=|IN\b|>|<|IS\b)', re.IGNORECASE)
_LIMIT = re.compile(r"\bLIMIT\s+(\d+)", re.IGNORECASE)


def statement_label(sql: str) -> str:
    """A short, stable name for a statement: verb, table, filtered columns, limit."""
    words = sql.split()
    if not words:
        return "?"
    verb = words[0].upper()
    table = _TABLE.search(sql)
    if verb not in {"SELECT", "INSERT", "UPDATE", "DELETE"} or table is None:
        return " ".join(words[:2]).upper()
    label = f"{verb} {table.group(1)}"
    upper = sql.upper()
    if verb in {"SELECT", "UPDATE", "DELETE"} and " WHERE " in upper:
        where = sql[upper.index(" WHERE ") :]
        columns = sorted(dict.fromkeys(_WHERE_COLUMN.findall(where)))
        if columns:
            label += f" WHERE {','.join(columns)}"
    limit = _LIMIT.search(sql)
    if limit:
        label += f" LIMIT {limit.group(1)}"
    if "FOR UPDATE" in upper:
        label += " FOR UPDATE"
    return label


@dataclass(kw_only=True)
class SqlCounter:
    """Statements executed and rows returned to Python, on every Django connection.

    `CursorWrapper` forwards `fetch*` to the driver's cursor through `__getattr__`; methods
    defined on the class win over that, so patching the class counts every cursor of every
    connection in every thread, including connections opened later.
    """

    queries: int = 0
    rows: int = 0
    statements: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> tuple[int, int, dict[str, list[int]]]:
        """The counts since the last call, and start again from zero."""
        with self._lock:
            taken = (self.queries, self.rows, self.statements)
            self.queries, self.rows, self.statements = 0, 0, {}
        return taken

    def _query(self, cursor: Any, sql: str) -> None:
        label = statement_label(str(sql))
        cursor._bench_label = label
        with self._lock:
            self.queries += 1
            self.statements.setdefault(label, [0, 0])[0] += 1

    def _rows(self, cursor: Any, count: int) -> None:
        if count <= 0:
            return
        label = getattr(cursor, "_bench_label", "?")
        with self._lock:
            self.rows += count
            self.statements.setdefault(label, [0, 0])[1] += count

    def install(self) -> None:
        from django.db.backends.utils import CursorWrapper

        counter = self
        execute, executemany = CursorWrapper.execute, CursorWrapper.executemany

        def counted_execute(cursor: Any, sql: str, params: Any = None) -> Any:
            counter._query(cursor, sql)
            return execute(cursor, sql, params)

        def counted_executemany(cursor: Any, sql: str, param_list: Any) -> Any:
            counter._query(cursor, sql)
            return executemany(cursor, sql, param_list)

        def fetchone(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                row = cursor.cursor.fetchone()
            counter._rows(cursor, 0 if row is None else 1)
            return row

        def fetchmany(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            with cursor.db.wrap_database_errors:
                rows = cursor.cursor.fetchmany(*args, **kwargs)
            counter._rows(cursor, len(rows))
            return rows

        def fetchall(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                rows = cursor.cursor.fetchall()
            counter._rows(cursor, len(rows))
            return rows

        def iterate(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                for row in cursor.cursor:
                    counter._rows(cursor, 1)
                    yield row

        patches: dict[str, Callable[..., Any]] = {
            "execute": counted_execute,
            "executemany": counted_executemany,
            "fetchone": fetchone,
            "fetchmany": fetchmany,
            "fetchall": fetchall,
            "__iter__": iterate,
        }
        for name, method in patches.items():
            setattr(CursorWrapper, name, method)


# -- the child: one backend, its sessions ----------------------------------------------------


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


# -- the parent: prepare databases, spawn children, compare --------------------------------


def _prepare_postgres(url: str) -> str | None:
    """Drop and recreate the bench database; the reason it cannot be used, or None."""
    import psycopg

    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        return f"{url!r} names no database"
    maintenance = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    where = f"PostgreSQL at {parts.hostname or 'localhost'}:{parts.port or 5432}"
    try:
        conn = psycopg.connect(maintenance, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        return f"{where} did not answer ({_first_line(exc)})"
    quoted = '"' + database.replace('"', '""') + '"'
    try:
        with conn:
            conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {quoted}")
    except psycopg.Error as exc:
        return f"{where} answered but {database!r} could not be recreated ({_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _child_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "DJANGO_DEBUG": "0",  # DEBUG would keep every query in memory and slow each one
            "DJANGO_SECRET_KEY": env.get("DJANGO_SECRET_KEY") or "bench-only-not-a-secret",
            "AGENTSITE_LOG_LEVEL": "WARNING",
        }
    )
    return env


def _spawn(name: str, turns: int, repeats: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one backend in a child process; its last stdout line is the JSON result."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--backend",
        name,
        "--turns",
        str(turns),
        "--repeats",
        str(repeats),
    ]
    try:
        done = subprocess.run(
            command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"the child did not finish within {CHILD_TIMEOUT_S}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"status": "failed", "reason": f"the child exited with status {done.returncode} (its stderr is above)"}
    return {"status": "ok", **json.loads(lines[-1])}


def run_backend(name: str, turns: int, repeats: int, postgres_url: str) -> dict[str, Any]:
    print(f"{name}: {repeats} session(s) of {turns} turns ...", file=sys.stderr, flush=True)
    if name == "memory":
        return _spawn(name, turns, repeats, _child_env(""))
    if name == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as folder:
            url = "sqlite:///" + str(Path(folder) / "bench.sqlite3")  # absolute path: sqlite:////...
            return _spawn(name, turns, repeats, _child_env(url))
    reason = _prepare_postgres(postgres_url)
    if reason is not None:
        return {"status": "skipped", "reason": reason}
    return _spawn(name, turns, repeats, _child_env(postgres_url))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(late: float, early: float) -> float | None:
    return late / early if early > 0 else None


def _pooled(series: list[list[Any]], start: int, stop: int) -> list[Any]:
    """The samples of turns start+1..stop of every session."""
    return [value for session in series for value in session[start:stop]]


def _window(result: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    latency = _pooled(result["latency_ms"], start, stop)
    statements: dict[str, list[float]] = {}
    turns = _pooled(result["statements"], start, stop)
    for per_turn in turns:
        for label, (count, rows) in per_turn.items():
            total = statements.setdefault(label, [0.0, 0.0])
            total[0] += count / len(turns)
            total[1] += rows / len(turns)
    return {
        "turns": [start + 1, stop],
        "samples": len(latency),
        "p50_ms": round(percentile(latency, 0.50), 3),
        "p95_ms": round(percentile(latency, 0.95), 3),
        "queries_per_turn": round(_mean(_pooled(result["queries"], start, stop)), 2),
        "rows_per_turn": round(_mean(_pooled(result["rows"], start, stop)), 2),
        "request_messages": round(_mean(_pooled(result["request_messages"], start, stop)), 1),
        "statements": {k: {"queries": round(v[0], 2), "rows": round(v[1], 2)} for k, v in sorted(statements.items())},
    }


def _growth(early: dict[str, Any], late: dict[str, Any]) -> list[dict[str, Any]]:
    """Statements whose count or rows per turn changed between the two windows."""
    changed = []
    for label in sorted(set(early["statements"]) | set(late["statements"])):
        before = early["statements"].get(label, {"queries": 0.0, "rows": 0.0})
        after = late["statements"].get(label, {"queries": 0.0, "rows": 0.0})
        delta_rows = after["rows"] - before["rows"]
        delta_queries = after["queries"] - before["queries"]
        if abs(delta_rows) >= 0.5 or abs(delta_queries) >= 0.5:
            changed.append({"statement": label, "early": before, "late": after, "rows_delta": round(delta_rows, 2)})
    return sorted(changed, key=lambda c: -abs(c["rows_delta"]))


def summarize(name: str, result: dict[str, Any]) -> dict[str, Any]:
    turns = result["turns"]
    size = min(WINDOW, turns // 2)
    early = _window(result, 0, size)
    late = _window(result, turns - size, turns)
    ratios = {
        "p50": _ratio(late["p50_ms"], early["p50_ms"]),
        "queries": _ratio(late["queries_per_turn"], early["queries_per_turn"]),
        "rows": _ratio(late["rows_per_turn"], early["rows_per_turn"]),
    }
    measured = [r for r in ratios.values() if r is not None]
    return {
        "status": "ok",
        "database": result["database"],
        "turns": turns,
        "elapsed_s": result["elapsed_s"],
        "early": early,
        "late": late,
        "ratios": {k: round(v, 3) if v is not None else None for k, v in ratios.items()},
        "growth": _growth(early, late),
        "verdict": "MEETS" if all(r <= TARGET_RATIO for r in measured) else "MISSES",
        "repeats": result["repeats"],
        # Per turn number, across sessions: median latency, mean queries, rows, messages.
        "per_turn": {
            "latency_ms": [round(percentile(v, 0.5), 3) for v in zip(*result["latency_ms"], strict=True)],
            **{
                k: [round(_mean(v), 2) for v in zip(*result[k], strict=True)]
                for k in ("queries", "rows", "request_messages")
            },
        },
    }


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"x{value:.2f}"


def report(summaries: dict[str, dict[str, Any]], turns: int, repeats: int) -> list[str]:
    size = min(WINDOW, turns // 2)
    early_turns, late_turns = f"{1}-{size}", f"{turns - size + 1}-{turns}"
    sessions = "one session" if repeats == 1 else f"{repeats} sessions (one after the other)"
    lines = [
        f"Turn benchmark: {sessions} of {turns} turns per backend; a turn = user message -> 3 tool calls",
        f"in one model response -> text answer ({EVENTS_PER_TURN} ledger events), timed as Runner.start + handle.wait.",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; early = turns {early_turns}, late = turns "
        f"{late_turns}, {size * repeats} samples per window; queries and rows are means per turn.",
        "",
        f"{'backend':<9} {'turns':<9} {'p50 ms':>8} {'p95 ms':>8} {'queries/turn':>13} {'rows/turn':>10} "
        f"{'msgs/request':>13}",
    ]
    for name, s in summaries.items():
        if s["status"] != "ok":
            lines.append(f"{name:<9} {s['status'].upper()}: {s['reason']}")
            continue
        lines.append(f"{name:<9} {s['database']}")
        for label, w in ((early_turns, s["early"]), (late_turns, s["late"])):
            lines.append(
                f"{'':<9} {label:<9} {w['p50_ms']:>8.2f} {w['p95_ms']:>8.2f} {w['queries_per_turn']:>13.1f} "
                f"{w['rows_per_turn']:>10.1f} {w['request_messages']:>13.1f}"
            )
        r = s["ratios"]
        lines.append(
            f"{'':<9} {'late/early':<10}{_fmt_ratio(r['p50']):>7} {'':>8} {_fmt_ratio(r['queries']):>13} "
            f"{_fmt_ratio(r['rows']):>10} {_fmt_ratio(_ratio(s['late']['request_messages'], s['early']['request_messages'])):>13}"
        )
    peer = summaries.get("memory")
    if peer is not None and peer["status"] == "ok":
        against = [
            f"{name} x{s['early']['p50_ms'] / peer['early']['p50_ms']:.1f}"
            for name, s in summaries.items()
            if name != "memory" and s["status"] == "ok"
        ]
        if against:
            lines += ["", "Early p50 against the in-memory peer: " + ", ".join(against)]
    growth = [(name, g) for name, s in summaries.items() if s["status"] == "ok" for g in s["growth"][:3]]
    if growth:
        lines += ["", "What grows (per turn, early -> late, by statement):"]
        for name, g in growth:
            lines.append(
                f"  {name:<9} {g['statement']}: queries {g['early']['queries']:.1f} -> {g['late']['queries']:.1f}, "
                f"rows {g['early']['rows']:.1f} -> {g['late']['rows']:.1f}"
            )
    lines += ["", f"Verdict (target: {TARGET}):"]
    for name, s in summaries.items():
        if s["status"] != "ok":
            lines.append(f"  {name:<9} {s['status'].upper()}: {s['reason']}")
            continue
        e, la, r = s["early"], s["late"], s["ratios"]
        lines.append(
            f"  {name:<9} {s['verdict']}: p50 {_fmt_ratio(r['p50'])} ({e['p50_ms']:.2f} -> {la['p50_ms']:.2f} ms), "
            f"queries {_fmt_ratio(r['queries'])} ({e['queries_per_turn']:.1f} -> {la['queries_per_turn']:.1f}), "
            f"rows {_fmt_ratio(r['rows'])} ({e['rows_per_turn']:.1f} -> {la['rows_per_turn']:.1f})"
        )
    return lines


def parent_main(turns: int, repeats: int, backends: list[str], postgres_url: str, output: Path) -> int:
    started = time.perf_counter()
    summaries: dict[str, dict[str, Any]] = {}
    for name in backends:
        result = run_backend(name, turns, repeats, postgres_url)
        summaries[name] = summarize(name, result) if result["status"] == "ok" else result
    peer = summaries.get("memory")
    for name, s in summaries.items():
        if name != "memory" and s["status"] == "ok" and peer is not None and peer["status"] == "ok":
            s["early_p50_vs_memory"] = round(s["early"]["p50_ms"] / peer["early"]["p50_ms"], 3)
    print()
    for line in report(summaries, turns, repeats):
        print(line)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "turns",
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "turns": turns,
                "repeats": repeats,
                "window": min(WINDOW, turns // 2),
                "target": {"text": TARGET, "max_late_early_ratio": TARGET_RATIO},
                "elapsed_s": round(time.perf_counter() - started, 1),
                "backends": summaries,
            },
            indent=2,
        )
        + "\n"
    )
    shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
    print(f"\nResults written to {shown} ({time.perf_counter() - started:.0f}s in all)")
    return 1 if any(s["status"] == "failed" for s in summaries.values()) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200, help="turns in the measured session (default 200)")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help=f"comma-separated, from {','.join(BACKENDS)} (default: all)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"sessions per backend, one after the other; windows pool their turns (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL, help="dropped and recreated at every run")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON results go")
    parser.add_argument(
        "--governance",
        choices=("on", "off"),
        default=os.environ.get(GOVERNANCE_ENV, "on"),
        help="context governance as deployed (on, default) or the raw ledger window (off)",
    )
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args(argv)
    os.environ[GOVERNANCE_ENV] = args.governance  # children inherit it
    if args.turns < 2:
        parser.error(f"--turns must be at least 2, got {args.turns!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats!r}")
    if args.backend:
        return child_main(args.backend, args.turns, args.repeats)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        parser.error(f"--backends takes names from {list(BACKENDS)!r}, got {args.backends!r}")
    return parent_main(args.turns, args.repeats, backends, args.postgres_url, args.output.resolve())


if __name__ == "__main__":
    sys.exit(main())
