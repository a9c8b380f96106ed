"""Issue 20, item 1 on AG-UI: a run with `forwardedProps.outputSchema` shows the client only
its valid answer, and RUN_FINISHED carries the validated value as `result`.

A refused answer (and the agent's feedback asking for the corrected JSON) stays in the
ledger, as the retry needs it, but is neither streamed live nor in a history snapshot.
Through `POST /agui/<agent>` with the scripted OpenAI-compatible upstream."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.protocols.agui import messages_snapshot
from tests.runs.test_agui_endpoint import alice_token, ledger, post, read_all, run_input, types  # noqa: F401
from tests.support.openai_asgi import agents_on
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"host": {"type": "string"}, "expired": {"type": "boolean"}},
    "required": ["host", "expired"],
    "additionalProperties": False,
}
GOOD = {"host": "payments.internal.example.com", "expired": True}
REFUSED = '{"host": 5}'


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def _structured(thread_id: str) -> dict[str, Any]:
    body = run_input(thread_id, {"id": "u1", "role": "user", "content": "Is the payments certificate expired?"})
    return {**body, "forwardedProps": {"outputSchema": SCHEMA}}


async def test_agui_shows_only_the_valid_structured_answer_and_run_finished_carries_its_value(
    alice_token: str,  # noqa: F811
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
) -> None:
    openai_server.script(REFUSED, json.dumps(GOOD))
    agents_on(openai_server, use_model)

    response = await post("/agui/support", _structured("agui-output"), alice_token)
    assert response.status_code == 200, response.content
    events = await read_all(response)
    openai_server.assert_consumed()
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert json.loads(text) == GOOD  # the refused answer is not shown before it
    assert types(events).count("TEXT_MESSAGE_START") == 1
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["result"] == GOOD

    # The ledger keeps the refused answer and the feedback (the retry was built from them);
    # a history snapshot leaves them out, as the live stream did.
    stored = await ledger("agui-output")
    assert any("output_invalid" in e.extensions for e in stored)
    assert any("output_feedback" in e.extensions for e in stored)
    snapshot = messages_snapshot(stored)
    assert [(m.role, m.content) for m in snapshot.messages] == [
        ("user", "Is the payments certificate expired?"),
        ("assistant", json.dumps(GOOD)),
    ]


async def test_agui_run_without_an_output_schema_finishes_without_a_result(
    alice_token: str,  # noqa: F811
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
) -> None:
    openai_server.script("It expires on Friday.")
    agents_on(openai_server, use_model)
    response = await post("/agui/support", run_input("agui-plain"), alice_token)
    events = await read_all(response)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1].get("result") is None
    openai_server.assert_consumed()
