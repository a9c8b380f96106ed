"""Issue 5, done when: in the demo, a fact told in one session is found by `memory_search`
in a new session of the same user, and by no other user."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What do we run in production? Search your memory."


def run(client: Any, message: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/runs/", {"message": message, "wait": True, **extra}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "completed", response.json()
    return response.json()


def memory_search_results(client: Any, session_id: str) -> list[list[str]]:
    """What each `memory_search` call of the session returned to the model."""
    events = client.get(f"/api/sessions/{session_id}/events/", {"limit": 200}).json()["results"]
    calls = {c["id"] for e in events for c in e.get("tool_calls") or [] if c["name"] == "memory_search"}
    return [
        [m["memory"] for m in json.loads(e["text"])["memories"]]
        for e in events
        if e["role"] == "tool" and e.get("tool_call_id") in calls
    ]


def test_a_fact_told_in_one_session_is_found_in_a_new_session_of_the_same_user_only(
    alice_api: Any, bob_api: Any, eager_celery: None
) -> None:
    told = run(alice_api, "Hi, my name is Alice and we run Go in production behind nginx.")

    asked = run(alice_api, QUESTION)
    assert asked["session_id"] != told["session_id"]
    assert memory_search_results(alice_api, asked["session_id"]) == [["Runs Go in production"]]
    assert "Runs Go in production" in asked["answer"]

    bobs = run(bob_api, QUESTION)
    assert memory_search_results(bob_api, bobs["session_id"]) == [[]]
    assert "Go in production" not in bobs["answer"]
