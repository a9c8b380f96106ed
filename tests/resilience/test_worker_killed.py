"""A Celery worker is SIGKILLed in the middle of a summary job (PostgreSQL + Redis only).

Two real workers share a queue. The first summary call of the test stalls (the summarizer
below, loaded in the workers through AGENTSITE_SUMMARIZER), and its worker is killed
while it holds the job and the summary lock. With acks_late the job stays unacknowledged;
once older than the visibility timeout it goes to the other worker, which summarizes the
same range once the dead worker's lock lease has lapsed. The stored summary is that one
run's (version 1, boundary at the job's last seq): nothing was summarized twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from sessions_app.core.summary import SummaryRequest, SummaryResult
from tests.resilience.services import require_services
from tests.sessions.ledger_builders import Ledger
from tests.support.celery_worker import start_worker, wait_ready
from tests.support.daphne import database_url_for_tests

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

APP = "agentsite"
PROBE_KEY = "RESILIENCE_PROBE_KEY"
VISIBILITY_S = 4
LOCK_TTL_S = 3
TIMEOUT = 60


class StallOnceSummarizer:
    """Records each call (`first-last-pid`) in Redis; the test's first call stalls."""

    name = "stall-once"

    def __init__(self) -> None:
        import redis

        self.redis = redis.Redis.from_url(os.environ["REDIS_URL"])
        self.key = os.environ[PROBE_KEY]

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        first, last = request.events[0].seq, request.events[-1].seq
        self.redis.rpush(f"{self.key}:calls", f"{first}-{last}-{os.getpid()}")
        if self.redis.set(f"{self.key}:stalled", "1", nx=True):
            await asyncio.sleep(300)  # killed long before this ends
        return SummaryResult(text=f"summary of {first}..{last}")


def stall_once_summarizer() -> StallOnceSummarizer:
    """AGENTSITE_SUMMARIZER factory for the worker processes."""
    return StallOnceSummarizer()


def _start_workers(tmp_path: Path, run: str, queue: str, redis_url: str) -> list[tuple[subprocess.Popen[bytes], Path]]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentsite.settings",
        "DATABASE_URL": database_url_for_tests(),
        "REDIS_URL": redis_url,
        "AGENTSITE_MODEL": "offline",
        "AGENTSITE_DEMO_GOVERNANCE": "0",
        "AGENTSITE_SUMMARIZER": f"{__name__}:stall_once_summarizer",
        "AGENTSITE_SUMMARY_LOCK": "redis",
        "AGENTSITE_SUMMARY_TRIGGER_RATIO": "0.0001",
        "AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS": "1",
        "AGENTSITE_JOB_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S),
        "AGENTSITE_SUMMARY_LOCK_TTL_S": str(LOCK_TTL_S),
        PROBE_KEY: run,
        "PYTHONUNBUFFERED": "1",
    }
    workers = []
    for index in range(2):
        log = tmp_path / f"worker-{index}.log"
        workers.append((start_worker(queue=queue, name=f"w{index}-{run}", env=env, log=log), log))
    wait_ready(workers, TIMEOUT)
    return workers


def test_a_summary_job_of_a_killed_worker_runs_again_elsewhere_once(tmp_path: Path, alice: Any) -> None:
    require_services(postgres=True, redis=True)
    import redis
    from django.conf import settings

    from sessions_app import models as orm
    from sessions_app.backends import DjangoSessionService
    from sessions_app.tasks import session_summarize_task

    client = redis.Redis.from_url(settings.REDIS_URL)
    run = f"resilience-kill-{os.getpid()}-{int(time.time() * 1000)}"
    queue = f"{run}-queue"
    workers = _start_workers(tmp_path, run, queue, settings.REDIS_URL)
    try:
        service = DjangoSessionService()
        session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk))
        ledger = Ledger(filter_key=APP)
        for i in range(3):
            ledger.simple_turn(f"question {i}", f"answer {i}", tool=("lookup", f"result {i}"))
        for event in ledger.events:
            async_to_sync(service.append_event)(session, event.replace(seq=None))
        last_seq = len(ledger.events)
        session_summarize_task.apply_async(args=(session.id, APP, last_seq), queue=queue)

        deadline = time.monotonic() + TIMEOUT
        while not client.llen(f"{run}:calls"):
            assert time.monotonic() < deadline, "no worker took the job"
            time.sleep(0.05)
        first, last, pid = client.lindex(f"{run}:calls", 0).decode().split("-")
        victim = next(process for process, _ in workers if process.pid == int(pid))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()

        while (
            row := orm.Summary.objects.filter(session_id=session.id, filter_key=APP).exclude(text="").first()
        ) is None:
            assert time.monotonic() < deadline + TIMEOUT, "the job never ran again:\n" + "\n".join(
                log.read_text(errors="replace")[-2000:] for _, log in workers
            )
            time.sleep(0.1)
        recovered_s = time.monotonic() - killed_at
        time.sleep(VISIBILITY_S + 2)  # a second redelivery, if any, would have landed by now

        calls = [c.decode().split("-") for c in client.lrange(f"{run}:calls", 0, -1)]
        row.refresh_from_db()
        assert (int(first), int(last)) == (1, last_seq)
        # Exactly two calls: the killed one and the rerun, on the surviving worker, same range.
        assert len(calls) == 2, calls
        assert calls[1][:2] == [first, last] and calls[1][2] != pid, calls
        assert row.last_seq == last_seq and row.version == 1, (row.last_seq, row.version)
        assert row.text == f"[events 1-{last_seq}]\nsummary of 1..{last_seq}"  # one section (issue 12, C1)
        print(
            f"job rerun by another worker and stored {recovered_s:.1f}s after the SIGKILL "
            f"(visibility timeout {VISIBILITY_S}s, lock lease {LOCK_TTL_S}s)"
        )
    finally:
        for process, _ in workers:
            if process.poll() is None:
                process.terminate()
        for process, _ in workers:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        client.delete(queue, f"{run}:calls", f"{run}:stalled", f"_kombu.binding.{queue}")
