"""The workload every runtime plays, the request sizing, SQLite counting and the driver protocol.

Standard library only: this module is imported by the Agentsite driver (project venv) and by
the peers' drivers (bench/.venv-peers), so both sides build the same messages, the same tool
results and measure request sizes the same way.

A turn: the user sends `user_message(n)`; the model calls `lookup(q)` three times, one call
per model response (sequential: each call is decided after the previous result); then it
answers `answer(n)`. Four model calls per turn; each `lookup` result is about 200 characters.

The driver protocol (one child process per runtime configuration, driven by run.py):
the child sets up, plays WARMUP_TURNS turns on a throwaway session, creates the measured
session and prints `{"ready": ...}`. Then it reads commands on stdin, one JSON object a line:
`{"play": K}` plays the next K turns of the measured session, printing one JSON line per
turn and `{"chunk_done": n}`; `{"stop": true}` checks the session and prints `{"done": ...}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

INSTRUCTION = "You are the on-call assistant. Look things up with the lookup tool, then answer in one sentence."
TOOL_NAME = "lookup"
TOOL_DESCRIPTION = "Look up what is known about a query."
LOOKUPS_PER_TURN = 3
MODEL_CALLS_PER_TURN = LOOKUPS_PER_TURN + 1
WARMUP_TURNS = 3
RESULT_CHARS = 200


def user_message(turn: int) -> str:
    return f"Turn {turn}: checkout is slow again. Look up the logs, ticket T-{1000 + turn} and host web-{turn % 7}."


def query(turn: int, index: int) -> str:
    """The q of the index-th (0-based) lookup of a turn."""
    return ("logs checkout timeout", f"ticket T-{1000 + turn}", f"host web-{turn % 7}")[index] + f" turn {turn}"


def lookup_result(q: str) -> str:
    """About RESULT_CHARS characters, deterministic, different for every q."""
    head = f"Result for {q!r}: 3 upstream timeouts after 30s, pool exhausted at 10:02Z, owner bob, P2, open. "
    filler = "Related: checkout-api p95 1.8s, retries 4, circuit half-open, last deploy 2024-05-01 09:40Z. "
    return (head + filler * 3)[:RESULT_CHARS]


def answer(turn: int) -> str:
    return f"Turn {turn}: 3 upstream timeouts in the logs, T-{1000 + turn} is open (P2), web-{turn % 7} is healthy."


def lookup(q: str) -> str:
    """Look up what is known about a query.

    Args:
        q: what to look up.
    """
    return lookup_result(q)


def step_for(call_index: int, turn: int) -> tuple[str, str]:
    """What the fake model does on the call_index-th (0-based) call of a turn:
    ("call", q) for a lookup, ("answer", text) for the last call."""
    if call_index < LOOKUPS_PER_TURN:
        return "call", query(turn, call_index)
    return "answer", answer(turn)


def text_size(value: Any) -> int:
    """Characters of text in a request: the sum of the lengths of every string leaf.

    Every runtime's fake model applies this to the same parts of its request (system
    instruction, message texts, tool-call names and arguments, tool results), so the
    numbers compare content, not each SDK's envelope (ids, roles, type tags are skipped).
    """
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_size(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(text_size(v) for v in value)
    return 0


@dataclass(kw_only=True)
class Recorder:
    """Sizes of the requests the fake model received during the current turn."""

    sizes: list[int] = field(default_factory=list)
    turn: int = 0

    def record(self, size: int) -> int:
        """Remember one request's size; returns the 0-based index of the call in the turn."""
        self.sizes.append(size)
        return len(self.sizes) - 1


class Counter(Protocol):
    def take(self) -> tuple[int, int, int]:
        """(statements, rows read, rows written) since the last call, then start from zero."""
        ...


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@dataclass(kw_only=True)
class SqliteCounter:
    """Statements, rows returned to Python and rows changed, on every sqlite3 connection.

    `sqlite3.connect` is replaced by one that builds a Connection subclass whose cursors
    count. Django (`sqlite3.dbapi2.connect`), aiosqlite (ADK's DatabaseSessionService via
    SQLAlchemy), LangGraph's SqliteSaver and the OpenAI SDK's SQLiteSession all open their
    connections through it, so every SQLite runtime is counted by the same code: rows read
    are rows fetched by the caller (fetchone/fetchmany/fetchall/iteration), rows written are
    the `rowcount` of INSERT/UPDATE/DELETE/REPLACE statements. Python's implicit BEGIN and
    COMMIT are not statements sent by the caller and are not counted.
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

    def _executed(self, sql: str, rowcount: int) -> None:
        wrote = rowcount if rowcount > 0 and sql.lstrip()[:7].upper().startswith(_WRITES) else 0
        with self._lock:
            self.statements += 1
            self.written += wrote

    def _fetched(self, count: int) -> None:
        if count > 0:
            with self._lock:
                self.read += count

    def install(self) -> None:
        import sqlite3
        import sqlite3.dbapi2

        counter = self
        classes: dict[type, type] = {}

        def counting(factory: type) -> type:
            # One subclass per cursor class asked for: Django passes its own
            # SQLiteCursorWrapper, which must stay in the chain.
            known = classes.get(factory)
            if known is not None:
                return known

            class CountingCursor(factory):
                def execute(self, sql: str, *args: Any) -> Any:
                    out = super().execute(sql, *args)
                    counter._executed(sql, self.rowcount)
                    return out

                def executemany(self, sql: str, *args: Any) -> Any:
                    out = super().executemany(sql, *args)
                    counter._executed(sql, self.rowcount)
                    return out

                def fetchone(self) -> Any:
                    row = super().fetchone()
                    counter._fetched(0 if row is None else 1)
                    return row

                def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
                    rows = super().fetchmany(*args, **kwargs)
                    counter._fetched(len(rows))
                    return rows

                def fetchall(self) -> Any:
                    rows = super().fetchall()
                    counter._fetched(len(rows))
                    return rows

                def __next__(self) -> Any:
                    row = super().__next__()
                    counter._fetched(1)
                    return row

            classes[factory] = CountingCursor
            return CountingCursor

        class CountingConnection(sqlite3.Connection):
            # Connection.execute builds its cursor in C, past an overridden cursor(): route it.
            def cursor(self, factory: type = sqlite3.Cursor) -> Any:
                return super().cursor(counting(factory))

            def execute(self, sql: str, parameters: Any = (), /) -> Any:
                return self.cursor().execute(sql, parameters)

            def executemany(self, sql: str, parameters: Any, /) -> Any:
                return self.cursor().executemany(sql, parameters)

            def executescript(self, script: str, /) -> Any:
                counter._executed(script, 0)
                return super().executescript(script)

        original = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> Any:
            if "factory" not in kwargs and len(args) < 6:  # factory is the 6th positional parameter
                kwargs["factory"] = CountingConnection
            return original(*args, **kwargs)

        sqlite3.connect = connect
        sqlite3.dbapi2.connect = connect


class Driver(Protocol):
    """One runtime configuration, as a child process of run.py plays it."""

    recorder: Recorder
    counter: Counter | None

    async def setup(self) -> dict[str, Any]:
        """Build the runtime; returns what to show about it (runtime, storage, version)."""
        ...

    async def new_session(self, label: str) -> Any:
        """Create an empty session; the measured one exists before its turn 1."""
        ...

    async def turn(self, session: Any, number: int) -> None:
        """Play one turn; raises when the runtime did not do what the script says."""
        ...

    async def finish(self, session: Any, turns: int) -> dict[str, Any]:
        """Check the stored session after the last turn and release resources."""
        ...


def _protocol_stream() -> Any:
    """The real stdout for protocol lines; anything a library prints goes to stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


async def serve(driver: Driver) -> None:
    out = _protocol_stream()

    def emit(payload: dict[str, Any]) -> None:
        out.write(json.dumps(payload) + "\n")
        out.flush()

    try:
        info = await driver.setup()
        warmup = await driver.new_session("warmup")
        for number in range(1, WARMUP_TURNS + 1):
            await _play(driver, warmup, number)
        session = await driver.new_session("measured")
        emit({"ready": True, **info})
        played = 0
        while True:
            # Blocking on purpose: while other runtimes play their chunk, this process's
            # event loop (and any background work it would schedule) stays still.
            line = sys.stdin.readline()
            if not line:
                return
            command = json.loads(line)
            if "play" in command:
                for _ in range(int(command["play"])):
                    played += 1
                    emit(await _play(driver, session, played))
                emit({"chunk_done": played})
            elif command.get("stop"):
                emit({"done": True, **await driver.finish(session, played)})
                return
    except Exception as exc:
        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from exc


async def _play(driver: Driver, session: Any, number: int) -> dict[str, Any]:
    driver.recorder.sizes = []
    driver.recorder.turn = number
    if driver.counter is not None:
        driver.counter.take()
    started = time.perf_counter()
    await driver.turn(session, number)
    elapsed_ms = (time.perf_counter() - started) * 1000
    counted = driver.counter.take() if driver.counter is not None else None
    sizes = list(driver.recorder.sizes)
    if len(sizes) != MODEL_CALLS_PER_TURN:
        raise RuntimeError(f"turn {number}: the model was called {len(sizes)} times, expected {MODEL_CALLS_PER_TURN}")
    return {
        "turn": number,
        "ms": round(elapsed_ms, 3),
        "chars": sizes,
        "statements": None if counted is None else counted[0],
        "rows_read": None if counted is None else counted[1],
        "rows_written": None if counted is None else counted[2],
    }


def main(build: Callable[[str, str], Driver], configs: tuple[str, ...]) -> int:
    """Entry point of a driver: `python DRIVER.py CONFIG WORKDIR`."""
    if len(sys.argv) != 3 or sys.argv[1] not in configs:
        print(f"usage: {sys.argv[0]} {{{','.join(configs)}}} WORKDIR", file=sys.stderr)
        return 2
    asyncio.run(serve(build(sys.argv[1], sys.argv[2])))
    return 0
