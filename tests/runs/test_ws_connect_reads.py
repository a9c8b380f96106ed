"""A socket that connects makes its reads after joining in one trip to the database threads
(issue 23: as five trips, each queued behind every other socket's and run's, they held a
client's first frame for seconds under load), and resuming still loses and repeats nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentsite.threads import DB_EXECUTOR
from runs.core.llm.base import Model
from tests.runs.test_consumers import (  # noqa: F401  # _fresh_channel_layer: a fixture, used by name
    _fresh_channel_layer,
    kinds,
    receive,
    receive_until,
    seqs,
    tool_then_answer,
)
from tests.security.support import open_socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice_token(alice: Any) -> str:
    from rest_framework.authtoken.models import Token

    return str(Token.objects.get_or_create(user=alice)[0].key)


@pytest.fixture
def alice_session(alice: Any) -> str:
    from sessions_app import services

    return str(services.session_create(user=alice, agent="support").id)


async def test_a_resuming_socket_reads_once_after_joining_and_resumes_exactly(
    alice_token: str, alice_session: str, use_model: Callable[[Model], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_model(tool_then_answer("word " * 20))
    first = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)
    await first.send_json_to({"type": "run", "message": "Why does TLS fail?"})
    await receive(first)
    seen = await receive_until(first, "TOOL_CALL_RESULT")
    await first.disconnect()
    resume_at = max(seqs(seen))
    trips: list[tuple[Any, str]] = []
    submit = DB_EXECUTOR.submit

    def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        # The task that makes the trip, and what the trip runs (its repr names the function).
        trips.append((asyncio.current_task(), repr((fn, args))))
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(DB_EXECUTOR, "submit", counted)

    second = await open_socket(f"/ws/sessions/{alice_session}/?after_seq={resume_at}", alice_token)
    rest = await receive_until(second, "RUN_FINISHED")
    await second.disconnect()
    # The socket's own trips: those of the task its handshake and connect ran in (the run
    # and its post-run jobs go on in tasks of their own), the catch-up's pages aside.
    (socket_task,) = {task for task, trip in trips if "_joined" in trip}
    connect_trips = [trip for task, trip in trips if task is socket_task and "_events_after" not in trip]

    # The handshake's token, the owner before joining, then one trip for everything after.
    assert len(connect_trips) <= 3, connect_trips
    assert "RUN_STARTED" not in kinds(rest)  # the client saw this run start
    assert seqs(seen).isdisjoint(seqs(rest))
    assert max(seqs(rest)) > resume_at
