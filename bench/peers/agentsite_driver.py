"""Agentsite under the peers workload: DjangoSessionService + DjangoRunStore, governance off or on.

Runs in the project's virtualenv, as a child of run.py: `agentsite_driver.py CONFIG WORKDIR`
with CONFIG one of CONFIGS. The database comes from DATABASE_URL (run.py sets a fresh SQLite
file in WORKDIR, or the bench_peers PostgreSQL database it recreated). The runner is composed
as bench/turns.py composes it (its executor warm-up and its production governance set-up are
imported from there); the model is our ScriptedModel, recording the size of each request.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    # Run as `python bench/peers/agentsite_driver.py`: the project packages live two levels up.
    sys.path.insert(0, str(ROOT))

from bench import turns  # noqa: E402  (needs ROOT on sys.path)
from bench.peers import workload  # noqa: E402

CONFIGS = ("sqlite-off", "sqlite-on", "postgres-off", "postgres-on")
EVENTS_PER_TURN = 1 + 2 * workload.LOOKUPS_PER_TURN + 2  # user, 3 x (call, result), answer, completion


@dataclass(kw_only=True)
class DjangoCounter:
    """Statements, rows fetched and rows changed through Django's cursors (PostgreSQL).

    Patched on `CursorWrapper` at class level, as bench/turns_sql.py does, so every connection
    of every thread is counted; no per-statement labels, to keep the counting cheap.
    """

    statements: int = 0
    read: int = 0
    written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> tuple[int, int, int]:
        with self._lock:
            taken = (self.statements, self.read, self.written)
            self.statements = self.read = self.written = 0
        return taken

    def _add(self, *, statements: int = 0, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.statements += statements
            self.read += read
            self.written += written

    def install(self) -> None:
        from django.db.backends.utils import CursorWrapper

        counter = self
        execute, executemany = CursorWrapper.execute, CursorWrapper.executemany

        def written(cursor: Any, sql: str) -> int:
            # A step write on PostgreSQL is one statement with data-modifying CTEs (WITH ...
            # INSERT): its rowcount is the ledger rows it inserted, not the CTEs' rows (the
            # run's row inserted with its user message, its record updated with its last
            # step), so rows written on PostgreSQL leave out those two per turn.
            verb = sql.lstrip()[:7].upper()
            writes = verb.startswith(("INSERT", "UPDATE", "DELETE")) or (
                verb.startswith("WITH") and " INSERT INTO " in sql
            )
            return max(cursor.cursor.rowcount, 0) if writes else 0

        def counted_execute(cursor: Any, sql: str, params: Any = None) -> Any:
            out = execute(cursor, sql, params)
            counter._add(statements=1, written=written(cursor, str(sql)))
            return out

        def counted_executemany(cursor: Any, sql: str, param_list: Any) -> Any:
            out = executemany(cursor, sql, param_list)
            counter._add(statements=1, written=written(cursor, str(sql)))
            return out

        def fetchone(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                row = cursor.cursor.fetchone()
            counter._add(read=0 if row is None else 1)
            return row

        def fetchmany(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            with cursor.db.wrap_database_errors:
                rows = cursor.cursor.fetchmany(*args, **kwargs)
            counter._add(read=len(rows))
            return rows

        def fetchall(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                rows = cursor.cursor.fetchall()
            counter._add(read=len(rows))
            return rows

        def iterate(cursor: Any) -> Any:
            with cursor.db.wrap_database_errors:
                for row in cursor.cursor:
                    counter._add(read=1)
                    yield row

        for name, method in {
            "execute": counted_execute,
            "executemany": counted_executemany,
            "fetchone": fetchone,
            "fetchmany": fetchmany,
            "fetchall": fetchall,
            "__iter__": iterate,
        }.items():
            setattr(CursorWrapper, name, method)


def request_size(request: Any) -> int:
    """Characters of a ModelRequest: message texts, tool-call names and arguments."""
    return sum(len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls) for m in request.messages)


class AgentsiteDriver:
    def __init__(self, config: str, workdir: str) -> None:
        self.config = config
        self.storage, governance = config.split("-")
        self.governance = governance == "on"
        self.workdir = workdir
        self.recorder = workload.Recorder()
        self.counter: workload.Counter | None = None
        self.model: Any = None
        self.runner: Any = None
        self.backend: Any = None
        self.user_id = ""
        self.database = ""

    def prepare(self) -> None:
        """Django set-up, migrations and the user row: synchronous, before the event loop."""
        # Counting must be in place before Django opens its first connection.
        if self.storage == "sqlite":
            sqlite_counter = workload.SqliteCounter()
            sqlite_counter.install()
            self.counter = sqlite_counter
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connection

        if self.storage == "postgres":
            django_counter = DjangoCounter()
            django_counter.install()
            self.counter = django_counter
        call_command("migrate", verbosity=0, interactive=False)
        # Both PostgreSQL configurations share one database: one user each.
        user = get_user_model().objects.create_user(username=f"{turns.USERNAME}-{self.config}", password="not-used")
        self.user_id = str(user.pk)
        if connection.vendor == "sqlite":
            self.database = f"SQLite {connection.Database.sqlite_version} (file, WAL)"
        else:
            major, minor = divmod(connection.pg_version, 10000)
            self.database = f"PostgreSQL {major}.{minor}"

    async def setup(self) -> dict[str, Any]:
        from django.db import connection

        from runs.backends import DjangoRunStore
        from runs.core.agents.llm import LLMAgent
        from runs.core.llm.scripted import ScriptedModel
        from runs.core.runner import Runner
        from runs.core.tools.function import FunctionTool
        from sessions_app.backends import DjangoSessionService
        from sessions_app.core.cache import CachedSessionService

        database = self.database
        recorder = self.recorder

        @dataclass(kw_only=True)
        class RecordingModel(ScriptedModel):
            """Our ScriptedModel, recording each request's size as the peers' fakes do."""

            async def generate(self, request: Any) -> AsyncIterator[Any]:
                recorder.record(request_size(request))
                async for response in super().generate(request):
                    yield response

        self.model = RecordingModel(name="bench-scripted-model")
        agent = LLMAgent(
            name=turns.AGENT,
            model=self.model,
            instruction=workload.INSTRUCTION,
            tools=[FunctionTool(workload.lookup)],
        )
        self.backend = turns.Backend(
            name=self.storage,
            database=database,
            user_id=self.user_id,
            session_service=CachedSessionService(DjangoSessionService()),  # as agentsite.composition
            run_store=DjangoRunStore(),
            counter=None,
            connect=connection.ensure_connection,
        )
        await turns._warm_executor(self.backend.connect)
        if self.governance:
            self.runner = turns._governed(agent, self.backend)
        else:
            self.runner = Runner(
                app=turns.APP,
                agents=[agent],
                session_service=self.backend.session_service,
                run_store=self.backend.run_store,
            )
        return {
            "runtime": "Agentsite",
            "storage": f"{database}, governance {'on' if self.governance else 'off'}",
            "version": "this checkout",
            "durable": True,
        }

    async def new_session(self, label: str) -> Any:
        return await self.backend.session_service.create_session(
            app=turns.APP, user_id=self.backend.user_id, agent=turns.AGENT
        )

    async def turn(self, session: Any, number: int) -> None:
        from runs.core.llm.scripted import ScriptStep

        steps = []
        for index in range(workload.MODEL_CALLS_PER_TURN):
            kind, value = workload.step_for(index, number)
            steps.append(
                ScriptStep.call(workload.TOOL_NAME, {"q": value})
                if kind == "call"
                # One chunk: the peers' fakes do not stream either.
                else ScriptStep.answer(value, chunk_size=len(value))
            )
        self.model.requests.clear()  # the scripted model keeps every request; we keep sizes only
        self.model.extend(steps)
        handle = await self.runner.start(
            user_id=self.backend.user_id, session_id=session.id, message=workload.user_message(number)
        )
        record = await handle.wait()
        self.model.assert_consumed()
        expected = workload.answer(number)
        if record.status != "completed" or record.tool_calls != workload.LOOKUPS_PER_TURN or record.answer != expected:
            raise RuntimeError(f"turn {number} did not complete as scripted: {record!r}")

    async def finish(self, session: Any, turns_played: int) -> dict[str, Any]:
        stored = await self.backend.session_service.get_session(session.key, event_limit=0)
        ledger = stored.last_seq if stored is not None else -1
        if ledger != turns_played * EVENTS_PER_TURN:
            raise RuntimeError(f"the ledger holds {ledger} events, expected {turns_played * EVENTS_PER_TURN}")
        await self.runner.close()
        return {"stored_events": ledger}


def build(config: str, workdir: str) -> AgentsiteDriver:
    driver = AgentsiteDriver(config, workdir)
    driver.prepare()  # Django refuses synchronous ORM work inside a running event loop
    return driver


if __name__ == "__main__":
    sys.exit(workload.main(build, CONFIGS))
