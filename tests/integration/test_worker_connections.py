"""A real Celery worker keeps its database connection between tasks, and replaces one the
database dropped (PostgreSQL + Redis only).

Celery's Django fixup closes the task thread's connection before and after every task when
`CONN_MAX_AGE` is 0, so each job paid for a new connection and PostgreSQL for a new backend
(issue 23). The worker now keeps it (`CELERY_DB_REUSE_MAX`) and checks it before a task
when it may be dead (`agentsite.threads.KeptConnections`). The probe task below records
which PostgreSQL backend served it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import shared_task

from tests.support.celery_worker import start_worker, stop, wait_ready
from tests.support.daphne import database_url_for_tests

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

PROBE = "tests.worker_connection_probe"
STARTUP_S = 60
WAIT_S = 60


@shared_task(name=PROBE)
def connection_probe(key: str) -> None:
    """Push the PostgreSQL backend pid of this task's connection to the Redis list `key`."""
    import redis
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    redis.Redis.from_url(os.environ["REDIS_URL"]).rpush(key, pid)


@pytest.fixture
def worker(transactional_db: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.skip("a real worker needs PostgreSQL and Redis: set DATABASE_URL=postgres://... and REDIS_URL")
    import redis

    run = f"worker-connections-{os.getpid()}-{int(time.time() * 1000)}"
    queue = f"{run}-queue"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentsite.settings",
        "DATABASE_URL": database_url_for_tests(),
        "REDIS_URL": str(settings.REDIS_URL),
        "AGENTSITE_MODEL": "offline",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "worker.log"
    process = start_worker(queue=queue, name=run, env=env, log=log, include=[__name__])
    client = redis.Redis.from_url(str(settings.REDIS_URL), socket_timeout=WAIT_S + 10)
    try:
        wait_ready([(process, log)], STARTUP_S)
        yield {"queue": queue, "key": f"{run}:pids", "redis": client, "log": log}
    finally:
        stop(process)
        client.delete(queue, f"{run}:pids", f"_kombu.binding.{queue}")
        client.close()


def _probe(worker: dict[str, Any], tasks: int) -> list[int]:
    """Send `tasks` probes one after another; the backend pid of each."""
    from agentsite.celery import app

    pids: list[int] = []
    for _ in range(tasks):
        app.send_task(PROBE, args=[worker["key"]], queue=worker["queue"])
        answer = worker["redis"].blpop([worker["key"]], timeout=WAIT_S)
        assert answer is not None, f"no answer from the worker:\n{worker['log'].read_text(errors='replace')}"
        pids.append(int(answer[1]))
    return pids


def test_a_worker_keeps_its_connection_between_tasks_and_replaces_a_dropped_one(worker: dict[str, Any]) -> None:
    from django.db import connection

    kept = _probe(worker, 5)
    assert len(set(kept)) == 1, f"each task had a connection of its own: backends {kept}"

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [kept[0]])
    time.sleep(0.5)  # the backend's farewell reaches the worker's socket
    after = _probe(worker, 3)
    assert kept[0] not in after, "a task ran on the connection the database dropped"
    assert len(set(after)) == 1, f"the new connection was not kept: backends {after}"
    assert "OperationalError" not in worker["log"].read_text(errors="replace")
