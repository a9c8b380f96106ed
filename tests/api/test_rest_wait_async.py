"""REST `wait` holds no thread while it waits (issue 23, item 3).

A hundred `POST /api/runs/` with `wait: true` are sent at once through the ASGI
application while every run's model call is held open. Each view thread is freed once its
run has started: all hundred runs reach the model although a process has 16 view threads
(`AGENTSITE_VIEW_THREADS`), every view thread is free while they wait, and a request
served by a view thread is answered meanwhile. When the model
answers, every client gets its ended run."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from agentsite.runtime import run_manager
from agentsite.threads import VIEW_EXECUTOR
from runs.core.llm.base import Model, ModelInfo, ModelRequest, ModelResponse
from sessions_app.core.events import Message, Usage

pytestmark = pytest.mark.django_db(transaction=True)

WAITERS = 100
VIEW_THREADS = int(os.environ.get("AGENTSITE_VIEW_THREADS", "16"))


@dataclass(kw_only=True)
class HeldModel:
    """Answers "done" once `release` is set; counts the calls held meanwhile."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0

    def info(self) -> ModelInfo:
        return ModelInfo(name="held", context_window=8192, provider="scripted")

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        self.held += 1
        await self.release.wait()
        yield ModelResponse(
            id="held",
            partial=False,
            message=Message(role="assistant", content="done"),
            finish_reason="stop",
            usage=Usage(prompt_tokens=1, completion_tokens=1),
            model="held",
        )


@sync_to_async
def _token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


async def _until(condition: Callable[[], bool], timeout_s: float) -> None:
    """Until `condition()` holds or `timeout_s` passed (the caller asserts which)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


async def test_a_hundred_rest_waits_hold_no_view_thread(
    alice: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False
    model = HeldModel()
    use_model(model)
    headers = {"Authorization": f"Bearer {await _token(alice)}"}
    threads_before = threading.active_count()  # earlier tests' pools and loops included
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=headers, timeout=120
    ) as http:
        waits = [
            asyncio.create_task(http.post("/api/runs/", json={"message": f"question {i}", "wait": True}))
            for i in range(WAITERS)
        ]
        # Every run reaches its model call: no waiting request keeps a view thread, else
        # only the first 16 (the view threads) would have started theirs.
        await _until(lambda: model.held == WAITERS or any(w.done() for w in waits), 90)
        assert not any(w.done() for w in waits), [w.result().text for w in waits if w.done()][:1]
        assert model.held == WAITERS, f"only {model.held} of {WAITERS} waiting runs reached the model"
        # Every view thread is free: as many tasks as the pool has threads meet at a barrier,
        # which they pass only when each has a thread of its own at the same time.
        barrier = threading.Barrier(VIEW_THREADS)
        await asyncio.gather(
            *(asyncio.wrap_future(VIEW_EXECUTOR.submit(barrier.wait, 10)) for _ in range(VIEW_THREADS))
        )
        # Django's ASGI handler gives each open request an idle thread of its own for the
        # synchronous middleware (asgiref's per-request ThreadSensitiveContext): that, the
        # two pools (however many of their threads are new) and the run loop are all the
        # threads the hundred added; a wait adds none.
        added = threading.active_count() - threads_before
        assert added <= WAITERS + VIEW_THREADS + int(os.environ.get("AGENTSITE_DB_THREADS", "8")) + 2, [
            t.name for t in threading.enumerate()
        ]
        # A request that needs a view thread is answered at once while the hundred wait.
        started = time.monotonic()
        listed = await http.get("/api/runs/", params={"status": "running", "limit": 200})
        assert listed.status_code == 200 and len(listed.json()["results"]) == WAITERS
        assert time.monotonic() - started < 10

        model.release.set()
        replies = await asyncio.gather(*waits)
    assert [r.status_code for r in replies] == [201] * WAITERS
    assert {r.json()["status"] for r in replies} == {"completed"}
    assert {r.json()["answer"] for r in replies} == {"done"}


async def test_a_rest_wait_past_its_timeout_answers_the_run_still_going(
    alice: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False
    settings.AGENTSITE_RUN_WAIT_TIMEOUT_S = 1
    model = HeldModel()
    use_model(model)
    headers = {"Authorization": f"Bearer {await _token(alice)}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://localhost", headers=headers, timeout=30
    ) as http:
        started = time.monotonic()
        reply = await http.post("/api/runs/", json={"message": "a long question", "wait": True})
        assert reply.status_code == 201
        assert reply.json()["status"] == "running" and "answer" not in reply.json()
        assert 1 <= time.monotonic() - started < 10
        # The run goes on after the reply and ends when the model answers.
        model.release.set()
        deadline = time.monotonic() + 30
        while (run := (await http.get(f"/api/runs/{reply.json()['id']}/")).json())["status"] == "running":
            assert time.monotonic() < deadline, run
            await asyncio.sleep(0.05)
        assert (run["status"], run["answer"]) == ("completed", "done")


async def test_rest_starts_queued_for_a_setup_place_hold_no_view_thread(
    alice: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False
    model = HeldModel()
    model.release.set()  # answers at once
    use_model(model)
    headers = {"Authorization": f"Bearer {await _token(alice)}"}
    starts = VIEW_THREADS + 4
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://localhost", headers=headers, timeout=120
    ) as http:
        assert (await http.get("/api/runs/")).status_code == 200  # the run manager adopts this loop
        manager = run_manager()
        gate = manager.runner.setup_gate
        # Every setup place is taken: each start queues in the gate.
        slots = [await manager.acall(lambda runner: runner.setup_gate.enter()) for _ in range(gate.limit)]
        posts = [asyncio.create_task(http.post("/api/runs/", json={"message": f"question {i}"})) for i in range(starts)]
        # More starts wait for a place than there are view threads: none holds one while
        # it waits, else the seventeenth would still queue for a thread, short of the gate.
        await _until(lambda: gate.waiting == starts or any(p.done() for p in posts), 60)
        assert gate.waiting == starts, f"{gate.waiting} of {starts} starts reached the gate"
        for slot in slots:
            slot.release()
        replies = await asyncio.gather(*posts)
    assert [r.status_code for r in replies] == [201] * starts
    assert all(r.json()["id"] and r.json()["status"] in ("running", "completed") for r in replies)


async def test_a_rest_start_refused_on_the_loop_answers_in_the_envelope(
    alice: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False
    model = HeldModel()
    model.release.set()
    use_model(model)
    headers = {"Authorization": f"Bearer {await _token(alice)}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://localhost", headers=headers, timeout=60
    ) as http:
        first = await http.post("/api/runs/", json={"message": "once", "request_id": "req-1", "wait": True})
        again = await http.post("/api/runs/", json={"message": "once", "request_id": "req-1", "wait": True})
    assert first.status_code == 201
    assert again.status_code == 409, again.text
    assert again.headers["content-type"].startswith("application/json")
    assert again.json()["error"]["code"]
