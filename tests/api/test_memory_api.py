"""REST API for memories: one's own only, with search, dedupe and the per-user limit."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


def create(client: Any, **body: Any) -> Any:
    return client.post("/api/memories/", body, format="json")


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def test_create_read_edit_and_delete_a_memory(alice_api: Any) -> None:
    created = create(alice_api, memory="Runs Go in production", topics=["stack"])
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["action"] == "added"
    memory = body["memory"]
    assert (memory["memory"], memory["kind"], memory["topics"]) == ("Runs Go in production", "fact", ["stack"])
    url = f"/api/memories/{memory['id']}/"
    assert alice_api.get(url).json()["memory"] == "Runs Go in production"
    edited = alice_api.patch(url, {"memory": "Runs Rust in production", "topics": ["stack", "rust"]}, format="json")
    assert edited.status_code == 200, edited.content
    assert (edited.json()["memory"], edited.json()["topics"]) == ("Runs Rust in production", ["stack", "rust"])
    assert alice_api.delete(url).status_code == 204
    assert_error(alice_api.get(url), 404, "not_found")
    assert_error(alice_api.delete(url), 404, "not_found")


def test_an_episode_keeps_its_time_participants_and_location(alice_api: Any) -> None:
    created = create(
        alice_api,
        memory="Ran the Lisbon half marathon",
        kind="episode",
        event_time="2024-03-10T09:00:00Z",
        participants=["Bob"],
        location="Lisbon",
    )
    assert created.status_code == 201, created.content
    memory = created.json()["memory"]
    assert (memory["event_time"], memory["participants"], memory["location"]) == ("2024-03-10", ["Bob"], "Lisbon")
    assert_error(create(alice_api, memory="Went hiking", kind="episode"), 400, "invalid")


def test_creating_a_duplicate_reports_skipped_and_a_similar_one_updated(alice_api: Any) -> None:
    first = create(alice_api, memory="Prefers dark mode in the editor").json()["memory"]
    again = create(alice_api, memory="prefers dark mode in the editor")
    assert again.status_code == 200 and again.json()["action"] == "skipped"
    similar = create(alice_api, memory="Prefers light mode in the editor")
    assert similar.status_code == 200 and similar.json()["action"] == "updated"
    assert similar.json()["memory"]["id"] == first["id"]
    assert alice_api.get("/api/memories/").json()["count"] == 1


def test_list_searches_with_q_and_filters_by_kind(alice_api: Any) -> None:
    create(alice_api, memory="Runs Go in production")
    create(alice_api, memory="Has a golden retriever named Max")
    create(alice_api, memory="Deployed Go 1.22 to production", kind="episode", event_time="2024-04-02T00:00:00Z")
    found = alice_api.get("/api/memories/", {"q": "go production"}).json()["results"]
    assert {m["memory"] for m in found} == {"Runs Go in production", "Deployed Go 1.22 to production"}
    assert all(0 < m["score"] <= 1 for m in found)
    episodes = alice_api.get("/api/memories/", {"q": "go production", "kind": "episode"}).json()["results"]
    assert [m["memory"] for m in episodes] == ["Deployed Go 1.22 to production"]
    listed = alice_api.get("/api/memories/", {"kind": "fact", "limit": 1}).json()
    assert len(listed["results"]) == 1 and listed["count"] == 3
    assert_error(alice_api.get("/api/memories/", {"kind": "rumour"}), 400, "invalid")
    assert_error(alice_api.get("/api/memories/", {"limit": 0}), 400, "invalid")


@override_settings(AGENTSITE_MEMORY_MAX_PER_USER=2)
def test_past_the_per_user_limit_creation_is_refused_with_409(alice_api: Any) -> None:
    create(alice_api, memory="Likes tea")
    create(alice_api, memory="Owns a bicycle")
    error = assert_error(create(alice_api, memory="Speaks Portuguese"), 409, "memory_limit")
    assert "2 memories" in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"memory": ""},
        {"memory": 42},
        {"memory": "x", "kind": "rumour"},
        {"memory": "x", "topics": "stack"},
        {"memory": "x", "event_time": "yesterday"},
    ],
)
def test_malformed_bodies_are_refused_with_400(alice_api: Any, body: dict[str, Any]) -> None:
    assert_error(alice_api.post("/api/memories/", body, format="json"), 400, "invalid")


def test_alice_cannot_read_change_or_delete_bobs_memories(alice_api: Any, bob_api: Any) -> None:
    secret = create(bob_api, memory="Bob's locker code is 4711").json()["memory"]
    url = f"/api/memories/{secret['id']}/"
    assert_error(alice_api.get(url), 404, "not_found")
    assert_error(alice_api.patch(url, {"memory": "mine"}, format="json"), 404, "not_found")
    assert_error(alice_api.delete(url), 404, "not_found")
    assert alice_api.get("/api/memories/", {"q": "locker code 4711"}).json()["results"] == []
    assert alice_api.get("/api/memories/").json() == {"results": [], "count": 0}
    assert bob_api.get(url).json()["memory"] == "Bob's locker code is 4711"
    # A body can never name another user.
    create(alice_api, memory="Likes tea", user=secret["id"])
    assert bob_api.get("/api/memories/").json()["count"] == 1


def test_memories_need_authentication(client: Any) -> None:
    assert_error(client.get("/api/memories/"), 401, "not_authenticated")
