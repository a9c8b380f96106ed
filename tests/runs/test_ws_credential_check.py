"""A socket's credential is checked again at most every `CREDENTIAL_CHECK_S` for its client
frames (issue 23: a check per frame was a statement per run); revocations that send a
signal close it at once, and a socket that cannot be told checks on every frame."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from runs.surfaces.websocket import consumers
from tests.runs.test_consumers import _fresh_channel_layer  # noqa: F401  # a fixture, used by name
from tests.security.support import close_code, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice_session(alice: Any) -> str:
    from sessions_app import services

    return str(services.session_create(user=alice, agent="support").id)


BAD_FRAME = json.dumps({"type": "no-such-frame"})  # answered with an error frame, the socket stays open


@pytest.fixture
def alice_token(alice: Any) -> str:
    from rest_framework.authtoken.models import Token

    return str(Token.objects.get_or_create(user=alice)[0].key)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every credential check the consumers make (user ids): a frame's, and the connect's
    (made with the other reads of a socket that has joined)."""
    made: list[Any] = []
    real = consumers.still_authorised
    real_in_thread = consumers.credential_holds

    async def counted(user_id: Any, token: str | None) -> bool:
        made.append(user_id)
        return bool(await real(user_id, token))

    def counted_in_thread(user_id: Any, token: str | None) -> bool:
        made.append(user_id)
        return real_in_thread(user_id, token)

    monkeypatch.setattr(consumers, "still_authorised", counted)
    monkeypatch.setattr(consumers, "credential_holds", counted_in_thread)
    return made


async def _answer(socket: Any) -> dict[str, Any]:
    return dict(json.loads(await socket.receive_from(timeout=10)))


async def test_frames_within_the_interval_take_the_last_check(
    alice_token: str, alice_session: str, checks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)

    for _ in range(3):
        await socket.send_to(text_data=BAD_FRAME)
        assert (await _answer(socket))["type"] == "error"
    assert len(checks) == 1  # the connect's (a socket handles its connect before its frames)

    monkeypatch.setattr(consumers, "CREDENTIAL_CHECK_S", 0.0)
    await socket.send_to(text_data=BAD_FRAME)
    assert (await _answer(socket))["type"] == "error"
    assert len(checks) == 2
    await socket.disconnect()


async def test_a_token_deleted_without_signals_is_refused_once_the_interval_passed(
    alice_token: str, alice_session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rest_framework.authtoken.models import Token

    monkeypatch.setattr(consumers, "CREDENTIAL_CHECK_S", 0.2)
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)
    await sync_to_async(lambda: Token.objects.filter(key=alice_token)._raw_delete("default"))()

    await asyncio.sleep(0.3)
    await socket.send_to(text_data=json.dumps({"type": "run", "message": "hi"}))

    assert await close_code(socket) == 4401


async def test_a_socket_that_cannot_be_told_of_revocations_checks_every_frame(
    alice: Any, alice_token: str, alice_session: str, checks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = get_channel_layer()
    real = layer.group_add

    async def no_user_group(group: str, channel: str) -> None:
        if group.startswith("user."):
            raise ConnectionError("the layer is down")
        await real(group, channel)

    monkeypatch.setattr(layer, "group_add", no_user_group)
    socket = await open_socket(f"/ws/sessions/{alice_session}/", alice_token)
    assert (await _answer(socket))["error"]["code"] == "live_unavailable"
    await sync_to_async(lambda: type(alice).objects.filter(pk=alice.pk).update(is_active=False))()

    await socket.send_to(text_data=json.dumps({"type": "run", "message": "hi"}))

    assert await close_code(socket) == 4401
    assert len(checks) == 2  # the connect's and the frame's
