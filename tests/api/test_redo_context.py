"""What the model sees after a redo (issue 21): a regenerated or edited turn leaves the
projection. The upstream (a scripted OpenAI-compatible server) receives no trace of the
replaced answer after a regenerate, nor of the original text after an edit, while the
ledger keeps every event and the context inspector's manifest calls them `superseded`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def ask(client: Any, message: str, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "wait": True, "agent": "general"}
    if session_id:
        body["session_id"] = session_id
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed", run
    return run


def finished(client: Any, run: dict[str, Any], timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        current = client.get(f"/api/runs/{run['id']}/").json()
        if current["ended_at"] or time.monotonic() > deadline:
            assert current["status"] == "completed", current
            return current
        time.sleep(0.05)


def conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's history: (role, text) of every message but the system ones."""
    return [(m["role"], m.get("content") or "") for m in request["messages"] if m["role"] != "system"]


def ledger_texts(client: Any, session_id: str) -> list[str]:
    events = client.get(f"/api/sessions/{session_id}/events/", {"limit": 500}).json()["results"]
    return [e.get("text") or "" for e in events if e["role"] in ("user", "assistant")]


def last_manifest(client: Any, session_id: str) -> dict[str, Any]:
    response = client.get(f"/api/sessions/{session_id}/context/")
    assert response.status_code == 200, response.content
    calls = response.json()["calls"]
    assert calls and calls[-1]["manifest"] is not None
    return calls[-1]["manifest"]


def test_after_a_regenerate_the_upstream_sees_no_trace_of_the_replaced_answer(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        "ANSWER-ONE: the router rebooted.",
        "ANSWER-TWO: a certificate expired.",
        "ANSWER-THREE: the tunnel key rotated.",
        "You are welcome.",
    )
    agents_on(openai_server, use_model)
    session_id = ask(alice_api, "Why is the VPN down?")["session_id"]

    regenerated = alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json")
    assert regenerated.status_code == 201, regenerated.content
    finished(alice_api, regenerated.json())
    second = openai_server.requests[-1]
    assert "ANSWER-ONE" not in json.dumps(second)
    assert conversation(second) == [("user", "Why is the VPN down?")]

    # A regenerate of the regeneration (a chain): neither earlier answer reaches the model.
    again = alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json")
    assert again.status_code == 201, again.content
    finished(alice_api, again.json())
    third = openai_server.requests[-1]
    assert "ANSWER-ONE" not in json.dumps(third) and "ANSWER-TWO" not in json.dumps(third)
    assert conversation(third) == [("user", "Why is the VPN down?")]

    # The next plain turn continues from the newest version only.
    ask(alice_api, "Thanks!", session_id)
    fourth = openai_server.requests[-1]
    assert "ANSWER-ONE" not in json.dumps(fourth) and "ANSWER-TWO" not in json.dumps(fourth)
    assert conversation(fourth) == [
        ("user", "Why is the VPN down?"),
        ("assistant", "ANSWER-THREE: the tunnel key rotated."),
        ("user", "Thanks!"),
    ]
    openai_server.assert_consumed()

    # The ledger keeps every answer (append-only); the manifest says why two turns are absent.
    texts = ledger_texts(alice_api, session_id)
    assert texts[:2] == ["Why is the VPN down?", "ANSWER-ONE: the router rebooted."]
    assert "ANSWER-TWO: a certificate expired." in texts
    manifest = last_manifest(alice_api, session_id)
    assert manifest["counts"].get("superseded", 0) >= 4 and manifest["coverage"] == 1.0
    assert manifest["ranges"][0][:2] == ["superseded", 1]


def test_after_an_edit_the_upstream_sees_no_trace_of_the_original_text_and_later_turns_stay(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("About INC-1: a disk filled.", "About INC-2: DNS.", "About INC-3: a bad deploy.")
    agents_on(openai_server, use_model)
    session_id = ask(alice_api, "What happened in INC-1?")["session_id"]
    ask(alice_api, "And INC-2?", session_id)
    events = alice_api.get(f"/api/sessions/{session_id}/events/", {"limit": 500}).json()["results"]
    first = next(e["id"] for e in events if e["role"] == "user")

    edited = alice_api.post(
        f"/api/sessions/{session_id}/events/{first}/edit/",
        {"message": "What happened in INC-3?"},
        format="json",
    )
    assert edited.status_code == 201, edited.content
    finished(alice_api, edited.json())
    openai_server.assert_consumed()

    sent = openai_server.requests[-1]
    assert "INC-1" not in json.dumps(sent)
    # Only the edited message's turn is replaced: the turn after it stays, as the chat shows it.
    assert conversation(sent) == [
        ("user", "And INC-2?"),
        ("assistant", "About INC-2: DNS."),
        ("user", "What happened in INC-3?"),
    ]
    assert ledger_texts(alice_api, session_id)[:2] == ["What happened in INC-1?", "About INC-1: a disk filled."]
    manifest = last_manifest(alice_api, session_id)
    assert manifest["ranges"][0][:2] == ["superseded", 1] and manifest["coverage"] == 1.0
