"""`PATCH /api/sessions/<id>/`: renaming a chat (issue 21). Only the owner may; the title
must be a string of 1 to 200 characters, and a bad one gets a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def new_session(client: Any, title: str = "first question") -> str:
    response = client.post("/api/sessions/", {"title": title}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def test_owner_renames_a_chat_and_the_list_shows_it(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    response = alice_api.patch(f"/api/sessions/{session_id}/", {"title": "  Printer tickets  "}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["title"] == "Printer tickets"
    assert alice_api.get(f"/api/sessions/{session_id}/").json()["title"] == "Printer tickets"
    listed = {row["id"]: row["title"] for row in alice_api.get("/api/sessions/").json()["results"]}
    assert listed[session_id] == "Printer tickets"


def test_another_user_cannot_rename_a_chat(alice_api: Any, bob_api: Any) -> None:
    session_id = new_session(alice_api)
    response = bob_api.patch(f"/api/sessions/{session_id}/", {"title": "mine now"}, format="json")
    assert response.status_code == 404
    assert alice_api.get(f"/api/sessions/{session_id}/").json()["title"] == "first question"


@pytest.mark.parametrize(
    "body", [{}, {"title": ""}, {"title": "   "}, {"title": "x" * 201}, {"title": 7}, {"title": None}]
)
def test_a_bad_title_is_a_400_naming_the_field(alice_api: Any, body: dict[str, Any]) -> None:
    session_id = new_session(alice_api)
    response = alice_api.patch(f"/api/sessions/{session_id}/", body, format="json")
    assert response.status_code == 400, response.content
    assert "title" in response.content.decode()
    assert alice_api.get(f"/api/sessions/{session_id}/").json()["title"] == "first question"


def test_a_title_of_200_characters_is_kept(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    response = alice_api.patch(f"/api/sessions/{session_id}/", {"title": "y" * 200}, format="json")
    assert response.status_code == 200
    assert response.json()["title"] == "y" * 200
