"""CPU per call of the database paths every offline run takes in the web process (issue 23).

`bench/stream.py` measures a run's whole CPU; on a shared 2-core machine its figure moves by
more than one path's cost from one round to the next. This measures the paths one by one,
in one thread, as `time.thread_time()` over `--calls` calls each (after one unmeasured call):
the session load of a new session, the run record's joined INSERT and UPDATE, the
admission count, the skill summaries, a memory search for a user without memories, recall's
summaries, the credential check, a replay page and one ledger row's JSON. The work of the
database server is not in the figures (another process); what the web process spends to
build, send and read each statement is.

Runs on PostgreSQL (`agentsite_db_paths_bench` on 127.0.0.1, dropped and recreated; skipped
with a message when PostgreSQL does not answer), Redis unset, DEBUG off:

    .venv/bin/python bench/db_paths.py [--calls 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "agentsite_db_paths_bench"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _reset() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB_NAME}")
    except Exception as exc:
        return f"PostgreSQL did not answer: {exc}"
    return None


def _cpu_ms(call: Callable[[], Any], calls: int) -> float:
    call()  # the first call loads what a process loads once
    started = time.thread_time()
    for _ in range(calls):
        call()
    return 1000 * (time.thread_time() - started) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="measured calls per path")
    args = parser.parse_args()
    problem = _reset()
    if problem:
        print(f"SKIP: {problem}; db_paths benchmark not run.")
        return 0
    os.environ.pop("REDIS_URL", None)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="agentsite.settings",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        AGENTSITE_MODEL="offline",
        DEBUG="0",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0)
    from runs.auth import token_user
    from runs.backends import _active_runs_of, _create_statement, _save_statement
    from runs.core.records import RunRecord
    from sessions_app import search, selectors, services
    from sessions_app.backends import DjangoSessionService, get_session_sync
    from sessions_app.backends.ledger import _row_json
    from sessions_app.core.events import Event, Message
    from sessions_app.core.memory import SearchOptions, UserKey
    from sessions_app.core.session import SessionKey
    from sessions_app.memory_backends import memory_manager
    from skills_app.backends import DjangoSkillRepository

    app, calls = settings.AGENTSITE_APP, args.calls
    user = get_user_model().objects.create_user(username="bench")
    token = Token.objects.create(user=user).key
    fresh = iter([services.session_create(user=user, agent="support").id for _ in range(calls + 1)])
    used = services.session_create(user=user, agent="support").id
    used_key = SessionKey(app=app, user_id=str(user.pk), session_id=used)
    answer = Event(author="agent", message=Message(role="assistant", content="Found 3 errors in the payments logs."))
    from asgiref.sync import async_to_sync

    service = DjangoSessionService()
    session = async_to_sync(service.get_session)(used_key)
    assert session is not None
    steps = [Event(author="user", message=Message(role="user", content="Search the logs of payments for errors"))]
    async_to_sync(service.append_events)(session, [*steps, *([answer] * 7)])
    record = RunRecord(
        id="r1",
        app=app,
        user_id=str(user.pk),
        session_id=used,
        agent="support",
        request_id="q1",
        trace={"steps": [{"kind": "tool", "n": n, "ms": 1.5} for n in range(8)]},
    )
    guard = 'EXISTS (SELECT 1 FROM "s")'
    skills = DjangoSkillRepository(app=app)
    memory = memory_manager()
    memory_key = UserKey(app=app, user_id=str(user.pk))
    paths: list[tuple[str, Callable[[], Any]]] = [
        (
            "session load, new session",
            lambda: get_session_sync(
                SessionKey(app=app, user_id=str(user.pk), session_id=next(fresh)), event_limit=200, after_summary=""
            ),
        ),
        ("run record INSERT (joined)", lambda: _create_statement(record, guard)),
        ("run record UPDATE (joined)", lambda: _save_statement(record, guard)),
        ("active-run count (admission)", lambda: _active_runs_of(str(user.pk))),
        ("skill summaries", skills.summaries_sync),
        (
            "memory search, no memories",
            lambda: memory.search(memory_key, SearchOptions(query="Search the logs of payments for errors")),
        ),
        ("recall summaries", lambda: search.summaries(used_key)),
        ("credential check", lambda: token_user(token)),
        ("replay page, 8 events", lambda: selectors.events_after(session_id=used, after_seq=0, limit=100)),
        ("ledger row JSON, 1 event", lambda: _row_json(answer, session_id=used, seq=1)),
    ]
    load = os.getloadavg()
    print(f"CPU per call (thread_time, {calls} calls each; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    for name, call in paths:
        print(f"  {name:32} {_cpu_ms(call, calls):7.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
