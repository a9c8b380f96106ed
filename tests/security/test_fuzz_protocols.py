"""Fuzzing the protocol surfaces (issue 11.2) with hypothesis: websocket frames, AG-UI
`RunAgentInput` bodies, OpenAI-compatible requests and A2A JSON-RPC messages.

Each property sends generated input and asserts the surface answers in its own error
format, never a 500, never a traceback, never a hang (every call has a timeout). The
inputs are shaped to get past JSON parsing most of the time (objects with the protocol's
field names and wrong values), where the interesting validation lives. Bounded and
derandomized for `make test` (`FUZZ_MAX_EXAMPLES`, default 15); `make fuzz` runs more.

Hypothesis generates the examples (derandomized: the same ones every run) and the test
sends them in turn on its own event loop; a failure names the input. One test per surface:
the database of a transactional test is flushed per test, which costs more than examples.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app import services as session_services
from tests.security.support import a2a, assert_clean, open_socket, post_json

pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "15"))
SETTINGS = hypothesis_settings(
    max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
CALL_TIMEOUT_S = 10.0

# Text PostgreSQL cannot store and UTF-8 cannot encode (issue 17): every surface refuses it
# with a 400 naming the field. `json.dumps` sends a lone surrogate as a `\u` escape.
unstorable = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\udbff\x00"])
texts = st.text(max_size=20) | unstorable
scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of the protocol's field names, each a plausible or an arbitrary value."""
    return st.fixed_dictionaries({}, optional={name: strategy | json_values for name, strategy in fields.items()})


def nested(depth: int, inner: str = "") -> str:
    """JSON text nested `depth` levels, alternating arrays and objects."""
    opening = "".join("[" if level % 2 else '{"a":' for level in range(depth))
    closing = "".join("]" if level % 2 else "}" for level in reversed(range(depth)))
    return opening + (inner or "1") + closing


# Deeper than any surface accepts (64), up to the depth that used to end in a RecursionError.
deep_json = st.integers(65, 1200).map(nested)


def bodies(objects: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Mostly the shaped objects as JSON; sometimes any JSON, deep JSON, or bytes that are not JSON."""
    return st.one_of(
        objects.map(lambda v: json.dumps(v).encode()),
        json_values.map(lambda v: json.dumps(v).encode()),
        deep_json.map(str.encode),
        st.binary(max_size=40),
    )


def poisoned(body: dict[str, Any], *path: str | int) -> list[bytes]:
    """`body` with the value at `path` made deep JSON, then a NUL, then a lone surrogate."""
    bodies_ = []
    for poison in ("__DEEP__", "a\x00b", "\ud800"):
        copy = json.loads(json.dumps(body))
        target = copy
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = poison
        text = json.dumps(copy)
        bodies_.append(text.replace('"__DEEP__"', nested(1000)).encode())
    return bodies_


# -- websocket frames --------------------------------------------------------------------------------

frames = st.one_of(
    st.text(min_size=1, max_size=40),  # an empty text frame cannot be sent at all
    json_values.map(json.dumps),
    deep_json,
    shaped(
        {
            "type": st.sampled_from(["run", "cancel", "RUN", ""]),
            "message": st.text(max_size=5),
            "agent": st.text(max_size=5),
            "run_id": st.text(max_size=5),
        }
    ).map(json.dumps),
)


async def test_any_websocket_frame_gets_a_frame_back_and_the_socket_stays_open(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    # A frame that happens to be a valid run gets a real, instant answer.
    use_model(ScriptedModel(steps=[ScriptStep.answer("ok")] * 1000))
    session = await sync_to_async(session_services.session_create)(user=alice, agent="support")
    socket = await open_socket(f"/ws/sessions/{session.id}/", alice_token)
    sent: list[str] = []

    @SETTINGS
    @given(frame=frames)
    @example(frame=nested(1000))
    @example(frame=json.dumps({"type": "run", "message": "a\x00b"}))
    @example(frame=json.dumps({"type": "run", "message": "x\ud800"}))
    @example(frame=json.dumps({"type": "cancel", "run_id": "\x00"}))
    @example(frame=json.dumps({"type": "run", "message": "ok", "agent": nested(70)}))
    def collect(frame: str) -> None:
        sent.append(frame)

    collect()
    for frame in sent:
        await socket.send_to(text_data=frame)
        answer = await socket.receive_json_from(timeout=CALL_TIMEOUT_S)
        while answer["type"] not in ("error", "run.accepted"):  # events of a run a frame started
            answer = await socket.receive_json_from(timeout=CALL_TIMEOUT_S)
        if answer["type"] == "error":
            assert set(answer["error"]) <= {"code", "message", "field"} and answer["error"]["message"], answer
            assert "Traceback" not in answer["error"]["message"]
    # Still open: a well-formed run is still served after all that.
    await socket.send_to(text_data=json.dumps({"type": "run", "message": "still there?"}))
    answer = await socket.receive_json_from(timeout=CALL_TIMEOUT_S)
    while answer["type"] != "run.accepted":
        answer = await socket.receive_json_from(timeout=CALL_TIMEOUT_S)
    await socket.disconnect()


# -- HTTP protocols ------------------------------------------------------------------------------------

messages = st.lists(
    shaped(
        {
            "id": st.text(max_size=5),
            "role": st.sampled_from(["user", "tool", "assistant", "x"]),
            "content": st.text(max_size=10),
            "toolCallId": st.text(max_size=5),
        }
    ),
    max_size=3,
)
agui_inputs = shaped(
    {
        "threadId": st.text(max_size=70),
        "runId": st.text(max_size=5),
        "messages": messages,
        "state": json_values,
        "tools": st.lists(json_values, max_size=2),
        "context": st.lists(json_values, max_size=2),
        "forwardedProps": json_values,
    }
)
openai_requests = shaped(
    {
        "model": st.sampled_from(["support", "nope", ""]),
        "messages": st.lists(
            shaped(
                {
                    "role": st.sampled_from(["user", "system", "developer", "assistant", "tool"]),
                    "content": st.text(max_size=10) | st.lists(json_values, max_size=2),
                }
            ),
            max_size=3,
        ),
        "stream": st.booleans(),
        "n": st.integers(0, 3),
        "tools": st.lists(json_values, max_size=1),
        "tool_choice": json_values,
        "response_format": json_values,
        "stream_options": json_values,
    }
)
a2a_messages = shaped(
    {
        "jsonrpc": st.just("2.0"),
        "id": st.integers(0, 9) | st.text(max_size=4),
        "method": st.sampled_from(
            ["SendMessage", "GetTask", "CancelTask", "ListTasks", "message/send", "tasks/get", "Nope"]
        ),
        "params": shaped(
            {
                "message": shaped(
                    {
                        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "x"]),
                        "messageId": st.text(max_size=5),
                        "contextId": st.text(max_size=70),
                        "parts": st.lists(shaped({"text": st.text(max_size=10)}), max_size=2),
                    }
                ),
                "id": st.text(max_size=8),
            }
        ),
    }
)


def _agui_error(response: Any) -> None:
    if response.status_code != 200:
        error = response.json()["error"]
        assert response.status_code in (400, 404, 409, 413, 422, 429) and error["code"] and error["message"], error
        if response.status_code == 422:
            assert "field" in error or "body must be" in error["message"], error


def _openai_error(response: Any) -> None:
    if response.status_code != 200:
        error = response.json()["error"]
        assert {"message", "type", "param", "code"} <= set(error), error


def _a2a_error(response: Any) -> None:
    body = response.json()
    if "error" in body:
        assert isinstance(body["error"]["code"], int) and body["error"]["message"], body


AGUI_VALID = {
    "threadId": "t-fuzz",
    "runId": "r1",
    "state": {},
    "tools": [],
    "context": [],
    "forwardedProps": {},
    "messages": [{"id": "u1", "role": "user", "content": "hi"}],
}
OPENAI_VALID = {"model": "support", "messages": [{"role": "user", "content": "hi"}]}
A2A_VALID = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {
        "message": {"role": "ROLE_USER", "messageId": "m1", "contextId": "c-fuzz", "parts": [{"text": "hi"}]},
        "metadata": {"k": "v"},
    },
}
# Deep JSON, a NUL and a lone surrogate in the fields each surface stores (issue 17): always
# sent, besides what hypothesis generates.
ALWAYS = {
    "agui": [
        nested(1000).encode(),
        *poisoned(AGUI_VALID, "messages", 0, "content"),
        *poisoned(AGUI_VALID, "threadId"),
        *poisoned(AGUI_VALID, "state"),
    ],
    "openai": [
        nested(1000).encode(),
        *poisoned(OPENAI_VALID, "messages", 0, "content"),
        *poisoned(OPENAI_VALID, "model"),
    ],
    "a2a": [
        nested(1000).encode(),
        *poisoned(A2A_VALID, "params", "message", "parts", 0, "text"),
        *poisoned(A2A_VALID, "params", "message", "contextId"),
        *poisoned(A2A_VALID, "params", "metadata", "k"),
    ],
}

CASES = [
    ("agui", agui_inputs, lambda raw, token: post_json("/agui/support", raw, token), _agui_error),
    ("openai", openai_requests, lambda raw, token: post_json("/v1/chat/completions", raw, token), _openai_error),
    ("a2a", a2a_messages, lambda raw, token: a2a("support", raw, token), _a2a_error),
]


@pytest.mark.parametrize(("name", "objects", "send", "check"), CASES, ids=[c[0] for c in CASES])
async def test_generated_requests_get_the_protocols_error_format_never_a_500(
    name: str, objects: Any, send: Any, check: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel(steps=[ScriptStep.answer("ok")] * 1000))
    generated: list[bytes] = []

    @SETTINGS
    @given(raw=bodies(objects))
    def collect(raw: bytes) -> None:
        generated.append(raw)

    collect()
    for raw in [*ALWAYS[name], *generated]:
        response = await asyncio.wait_for(send(raw, alice_token), CALL_TIMEOUT_S)
        assert_clean(response)
        if raw in ALWAYS[name]:  # refused before anything runs, not failed inside
            assert response.status_code == 400, (raw[:80], response.status_code, response.text[:300])
        assert response.headers["Content-Type"].startswith(("application/json", "text/event-stream")), response.headers
        if response.headers["Content-Type"].startswith("application/json"):
            check(response)
