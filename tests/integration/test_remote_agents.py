"""Remote A2A agents without code (issue 25, item 8): an A2A agent served by a second, live
Agentsite (Daphne) is added from the admin (Django test client): its card is fetched and
checked on save, its credential never shown back; it is then listed by /api/agents/ and run
on /api/runs/, and offered as a tool to a registered agent. A bad URL is a form error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from runs import models as orm
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.support.daphne import LiveServer, free_port, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"
ADD = "/admin/runs/remoteagent/add/"


@pytest.fixture
def remote(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    """The second server: another Agentsite, serving its support agent over A2A."""
    with live_daphne(tmp_path, env={"AGENTSITE_MEMORY_AUTO": "0"}) as live:
        yield live


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # no post-run extraction takes a scripted answer


def form(remote: LiveServer, **fields: Any) -> dict[str, Any]:
    return {
        "name": "faraway",
        "url": f"{remote.url}/a2a/support",
        "description": "",
        "header_name": "",
        "as_agent": "on",
        "tool_of": "",
        "enabled": "on",
        "token": "",
        **fields,
    }


def test_a_remote_agent_added_in_the_admin_is_listed_and_runs_as_an_agent(
    remote: LiveServer, admin_client: Any, alice: Any, alice_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    remote_token = (
        Token.objects.create(user=alice).key
        if not Token.objects.filter(user=alice).exists()
        else Token.objects.get(user=alice).key
    )

    response = admin_client.post(ADD, form(remote, token=remote_token))
    assert response.status_code == 302, response.content.decode()[:3000]
    row = orm.RemoteAgent.objects.get(name="faraway")
    assert row.card["name"] == "support" and row.card_fetched_at is not None
    assert row.description == row.card["description"]  # blank: the card's
    assert row.token == remote_token

    # Write-only: neither the change page nor the list shows the credential.
    for page in (f"/admin/runs/remoteagent/{row.pk}/change/", "/admin/runs/remoteagent/"):
        html = admin_client.get(page).content.decode()
        assert "stored (write-only)" in html and remote_token not in html
    assert remote_token not in repr(row) and remote_token not in str(row)

    listed = {agent["name"]: agent for agent in alice_api.get("/api/agents/").json()["results"]}
    assert listed["faraway"]["kind"] == "a2a" and listed["faraway"]["default"] is False
    assert {"support", "general", "troubleshoot"} <= set(listed)

    run = alice_api.post("/api/runs/", {"message": TLS_QUESTION, "agent": "faraway", "wait": True}, format="json")
    assert run.status_code == 201, run.content
    assert run.json()["status"] == "completed", run.json()
    events = alice_api.get(f"/api/sessions/{run.json()['session_id']}/events/").json()["results"]
    [answer] = [e for e in events if e["role"] == "assistant"]
    assert answer["author"] == "faraway" and "expired" in answer["text"]
    # Every surface serves it: the OpenAI-compatible one too.
    chat = alice_api.post(
        "/v1/chat/completions",
        {"model": "faraway", "messages": [{"role": "user", "content": TLS_QUESTION}]},
        format="json",
    )
    assert chat.status_code == 200, chat.content
    assert "expired" in chat.json()["choices"][0]["message"]["content"]

    # Saving again without a credential keeps the stored one; the change is served at once.
    response = admin_client.post(f"/admin/runs/remoteagent/{row.pk}/change/", form(remote, enabled=""))
    assert response.status_code == 302, response.content.decode()[:3000]
    assert orm.RemoteAgent.objects.get(pk=row.pk).token == remote_token
    assert "faraway" not in {a["name"] for a in alice_api.get("/api/agents/").json()["results"]}

    assert remote_token not in caplog.text


def test_a_remote_agent_is_offered_as_a_tool_of_a_registered_agent(
    remote: LiveServer, admin_client: Any, alice: Any, alice_api: Any, use_model: Any
) -> None:
    model = ScriptedModel.of(ScriptStep.call("ask_faraway", {"question": TLS_QUESTION}), "The remote says: renew it.")
    use_model(model)
    response = admin_client.post(
        ADD, form(remote, token=Token.objects.get_or_create(user=alice)[0].key, as_agent="", tool_of="general")
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert "faraway" not in {a["name"] for a in alice_api.get("/api/agents/").json()["results"]}

    run = alice_api.post(
        "/api/runs/", {"message": "Why does TLS fail on payments?", "agent": "general", "wait": True}, format="json"
    )
    assert run.status_code == 201, run.content
    assert run.json()["status"] == "completed", run.json()
    model.assert_consumed()
    events = alice_api.get(f"/api/sessions/{run.json()['session_id']}/events/").json()["results"]
    [result] = [e for e in events if e["role"] == "tool"]
    assert result["tool_name"] == "ask_faraway" and "expired" in result["text"]


def test_a_url_without_an_agent_card_is_a_form_error(remote: LiveServer, admin_client: Any) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}/a2a/support"
    page = admin_client.post(ADD, form(remote, url=unreachable, token="s3cret-never-shown"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "could not fetch the agent card from" in html and "s3cret-never-shown" not in html

    not_a_card = admin_client.post(ADD, form(remote, url=f"{remote.url}/api/agents"))
    assert not_a_card.status_code == 200 and "could not fetch the agent card" in not_a_card.content.decode()

    clash = admin_client.post(ADD, form(remote, name="support"))
    assert "is a registered agent" in clash.content.decode()
    bad_tool_owner = admin_client.post(ADD, form(remote, tool_of="troubleshoot"))
    assert "not a registered agent that takes tools: troubleshoot" in bad_tool_owner.content.decode()
    assert not orm.RemoteAgent.objects.exists()
