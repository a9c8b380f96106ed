"""Pins by the user over REST (issue 24): recorded with their source and source event,
refused for anything but the user's own messages, and carried by the next request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel

pytestmark = pytest.mark.django_db(transaction=True)


def _run(client: Any, message: str, session_id: str | None = None) -> str:
    body: dict[str, Any] = {"message": message, "wait": True, **({"session_id": session_id} if session_id else {})}
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["session_id"]


def _events(client: Any, session_id: str) -> list[dict[str, Any]]:
    return client.get(f"/api/sessions/{session_id}/events/").json()["results"]


def test_the_user_pins_and_unpins_a_message_and_the_next_request_carries_it(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of("Noted.", "Sure.")
    use_model(model)
    session_id = _run(alice_api, "Keep the release notes in Portuguese for the whole project.")
    message, answer = [e for e in _events(alice_api, session_id) if e["role"] in ("user", "assistant")][:2]
    assert alice_api.get(f"/api/sessions/{session_id}/pins/").json() == {"pins": []}  # the extractor let it be

    pinned = alice_api.post(f"/api/sessions/{session_id}/pins/", {"event_id": message["id"]}, format="json")
    assert pinned.status_code == 201, pinned.content
    [record] = pinned.json()["pins"]
    assert record["source"] == "user" and record["source_event_id"] == message["id"]
    assert record["text"] == "Keep the release notes in Portuguese for the whole project."

    _run(alice_api, "What next?", session_id)
    assert "Keep the release notes in Portuguese" in model.requests[-1].messages[1].content

    refused = alice_api.post(f"/api/sessions/{session_id}/pins/", {"event_id": answer["id"]}, format="json")
    assert refused.status_code == 400 and "not a message of the user" in refused.json()["error"]["message"]
    assert (
        bob_api.post(f"/api/sessions/{session_id}/pins/", {"event_id": message["id"]}, format="json").status_code == 404
    )

    unpinned = alice_api.delete(f"/api/sessions/{session_id}/pins/", {"event_id": message["id"]}, format="json")
    assert unpinned.status_code == 200
    assert [r.get("superseded_by") is not None for r in unpinned.json()["pins"]] == [True]
    assert (
        alice_api.delete(f"/api/sessions/{session_id}/pins/", {"event_id": message["id"]}, format="json").status_code
        == 400
    )
