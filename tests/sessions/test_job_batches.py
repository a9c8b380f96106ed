"""Post-run jobs gathered into one broker message (issue 23, `sessions_app.jobs`): what a
process's runs ask for within the window goes together, each job once, in order; a batch
runs each job as its task would, a retryable failure queued alone, others logged."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import current_app, shared_task

from sessions_app import jobs
from sessions_app.jobs import JobBatcher, enqueue_session_job, send_jobs, session_jobs_task

RAN: list[tuple[str, str]] = []


class Flaky(Exception):
    """An error the task below retries (like a model's 429)."""


@shared_task(name="tests.job_batches.record")
def record(session_id: str) -> str:
    RAN.append(("record", session_id))
    return session_id


@shared_task(name="tests.job_batches.flaky", autoretry_for=(Flaky,), max_retries=3)
def flaky(session_id: str) -> None:
    RAN.append(("flaky", session_id))
    if session_id == "busy":
        raise Flaky("the model said 429")
    if session_id == "broken":
        raise ValueError("a bug")


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@contextmanager
def eager(on: bool) -> Iterator[None]:
    """Celery without a broker (each message runs as it is sent), or with one."""
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = on
    try:
        yield
    finally:
        current_app.conf.task_always_eager = before


class Sent:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []
        self.done = threading.Event()

    def __call__(self, batch: list[tuple[str, str]]) -> None:
        self.calls.append(batch)
        self.done.set()


def test_jobs_asked_for_within_the_window_go_in_one_send_each_once_in_order() -> None:
    sent = Sent()
    batcher = JobBatcher(sent, window_s=0.2)
    batcher.add("memory", "s1")
    batcher.add("review", "s1")
    batcher.add("memory", "s2")
    batcher.add("memory", "s1")  # asked again before it went: once
    assert sent.calls == []  # nothing before the window closes
    assert sent.done.wait(5)
    assert sent.calls == [[("memory", "s1"), ("review", "s1"), ("memory", "s2")]]

    sent.done.clear()
    batcher.add("memory", "s3")  # after the send: the next batch
    assert sent.done.wait(5)
    assert sent.calls[1:] == [[("memory", "s3")]]


def test_a_flush_sends_what_waits_at_once_and_a_failed_send_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    sent = Sent()
    batcher = JobBatcher(sent, window_s=60)
    batcher.add("memory", "s1")
    started = time.monotonic()
    batcher.flush()  # as at the process's exit
    assert sent.calls == [[("memory", "s1")]] and time.monotonic() - started < 5
    batcher.flush()
    assert len(sent.calls) == 1  # nothing waited

    def down(batch: list[tuple[str, str]]) -> None:
        raise ConnectionError("Error 111 connecting to the broker")

    failing = JobBatcher(down, window_s=60)
    failing.add("memory", "s9")
    failing.flush()
    assert "post-run jobs not queued" in caplog.text and "s9" in caplog.text


def test_a_batch_runs_each_job_a_retryable_failure_queued_alone_another_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    queued: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(flaky, "apply_async", lambda args, **options: queued.append((args, options)))

    outcome = session_jobs_task.run(
        [
            ["tests.job_batches.record", "s1"],
            ["tests.job_batches.flaky", "busy"],
            ["tests.job_batches.flaky", "broken"],
            ["tests.no_such_task", "s3"],
            ["tests.job_batches.record", "s2"],
        ]
    )

    assert RAN == [("record", "s1"), ("flaky", "busy"), ("flaky", "broken"), ("record", "s2")]
    assert queued == [(["busy"], {"countdown": jobs.RETRY_COUNTDOWN_S})]  # its task's retries take over
    assert "a bug" in caplog.text and "no such task" in caplog.text  # logged, and the batch went on
    assert outcome == {"done": 2, "retried": 1, "failed": 2}


def test_one_job_goes_as_its_own_task_more_as_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager (no broker): each message runs as it is sent."""
    batches: list[Any] = []
    run_batch = session_jobs_task.run
    monkeypatch.setattr(session_jobs_task, "run", lambda given: batches.append(given) or run_batch(given))

    with eager(True):
        send_jobs([("tests.job_batches.record", "alone")])
        assert RAN == [("record", "alone")] and batches == []
        send_jobs([("tests.job_batches.record", "a"), ("tests.job_batches.record", "b")])
    assert batches == [[["tests.job_batches.record", "a"], ["tests.job_batches.record", "b"]]]
    assert RAN[1:] == [("record", "a"), ("record", "b")]


async def test_with_a_broker_a_run_s_job_joins_the_batch_and_eagerly_it_runs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = Sent()
    monkeypatch.setattr(jobs, "BATCHER", JobBatcher(sent, window_s=0.05))
    with eager(True):
        await enqueue_session_job(record, "eager")
    assert RAN == [("record", "eager")] and sent.calls == []  # the job itself, awaited

    with eager(False):
        await enqueue_session_job(record, "queued")
    assert sent.done.wait(5)
    assert sent.calls == [[("tests.job_batches.record", "queued")]] and RAN == [("record", "eager")]
