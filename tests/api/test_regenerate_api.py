"""Redo a turn (issue 21, chat features): `POST /api/sessions/<id>/regenerate/` answers the
last user message again and `POST /api/sessions/<id>/events/<event id>/edit/` resends a
user message with new text. Both append a new turn: the ledger's earlier events stay as
they were, and the new user event names the one it redoes (`regenerates`, `edit_of`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep

pytestmark = pytest.mark.django_db(transaction=True)


def ask(client: Any, message: str, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "wait": True}
    if session_id:
        body["session_id"] = session_id
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed", run
    return run


def ledger(client: Any, session_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/sessions/{session_id}/events/", {"limit": 500})
    assert response.status_code == 200, response.content
    return [e for e in response.json()["results"] if e["role"] in ("user", "assistant")]


def finished(client: Any, run_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/api/runs/{run_id}/").json()
        if run["ended_at"] or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> None:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    if field is not None:
        assert error.get("field") == field


def system_text(model: ScriptedModel) -> str:
    """The instruction of the model's newest request."""
    return "\n".join(m.content for m in model.requests[-1].messages if m.role == "system")


def test_regenerate_answers_the_last_message_again_in_a_new_turn(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of("first answer", "second answer", "third answer")
    use_model(model)
    session_id = ask(alice_api, "Why is the VPN down?")["session_id"]
    before = ledger(alice_api, session_id)

    response = alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json")
    assert response.status_code == 201, response.content
    redo = response.json()
    original = before[0]["id"]
    assert redo["regenerates"] == original and redo["session_id"] == session_id
    assert finished(alice_api, redo["id"])["status"] == "completed"

    events = ledger(alice_api, session_id)
    assert events[:2] == before  # append-only: the earlier turn is untouched
    assert [(e["role"], e.get("text")) for e in events[2:]] == [
        ("user", "Why is the VPN down?"),
        ("assistant", "second answer"),
    ]
    assert events[2]["id"] == redo["turn_event_id"] and events[2]["regenerates"] == original
    # The model no longer sees the regenerated turn (runs.core.context.projection).
    assert [m.content for m in model.requests[-1].messages if m.role != "system"] == ["Why is the VPN down?"]
    assert "first answer" not in system_text(model)

    # Again: the newest user message is the regeneration, and it is the one named.
    again = alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json").json()
    assert again["regenerates"] == redo["turn_event_id"]
    finished(alice_api, again["id"])
    assert ledger(alice_api, session_id)[-1]["text"] == "third answer"


def test_a_redo_runs_on_the_agent_that_answered_the_message(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("from general", "again from general", "edited, from general"))
    session_id = alice_api.post("/api/sessions/", {"agent": "support"}, format="json").json()["id"]
    first = alice_api.post(
        "/api/runs/",
        {"message": "hello", "session_id": session_id, "agent": "general", "wait": True},
        format="json",
    ).json()
    assert first["agent"] == "general"
    regenerated = alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json").json()
    assert regenerated["agent"] == "general"
    finished(alice_api, regenerated["id"])
    message = ledger(alice_api, session_id)[0]["id"]
    edited = alice_api.post(
        f"/api/sessions/{session_id}/events/{message}/edit/", {"message": "hi"}, format="json"
    ).json()
    assert edited["agent"] == "general"
    finished(alice_api, edited["id"])
    assert [e["author"] for e in ledger(alice_api, session_id)] == ["user", "general"] * 3


def test_regenerate_in_a_chat_without_a_message_is_a_400(alice_api: Any) -> None:
    session_id = alice_api.post("/api/sessions/", {"title": "empty"}, format="json").json()["id"]
    assert_error(alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json"), 400, "nothing_to_regenerate")
    assert ledger(alice_api, session_id) == []


def test_regenerate_and_edit_while_a_reply_runs_are_a_409(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("quick", ScriptStep.answer("slow answer", delay_s=1.5)))
    session_id = ask(alice_api, "one")["session_id"]
    first = ledger(alice_api, session_id)[0]["id"]
    running = alice_api.post("/api/runs/", {"message": "two", "session_id": session_id}, format="json").json()

    assert_error(alice_api.post(f"/api/sessions/{session_id}/regenerate/", format="json"), 409, "run_active")
    edit = alice_api.post(f"/api/sessions/{session_id}/events/{first}/edit/", {"message": "uno"}, format="json")
    assert_error(edit, 409, "run_active")
    assert finished(alice_api, running["id"])["status"] == "completed"
    assert [e.get("text") for e in ledger(alice_api, session_id)] == ["one", "quick", "two", "slow answer"]


def test_another_users_chat_cannot_be_regenerated_or_edited(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("answer"))
    session_id = ask(alice_api, "mine")["session_id"]
    first = ledger(alice_api, session_id)[0]["id"]
    assert_error(bob_api.post(f"/api/sessions/{session_id}/regenerate/", format="json"), 404, "not_found")
    edit = bob_api.post(f"/api/sessions/{session_id}/events/{first}/edit/", {"message": "theirs"}, format="json")
    assert_error(edit, 404, "not_found")
    assert len(ledger(alice_api, session_id)) == 2


def test_edit_resends_a_message_with_new_text_as_a_new_turn(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    model = ScriptedModel.of("about INC-1", "about INC-2", "about INC-3", "you are welcome")
    use_model(model)
    session_id = ask(alice_api, "What happened in INC-1?")["session_id"]
    ask(alice_api, "And INC-2?", session_id)
    before = ledger(alice_api, session_id)
    first = before[0]["id"]

    response = alice_api.post(
        f"/api/sessions/{session_id}/events/{first}/edit/",
        {"message": "What happened in INC-3?"},
        format="json",
    )
    assert response.status_code == 201, response.content
    redo = response.json()
    assert redo["edit_of"] == first
    finished(alice_api, redo["id"])

    events = ledger(alice_api, session_id)
    assert events[:4] == before
    assert [(e["role"], e.get("text")) for e in events[4:]] == [
        ("user", "What happened in INC-3?"),
        ("assistant", "about INC-3"),
    ]
    assert events[4]["edit_of"] == first and events[4]["id"] == redo["turn_event_id"]
    assert "regenerates" not in events[4]
    # The model got the edited text as the turn it answers, and no longer the original's turn.
    assert model.requests[-1].messages[-1].content == "What happened in INC-3?"
    assert not any("INC-1" in m.content for m in model.requests[-1].messages)
    ask(alice_api, "Thanks", session_id)
    assert [m.content for m in model.requests[-1].messages if m.role != "system"][-3:] == [
        "What happened in INC-3?",
        "about INC-3",
        "Thanks",
    ]


def test_only_a_message_you_sent_can_be_edited(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("an answer"))
    session_id = ask(alice_api, "question")["session_id"]
    answer = ledger(alice_api, session_id)[1]["id"]
    edit = alice_api.post(f"/api/sessions/{session_id}/events/{answer}/edit/", {"message": "x"}, format="json")
    assert_error(edit, 400, "not_editable", "event_id")
    missing = alice_api.post(f"/api/sessions/{session_id}/events/nope/edit/", {"message": "x"}, format="json")
    assert_error(missing, 404, "not_found", "event_id")
    assert len(ledger(alice_api, session_id)) == 2


@pytest.mark.parametrize(
    "body", [{}, {"message": ""}, {"message": "   "}, {"message": 7}, {"message": None}, {"message": ["a"]}]
)
def test_a_bad_edited_text_is_a_400_naming_the_field(
    alice_api: Any, use_model: Callable[[Model], None], body: dict[str, Any]
) -> None:
    use_model(ScriptedModel.of("an answer"))
    session_id = ask(alice_api, "question")["session_id"]
    first = ledger(alice_api, session_id)[0]["id"]
    response = alice_api.post(f"/api/sessions/{session_id}/events/{first}/edit/", body, format="json")
    assert_error(response, 400, "invalid", "message")
    assert len(ledger(alice_api, session_id)) == 2


def test_an_edited_text_over_the_message_limit_is_a_413(
    alice_api: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    use_model(ScriptedModel.of("an answer"))
    session_id = ask(alice_api, "question")["session_id"]
    first = ledger(alice_api, session_id)[0]["id"]
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 10
    response = alice_api.post(f"/api/sessions/{session_id}/events/{first}/edit/", {"message": "x" * 11}, format="json")
    assert_error(response, 413, "message_too_large", "message")
