"""bench/turns.py's SQL counter: statements and rows on every Django connection, from every thread."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
