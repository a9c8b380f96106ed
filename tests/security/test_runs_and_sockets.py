"""Runs and sockets (issue 17): a run that fails to start ends at once, deleting a session
stops its runs and closes its sockets, a socket lives only as long as its credential and
its session, token clients need no Origin while cookie sockets need this site's, and a
socket answers "not yours" as "does not exist"."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from agentsite.composition import run_manager
from runs import models as run_orm
from runs.core.agents.llm import LLMAgent
from runs.core.lifecycle import Lifecycle
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app import models as orm
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event, utcnow
from sessions_app.core.inmemory import InMemorySessionService
from tests.security.support import TIMEOUT_S, client, close_code, open_socket, post_json, sse_events

pytestmark = pytest.mark.django_db(transaction=True)

HOST = (b"host", b"testserver")
BROKEN = "this message cannot be saved"
QUIET = 0.5  # how long a socket that should stay silent is watched


@pytest.fixture(autouse=True)
async def _fresh_channel_layer() -> AsyncIterator[None]:
    """The in-memory layer is process-wide: start each test without members of older loops."""
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        await layer.flush()
    yield
    if isinstance(layer, InMemoryChannelLayer):
        await layer.flush()


@pytest.fixture
def broken_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session backend fails to save any user message that says BROKEN (an outage, a
    value the database refuses), alone or in a batch; every other append works."""

    def refuses(event: Event) -> bool:
        return event.message is not None and event.message.role == "user" and BROKEN in event.message.content

    original_one = DjangoSessionService.append_event

    async def append_event(self: DjangoSessionService, session: Any, event: Event) -> Event:
        if refuses(event):
            raise RuntimeError("the database refused the row")
        return await original_one(self, session, event)

    monkeypatch.setattr(DjangoSessionService, "append_event", append_event)
    original_many = getattr(DjangoSessionService, "append_events", None)
    if original_many is not None:
        # `**options` carries the writes a step joins to its events (`joined`: the run's row,
        # its end record), which the real backend takes too.
        async def append_events(
            self: DjangoSessionService, session: Any, events: Sequence[Event], **options: Any
        ) -> list[Event]:
            if any(refuses(event) for event in events):
                raise RuntimeError("the database refused the row")
            return await original_many(self, session, events, **options)

        monkeypatch.setattr(DjangoSessionService, "append_events", append_events)


@pytest.fixture
def one_run_each(settings: Any, use_model: Callable[[Model], None]) -> Callable[[Model], None]:
    """A cap of one live run per user, and the model to serve (the cap is read when the
    runner is built)."""
    settings.AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = 1
    return use_model


def runs_of(session_id: str) -> list[dict[str, Any]]:
    return list(run_orm.Run.objects.filter(session_id=session_id).order_by("created_at").values("status", "error"))


def ledger_of(session_id: str) -> list[dict[str, Any]]:
    return [row["payload"] for row in orm.Event.objects.filter(session_id=session_id).order_by("seq").values("payload")]


def agui_body(thread_id: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "client-run",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
    }


async def frames_until_close(socket: WebsocketCommunicator, *, timeout_s: float = TIMEOUT_S) -> tuple[str, int | None]:
    """Every text frame the socket gets within `timeout_s`, joined, and its close code (None:
    still open). Waits with `receive_nothing`: a timed-out `receive_output` kills the consumer."""
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await socket.receive_nothing(timeout=0.1):
            continue
        output = await socket.receive_output()
        if output["type"] == "websocket.close":
            return seen, int(output["code"])
        seen += output.get("text", "")
    return seen, None


# -- a failed start ends the run ---------------------------------------------------------------------


async def test_a_run_whose_user_message_cannot_be_saved_ends_failed_at_once_and_frees_its_thread(
    alice: Any, alice_token: str, broken_ledger: None, one_run_each: Callable[[Model], None]
) -> None:
    one_run_each(ScriptedModel.of("Fine now."))
    async with client(alice_token) as http:
        session = (await http.post("/api/sessions/", json={"agent": "support"})).json()["id"]

        refused = await post_json("/api/runs/", {"message": BROKEN, "session_id": session}, alice_token)

        assert refused.status_code == 500 and "Traceback" not in refused.text
        [run] = await sync_to_async(runs_of)(session)
        assert run["status"] == "failed" and run["error"]["type"] == "start_failed"
        assert "the database refused the row" in run["error"]["message"]
        completion = (await sync_to_async(ledger_of)(session))[-1]
        assert completion["object"] == "runner.completion" and completion["extensions"]["status"] == "failed"
        # The cap of one is free again, and the same session takes the next run.
        again = await post_json("/api/runs/", {"message": "and now?", "session_id": session, "wait": True}, alice_token)
        assert again.status_code == 201 and again.json()["status"] == "completed", again.text


async def test_an_agui_thread_whose_run_failed_to_start_takes_the_next_run(
    alice: Any, alice_token: str, broken_ledger: None, one_run_each: Callable[[Model], None]
) -> None:
    one_run_each(ScriptedModel.of("Fine now."))

    refused = await post_json("/agui/support", agui_body("thread-zombie", BROKEN), alice_token)
    assert refused.status_code == 500, refused.text
    [run] = await sync_to_async(runs_of)("thread-zombie")
    assert run["status"] == "failed"

    again = await post_json("/agui/support", agui_body("thread-zombie", "and now?"), alice_token)
    assert again.status_code == 200, again.text  # not 409 run_active, not 429 too_many_runs
    assert sse_events(again)[-1]["type"] == "RUN_FINISHED"


async def test_a_websocket_run_that_fails_to_start_answers_an_error_frame_and_ends_the_run(
    alice: Any, alice_token: str, broken_ledger: None, one_run_each: Callable[[Model], None]
) -> None:
    one_run_each(ScriptedModel.of("Fine now."))
    async with client(alice_token) as http:
        session = (await http.post("/api/sessions/", json={"agent": "support"})).json()["id"]
    socket = await open_socket(f"/ws/sessions/{session}/", alice_token)

    await socket.send_to(text_data=json.dumps({"type": "run", "message": BROKEN}))

    frames = []
    while not any(f.get("type") == "error" for f in frames):
        frames.append(await socket.receive_json_from(timeout=TIMEOUT_S))
    assert frames[-1]["error"]["code"] == "internal_error"
    assert [r["status"] for r in await sync_to_async(runs_of)(session)] == ["failed"]
    await socket.send_to(text_data=json.dumps({"type": "run", "message": "and now?"}))
    while (frame := await socket.receive_json_from(timeout=TIMEOUT_S)).get("type") != "run.accepted":
        assert frame.get("type") != "error", frame
    await socket.disconnect()


async def test_the_reaper_ends_a_run_of_its_own_process_that_nothing_runs() -> None:
    agent = LLMAgent(name="support", model=ScriptedModel.of())
    runner = Runner(app="agentsite", agents=[agent], session_service=InMemorySessionService(), owner="me")
    session = await runner.session_service.create_session(app="agentsite", user_id="alice")
    stuck = await runner.run_store.create(
        RunRecord(
            id="run-stuck",
            app="agentsite",
            user_id="alice",
            session_id=session.id,
            agent="support",
            request_id="req-stuck",
            owner="me",
            status="running",
            started_at=utcnow(),
            heartbeat_at=utcnow(),
        )
    )

    reaped = await Lifecycle(runner, stale_after_s=3600).reap()

    assert [r.id for r in reaped] == [stuck.id]
    assert (await runner.run_store.get(stuck.id)).status == "interrupted"  # type: ignore[union-attr]  # created above


# -- request ids ---------------------------------------------------------------------------------------


async def test_two_users_may_use_the_same_request_id(
    alice: Any, bob: Any, alice_token: str, bob_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("One.", "Two."))
    mine = await post_json("/api/runs/", {"message": "hi", "request_id": "req-1", "wait": True}, alice_token)
    theirs = await post_json("/api/runs/", {"message": "hi", "request_id": "req-1", "wait": True}, bob_token)
    assert mine.status_code == theirs.status_code == 201, (mine.text, theirs.text)


async def test_a_refused_duplicate_request_id_leaves_no_empty_session_behind(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("One."))
    first = await post_json("/api/runs/", {"message": "hi", "request_id": "req-1", "wait": True}, alice_token)
    assert first.status_code == 201

    again = await post_json("/api/runs/", {"message": "hi again", "request_id": "req-1"}, alice_token)

    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate_request"
    sessions = await sync_to_async(lambda: list(orm.Session.objects.filter(user=alice).values_list("id", flat=True)))()
    assert sessions == [first.json()["session_id"]]


# -- deleting a session ------------------------------------------------------------------------------


@pytest.fixture
def slow_answer(use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of(ScriptStep.answer("word " * 400, chunk_size=2, delay_s=0.02)))


async def test_deleting_a_session_cancels_its_runs_before_the_delete_and_logs_no_traceback(
    alice: Any, alice_token: str, slow_answer: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    started = (await post_json("/api/runs/", {"message": "talk a lot"}, alice_token)).json()
    assert started["status"] == "running"
    stopped: list[str] = []
    runner = run_manager().runner
    handle = runner.handle(started["id"])
    assert handle is not None
    handle.listeners.append(lambda event: stopped.append(event.extensions.get("status", "")) if event else None)

    async with client(alice_token) as http:
        deleted = await http.delete(f"/api/sessions/{started['session_id']}/")

    assert deleted.status_code == 204
    assert started["id"] not in runner.active_run_ids()  # ended before the delete answered
    assert stopped[-1] == "cancelled"  # its completion, saved while the session still existed
    await asyncio.sleep(QUIET)
    noisy = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not noisy, [r.getMessage() for r in noisy]
    assert not await sync_to_async(run_orm.Run.objects.filter(pk=started["id"]).exists)()


async def test_a_socket_on_a_deleted_session_is_closed_with_4404(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Hi."))
    run = (await post_json("/api/runs/", {"message": "hi", "wait": True}, alice_token)).json()
    socket = await open_socket(f"/ws/sessions/{run['session_id']}/", alice_token)
    await frames_until_close(socket, timeout_s=QUIET)  # the replay

    async with client(alice_token) as http:
        assert (await http.delete(f"/api/sessions/{run['session_id']}/")).status_code == 204

    assert await close_code(socket) == 4404


async def test_the_socket_of_a_former_owner_of_a_client_chosen_id_never_sees_the_next_owners_events(
    alice: Any, bob: Any, alice_token: str, bob_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Alice's answer.", "Bob's secret answer PELICAN."))
    assert (await post_json("/agui/support", agui_body("shared-id", "hi"), alice_token)).status_code == 200
    socket = await open_socket("/ws/sessions/shared-id/", alice_token)
    await frames_until_close(socket, timeout_s=QUIET)  # the replay
    # Gone without a word to the sockets (a delete that bypasses the service), and the id
    # is free for anyone to choose again.
    await sync_to_async(lambda: orm.Session.objects.filter(id="shared-id").delete())()

    bobs = await post_json("/agui/support", agui_body("shared-id", "bob's private question"), bob_token)
    assert bobs.status_code == 200, bobs.text

    seen, code = await frames_until_close(socket)
    assert "PELICAN" not in seen and "private question" not in seen
    assert code == 4404


# -- credentials revoked -------------------------------------------------------------------------------


async def test_revoking_a_token_closes_the_sockets_it_opened(alice: Any, alice_token: str, alice_session: str) -> None:
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)

    await sync_to_async(lambda: Token.objects.filter(key=alice_token).delete())()

    assert await close_code(socket) == 4401


async def test_deactivating_a_user_closes_their_sockets(alice: Any, alice_token: str, alice_session: str) -> None:
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)
    alice.is_active = False

    await sync_to_async(alice.save)()

    assert await close_code(socket) == 4401


async def test_a_socket_whose_user_was_deactivated_without_signals_starts_no_run_once_its_check_is_due(
    alice: Any,
    alice_token: str,
    alice_session: str,
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runs.surfaces.websocket import consumers

    monkeypatch.setattr(consumers, "CREDENTIAL_CHECK_S", 0.2)  # 5 s in production
    use_model(ScriptedModel.of("Should not run."))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)
    await sync_to_async(lambda: type(alice).objects.filter(pk=alice.pk).update(is_active=False))()
    await asyncio.sleep(0.3)  # no signal told the socket: its next check is due after the interval

    await socket.send_to(text_data=json.dumps({"type": "run", "message": "hi"}))

    assert await close_code(socket) == 4401
    assert await sync_to_async(runs_of)(alice_session) == []


# -- origins -----------------------------------------------------------------------------------------


@pytest.fixture
def alice_cookie(alice: Any) -> bytes:
    browser = Client()
    browser.force_login(alice)
    return f"sessionid={browser.cookies['sessionid'].value}".encode()


@pytest.fixture
def alice_session(alice: Any) -> str:
    from sessions_app import services

    return services.session_create(user=alice, agent="support").id


async def handshake(path: str, *headers: tuple[bytes, bytes]) -> bool:
    socket = WebsocketCommunicator(application, path, headers=list(headers))
    connected, _ = await socket.connect(timeout=TIMEOUT_S)
    await socket.disconnect()
    return connected


@pytest.mark.parametrize("auth", ["header", "query"])
async def test_a_token_client_without_an_origin_is_accepted(auth: str, alice_token: str, alice_session: str) -> None:
    if auth == "header":
        socket = WebsocketCommunicator(
            application,
            f"/ws/sessions/{alice_session}/",
            headers=[(b"authorization", f"Bearer {alice_token}".encode())],
        )
    else:
        socket = WebsocketCommunicator(application, f"/ws/sessions/{alice_session}/?token={alice_token}")
    connected, _ = await socket.connect(timeout=TIMEOUT_S)
    assert connected
    assert await frames_until_close(socket, timeout_s=QUIET) == ("", None)  # open, nothing to replay
    await socket.disconnect()


async def test_a_token_client_that_sends_a_foreign_origin_is_refused(alice_token: str, alice_session: str) -> None:
    # An Origin means a browser page: it must be this site's, whatever the credential.
    assert not await handshake(
        f"/ws/sessions/{alice_session}/",
        HOST,
        (b"origin", b"https://evil.example"),
        (b"authorization", f"Bearer {alice_token}".encode()),
    )


@pytest.mark.parametrize(
    ("origin", "accepted"),
    [
        (None, False),
        (b"http://testserver", True),
        (b"https://testserver", False),  # another scheme
        (b"http://testserver:8080", False),  # another port
        (b"http://testserver.evil.example", False),
        (b"null", False),
    ],
)
async def test_a_cookie_socket_needs_this_sites_origin_by_scheme_host_and_port(
    origin: bytes | None, accepted: bool, alice_cookie: bytes, alice_session: str
) -> None:
    headers = [
        HOST,
        (b"x-forwarded-proto", b"http"),
        (b"cookie", alice_cookie),
        *([(b"origin", origin)] if origin else []),
    ]
    assert await handshake(f"/ws/sessions/{alice_session}/", *headers) is accepted


@pytest.mark.parametrize(
    ("origin", "accepted"),
    [
        (b"https://testserver", True),
        (b"http://testserver", True),
        (b"https://testserver:8443", False),
    ],
)
async def test_without_a_known_scheme_a_cookie_socket_still_needs_this_host_and_port(
    origin: bytes, accepted: bool, alice_cookie: bytes, alice_session: str
) -> None:
    # Daphne's scope names no scheme: behind TLS the page is https, the handshake the same host.
    headers = [HOST, (b"cookie", alice_cookie), (b"origin", origin)]
    assert await handshake(f"/ws/sessions/{alice_session}/", *headers) is accepted


async def test_a_cookie_socket_from_a_trusted_origin_is_accepted(
    settings: Any, alice_cookie: bytes, alice_session: str
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.com", "https://*.example.org"]
    path = f"/ws/sessions/{alice_session}/"
    cookie = (b"cookie", alice_cookie)
    assert await handshake(path, HOST, cookie, (b"origin", b"https://app.example.com"))
    assert await handshake(path, HOST, cookie, (b"origin", b"https://chat.example.org"))
    assert not await handshake(path, HOST, cookie, (b"origin", b"http://app.example.com"))
    assert not await handshake(path, HOST, cookie, (b"origin", b"https://app.example.com:8443"))


async def test_a_cookie_socket_whose_host_is_not_allowed_is_refused(alice_cookie: bytes, alice_session: str) -> None:
    assert not await handshake(
        f"/ws/sessions/{alice_session}/",
        (b"host", b"evil.example"),
        (b"origin", b"http://evil.example"),
        (b"cookie", alice_cookie),
    )


# -- not yours = not there; malformed text -----------------------------------------------------------------


async def test_a_socket_on_someone_elses_session_closes_like_one_on_a_missing_session(
    alice_token: str, bob: Any
) -> None:
    from sessions_app import services

    bobs = await sync_to_async(services.session_create)(user=bob, agent="support")
    codes = []
    for path in (f"/ws/sessions/{bobs.id}/", "/ws/sessions/no-such-session/"):
        codes.append(await close_code(await open_socket(path, alice_token)))
    assert codes == [4404, 4404]


@pytest.mark.parametrize(
    ("field", "frame", "problem"),
    [
        ("message", '{"type": "run", "message": "hi\\u0000there"}', "NUL character (U+0000) at index 2"),
        ("message", '{"type": "run", "message": "hi\\ud800"}', "lone surrogate (U+D800) at index 2"),
        ("agent", '{"type": "run", "message": "hi", "agent": "sup\\u0000port"}', "NUL character"),
        ("run_id", '{"type": "cancel", "run_id": "r\\u0000"}', "NUL character"),
    ],
)
async def test_a_nul_or_lone_surrogate_in_a_frame_is_answered_with_an_error_frame_naming_it(
    field: str, frame: str, problem: str, alice_token: str, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Still here."))
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)

    await socket.send_to(text_data=frame)

    answer = await socket.receive_json_from(timeout=TIMEOUT_S)
    assert answer["type"] == "error" and answer["error"]["code"] == "invalid_frame", answer
    assert answer["error"]["field"] == field and problem in answer["error"]["message"], answer
    assert await sync_to_async(runs_of)(alice_session) == []
    await socket.send_to(text_data=json.dumps({"type": "run", "message": "still there?"}))
    while (reply := await socket.receive_json_from(timeout=TIMEOUT_S)).get("type") != "run.accepted":
        assert reply.get("type") != "error", reply
    await socket.disconnect()


# -- settings ------------------------------------------------------------------------------------------


def test_testserver_is_not_an_allowed_host_outside_the_tests() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE")}
    shown = subprocess.run(
        [sys.executable, "-c", "from agentsite import settings; print(' '.join(settings.ALLOWED_HOSTS))"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert "testserver" not in shown and "127.0.0.1" in shown
