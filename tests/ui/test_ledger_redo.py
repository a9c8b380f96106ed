"""The ledger page links redone turns (issue 21): a user message that regenerates or edits an
earlier one links to it, and the earlier one links to each later version; a target on an
earlier page of the ledger is linked through that page."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


def finished(api: Any, run_id: str) -> None:
    for _ in range(200):
        if api.get(f"/api/runs/{run_id}/").json()["status"] not in ("queued", "running"):
            return
        time.sleep(0.05)
    raise AssertionError("the run never ended")


def row_of(html: str, seq: int) -> str:
    match = re.search(rf'<tr [^>]*id="event-{seq}".*?</tr>', html, re.S)
    assert match, f"no row for seq {seq}"
    return match.group(0)


def test_regenerated_and_edited_messages_link_to_what_they_redo_and_back(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("First answer.", "Second answer.", "Edited answer."))
    asked = alice_api.post("/api/runs/", {"message": "Is T-100 open?", "wait": True}, format="json").json()
    session_id = asked["session_id"]
    regenerated = alice_api.post(f"/api/sessions/{session_id}/regenerate/").json()
    finished(alice_api, regenerated["id"])
    edited = alice_api.post(
        f"/api/sessions/{session_id}/events/{regenerated['turn_event_id']}/edit/",
        {"message": "Is T-200 open?"},
        format="json",
    ).json()
    finished(alice_api, edited["id"])
    events = alice_api.get(f"/api/sessions/{session_id}/events/", {"limit": 500}).json()["results"]
    seq = {e["id"]: e["seq"] for e in events}
    first, second, third = (
        seq[regenerated["regenerates"]],
        seq[regenerated["turn_event_id"]],
        seq[edited["turn_event_id"]],
    )

    client.force_login(alice)
    html = client.get(f"/sessions/{session_id}/").content.decode()

    assert f'<a href="#event-{first}">Answers message #{first} again</a>' in row_of(html, second)
    assert f'<a href="#event-{second}">Edited resend of message #{second}</a>' in row_of(html, third)
    assert f'<a href="#event-{second}">Answered again in #{second}</a>' in row_of(html, first)
    assert f'<a href="#event-{third}">Edited and resent as #{third}</a>' in row_of(html, second)
    assert "redo-link" not in row_of(html, third).split("Edited resend")[1]  # nothing redoes the newest

    # A page that starts after the message redone links to the page that holds it.
    later = client.get(f"/sessions/{session_id}/", {"after_seq": second}).content.decode()
    assert f'<a href="?after_seq={second - 1}#event-{second}">Edited resend of message #{second}</a>' in row_of(
        later, third
    )
