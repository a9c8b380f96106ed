"""Error texts in the user's language (issue 21, `runs.error_texts`): the websocket's error
frames follow the handshake's language cookie, else its Accept-Language, as HTTP does; core
errors carry stable codes and are translated at the surface (REST and the socket). The
`code` and the `field` never change with the language."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import translation

from agentsite.asgi import application
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, EventLimitError, TooManyRunsError
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from runs.core.steering import QueueFullError, RunNotActiveError
from runs.error_texts import CORE_TEXTS, core_error_text, localize_frame_text, translate_text
from sessions_app import services as session_services

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")
ZH_HEADER = (b"accept-language", b"zh-CN,zh;q=0.9,en;q=0.5")
EN_HEADER = (b"accept-language", b"en-US,en;q=0.9")
CJK = re.compile(r"[\u4e00-\u9fff]")
TIMEOUT = 5

BAD_FRAMES: list[str | bytes] = [
    "not json",
    "[1, 2]",
    json.dumps({"message": "hi"}),
    json.dumps({"type": "dance"}),
    json.dumps({"type": "run"}),
    json.dumps({"type": "run", "message": "hi", "agent": 7}),
    json.dumps({"type": "run", "message": "hi", "agent": "nobody"}),
    json.dumps({"type": "run", "message": "nul \u0000 here"}),
    json.dumps({"type": "cancel"}),
    json.dumps({"type": "cancel", "run_id": "no-such-run"}),
    b"\x00binary",
]


@pytest.fixture(autouse=True)
async def _fresh_channel_layer() -> AsyncIterator[None]:
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        await layer.flush()
    yield


@pytest.fixture
def alice_cookie(alice: Any) -> str:
    client = Client()
    client.force_login(alice)
    return f"sessionid={client.cookies['sessionid'].value}"


@pytest.fixture
def alice_session(alice: Any) -> str:
    return session_services.session_create(user=alice, agent="support").id


async def error_answers(session_id: str, *headers: tuple[bytes, bytes]) -> list[dict[str, Any]]:
    """The error frame that answers each of BAD_FRAMES on one socket."""
    socket = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/", headers=[ORIGIN, HOST, *headers])
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    answers = []
    for frame in BAD_FRAMES:
        if isinstance(frame, bytes):
            await socket.send_to(bytes_data=frame)
        else:
            await socket.send_to(text_data=frame)
        answer = await socket.receive_json_from(timeout=TIMEOUT)
        assert answer["type"] == "error", frame
        answers.append(answer["error"])
    await socket.disconnect()
    return answers


async def test_the_socket_answers_bad_frames_in_chinese_with_the_same_codes_and_fields(
    alice_cookie: str, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("unused"))
    cookie = (b"cookie", alice_cookie.encode())
    english = await error_answers(alice_session, cookie, EN_HEADER)
    chinese = await error_answers(alice_session, cookie, ZH_HEADER)
    assert [(e["code"], e.get("field")) for e in chinese] == [(e["code"], e.get("field")) for e in english]
    for en, zh in zip(english, chinese, strict=True):
        assert not CJK.search(en["message"]), en
        assert CJK.search(zh["message"]), (en, zh)
    by_code = {e["code"]: e["message"] for e in chinese}
    assert by_code["unknown_agent"] == "未找到智能体 'nobody'"
    assert by_code["not_found"] == "在这个会话中未找到运行 'no-such-run'"
    assert "message 在位置 4 含有 NUL 字符（U+0000）" in [e["message"] for e in chinese]


async def test_the_language_cookie_wins_over_accept_language_on_the_socket(
    alice_cookie: str, alice_session: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("unused"))
    chinese_cookie = (b"cookie", f"{alice_cookie}; django_language=zh-hans".encode())
    english_cookie = (b"cookie", f"{alice_cookie}; django_language=en".encode())
    assert CJK.search((await error_answers(alice_session, chinese_cookie, EN_HEADER))[0]["message"])
    assert not CJK.search((await error_answers(alice_session, english_cookie, ZH_HEADER))[0]["message"])


def test_an_unknown_agent_is_reported_in_chinese_over_rest_with_the_same_code(alice_api: Any) -> None:
    body = {"message": "hi", "agent": "nobody"}
    english = alice_api.post("/api/runs/", body, format="json", HTTP_ACCEPT_LANGUAGE="en")
    chinese = alice_api.post("/api/runs/", body, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")
    assert english.status_code == chinese.status_code == 400
    assert english.json()["error"] == {"code": "unknown_agent", "message": "agent 'nobody' not found", "field": "agent"}
    assert chinese.json()["error"] == {"code": "unknown_agent", "message": "未找到智能体 'nobody'", "field": "agent"}


CORE_ERRORS = [
    AgentNotFoundError("ghost"),
    DuplicateRequestError("req-1"),
    TooManyRunsError(active=3, limit=3),
    EventLimitError(500),
    RunNotActiveError("r_9"),
    QueueFullError("r_9", limit=20),
]


def test_every_core_error_text_has_a_code_and_a_chinese_translation() -> None:
    assert {e.error_code for e in CORE_ERRORS} == set(CORE_TEXTS)
    for exc in CORE_ERRORS:
        with translation.override("en"):
            assert core_error_text(exc) == str(exc)  # English: the core's own text
            assert translate_text(str(exc)) == str(exc)
        with translation.override("zh-hans"):
            chinese = core_error_text(exc)
            assert CJK.search(chinese), exc
            assert translate_text(str(exc)) == chinese  # the socket's way: from the English text
        for value in exc.params.values():
            assert str(value) in chinese


def test_a_text_without_a_template_and_frames_that_are_not_errors_stay_as_they_are() -> None:
    with translation.override("zh-hans"):
        assert translate_text("something nobody wrote a template for") == "something nobody wrote a template for"
    delta = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": "run 'x' already ended"})
    assert localize_frame_text(delta, "zh-hans") == delta
    error = json.dumps(
        {"type": "error", "error": {"code": "run_not_active", "message": "run 'x' already ended", "field": "run_id"}}
    )
    assert json.loads(localize_frame_text(error, "zh-hans"))["error"] == {
        "code": "run_not_active",
        "message": "运行 'x' 已经结束",
        "field": "run_id",
    }


def test_a_run_error_from_core_reaches_the_socket_in_chinese_with_its_code() -> None:
    from ag_ui.core import RunErrorEvent

    # As the AG-UI translator turns a max-steps error event into the stream's last frame.
    frame = RunErrorEvent(
        message="the agent used all 3 steps without a final answer", code="max_steps_exceeded"
    ).model_dump_json(by_alias=True)
    assert json.loads(localize_frame_text(frame, "zh-hans")) == {
        "type": "RUN_ERROR",
        "code": "max_steps_exceeded",
        "message": "智能体用完了全部 3 步，仍没有最终回答",
    }
    assert localize_frame_text(frame, "en") == frame


def test_a_failed_runs_record_gives_its_error_in_chinese_over_rest(alice: Any, alice_api: Any) -> None:
    from django.utils import timezone

    from runs import models as run_orm

    session = session_services.session_create(user=alice, agent="support")
    error = {"type": "max_steps_exceeded", "message": "the agent used all 3 steps without a final answer", "code": None}
    run_orm.Run.objects.create(
        id="r-failed",
        app=session.app,
        user=alice,
        session_id=session.id,
        agent="support",
        request_id="q-1",
        status="failed",
        created_at=timezone.now(),
        error=error,
    )
    english = alice_api.get("/api/runs/r-failed/", HTTP_ACCEPT_LANGUAGE="en")
    chinese = alice_api.get("/api/runs/r-failed/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")
    assert english.status_code == chinese.status_code == 200
    assert english.json()["error"] == error
    assert chinese.json()["error"] == {**error, "message": "智能体用完了全部 3 步，仍没有最终回答"}
