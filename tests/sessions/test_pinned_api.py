"""Pinned intent and the projection manifest on the demo agent, seen through the context
inspector API (issue 12: "on for the demo agent and visible in the context inspector")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel

pytestmark = pytest.mark.django_db(transaction=True)


def run(client: Any, message: str, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "wait": True}
    if session_id:
        body["session_id"] = session_id
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "completed", response.json()
    return response.json()


def test_the_inspector_shows_the_pins_and_a_full_manifest_for_every_call(
    alice_api: Any, settings: Any, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_SUMMARY_JOBS = "inprocess"
    settings.AGENTSITE_SUMMARY_LOCK = "database"
    model = ScriptedModel.of("Noted.", "Done.", "Sure.")
    use_model(model)
    first = run(alice_api, "Always quote the log line you rely on. Why does checkout fail?")
    session_id = first["session_id"]
    run(alice_api, "Never restart payments without asking me.", session_id)
    run(alice_api, "Actually, always quote the stack trace you rely on.", session_id)

    # The demo agent sent the pinned block to the model, verbatim, right after the instruction.
    pinned = model.requests[-1].messages[1].content
    assert "Never restart payments without asking me." in pinned
    assert "Actually, always quote the stack trace you rely on." in pinned
    assert "Always quote the log line you rely on." not in pinned  # superseded

    context = alice_api.get(f"/api/sessions/{session_id}/context/").json()
    [block] = [b for b in context["blocks"] if b["kind"] == "pinned"]
    assert [p["kind"] for p in block["pins"]] == ["directive", "correction"]
    manifest = context["manifest"]
    assert manifest["coverage"] == 1.0 and "dropped" not in manifest["counts"]
    assert manifest["last_seq"] == sum(manifest["counts"].values())
    assert len(context["calls"]) == 3
    for call in context["calls"]:
        assert call["manifest"]["coverage"] == 1.0
        assert call["pinned"]["shown"] >= 1
    assert context["calls"][-1]["pinned"] == {
        "tokens": context["calls"][-1]["pinned"]["tokens"],
        "shown": 2,
        "omitted": 0,
    }
