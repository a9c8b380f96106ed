"""Browser pages rendered by Django: log in and out, the chat page, the session ledger page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.staticfiles import finders

from runs.core.llm.base import Model
from runs.core.llm.offline import OfflineModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.views import OFFLINE_BADGE, model_badge

pytestmark = pytest.mark.django_db(transaction=True)


def chat_config(response: Any) -> dict[str, Any]:
    """The JSON the chat page hands its script (rendered by `json_script`)."""
    html = response.content.decode()
    start = html.index('<script id="chat-config" type="application/json">') + len(
        '<script id="chat-config" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def run(api: Any, message: str, **body: Any) -> dict[str, Any]:
    response = api.post("/api/runs/", {"message": message, "wait": True, **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


# -- authentication ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/chat/some-session/", "/sessions/some-session/"])
def test_pages_send_anonymous_visitors_to_the_login_page(client: Any, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_login_page_renders_a_labelled_form(client: Any) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html
    assert 'autocomplete="current-password"' in html


def test_logging_in_lands_on_the_chat(client: Any, alice: Any) -> None:
    response = client.post("/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(client: Any, alice: Any) -> None:
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert client.get("/").status_code == 302


def test_logging_out_ends_the_browser_session(client: Any, alice: Any) -> None:
    client.force_login(alice)
    response = client.post("/logout/")
    assert response.status_code == 200
    assert "You are logged out" in response.content.decode()
    assert client.get("/").status_code == 302


# -- the chat page --------------------------------------------------------------------------


def test_chat_page_badge_says_plainly_that_the_offline_model_is_a_rule_based_planner(
    client: Any, alice: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(OfflineModel())
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert OFFLINE_BADGE == "Offline planner: deterministic rules, not a language model"
    assert OFFLINE_BADGE in html
    assert "badge-offline" in html
    support = next(a for a in chat_config(response)["agents"] if a["name"] == "support")
    assert support["model_provider"] == "offline"
    assert support["badge"] == OFFLINE_BADGE


def test_chat_page_badge_names_another_model_and_its_provider(
    client: Any, alice: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    client.force_login(alice)
    html = client.get("/").content.decode()
    assert "Model: scripted-test-model (scripted)" in html
    assert OFFLINE_BADGE not in html
    assert "badge-offline" not in html


def test_chat_page_has_a_labelled_composer_an_agent_picker_and_a_live_conversation_pane(
    client: Any, alice: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(OfflineModel())
    client.force_login(alice)
    html = client.get("/").content.decode()
    assert '<label for="composer-input" class="visually-hidden">Message</label>' in html
    assert 'id="messages" role="log" aria-live="polite"' in html
    # The demo has two agents, so the picker is offered, with the default selected.
    assert '<select id="agent-select" name="agent">' in html
    assert '<option value="support" selected>support</option>' in html
    assert '<option value="general">general</option>' in html
    assert 'href="/"' in html and "New chat" in html


def test_sidebar_lists_only_the_users_sessions_newest_first_by_title_or_first_message(
    client: Any, alice: Any, alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("one", "two", "three"))
    alice_api.post("/api/sessions/", {"title": "Titled chat"}, format="json")
    run(alice_api, "Untitled chat starts like this")
    run(bob_api, "Bob's private question")
    client.force_login(alice)
    html = client.get("/").content.decode()
    assert "Bob&#x27;s private question" not in html and "Bob's private question" not in html
    first_message = html.index("Untitled chat starts like this")
    titled = html.index("Titled chat<")
    assert first_message < titled  # the later session comes first


def test_chat_page_of_a_session_marks_it_current_and_links_its_ledger(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("hello"))
    session_id = run(alice_api, "Say hello")["session_id"]
    client.force_login(alice)
    response = client.get(f"/chat/{session_id}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="/sessions/{session_id}/"' in html and "Ledger" in html
    assert 'aria-current="page"' in html
    config = chat_config(response)
    assert config["sessionId"] == session_id
    assert config["urls"]["websocket"] == "/ws/sessions/SESSION_ID/"
    assert config["urls"]["events"] == "/api/sessions/SESSION_ID/events/"


def test_chat_page_of_another_users_session_is_not_found(
    client: Any, bob: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("hello"))
    session_id = run(alice_api, "Say hello")["session_id"]
    client.force_login(bob)
    assert client.get(f"/chat/{session_id}/").status_code == 404


def test_agent_list_api_names_each_agents_model_provider_and_description(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(OfflineModel())
    agents = alice_api.get("/api/agents/").json()["results"]
    support = next(a for a in agents if a["name"] == "support")
    assert support["model"] == "offline"
    assert support["model_provider"] == "offline"
    assert support["model_description"] == "deterministic rule-based planner, not a language model"
    assert {"name", "description", "kind", "model", "default"} <= support.keys()
    graph = next(a for a in agents if a["name"] == "troubleshoot")
    assert (graph["kind"], graph["model"]) == ("graph", None)
    assert model_badge(graph) == "Graph: deterministic steps, no model"


def test_chat_script_and_styles_are_found_by_staticfiles() -> None:
    for name in ("agentsite/chat.js", "agentsite/ledger.js", "agentsite/app.css"):
        assert finders.find(name), name


# -- the ledger page --------------------------------------------------------------------------


def test_ledger_page_shows_every_event_with_its_tool_calls_and_results(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(
        ScriptedModel.of(
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_ledger_1"),
            "INC-1042 was an expired certificate.",
        )
    )
    session_id = run(alice_api, "What happened in INC-1042?")["session_id"]
    client.force_login(alice)
    response = client.get(f"/sessions/{session_id}/")
    assert response.status_code == 200
    html = response.content.decode()
    rows = response.context["rows"]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "system"]
    for seq in range(1, 6):
        assert f'id="event-{seq}"' in html
    assert "What happened in INC-1042?" in html
    assert "INC-1042 was an expired certificate." in html
    assert "lookup_ticket" in html and "call_ledger_1" in html
    assert "&quot;ticket_id&quot;: &quot;INC-1042&quot;" in html  # arguments, pretty-printed
    assert 'data-tools="lookup_ticket"' in html  # the tool filter's hook on call and result rows
    assert '<select id="filter-role" data-filter="role">' in html
    assert '<option value="tool">tool</option>' in html
    assert '<option value="support">support</option>' in html
    assert '<option value="lookup_ticket">lookup_ticket</option>' in html


def test_ledger_page_shows_errors_of_failed_runs(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    from runs.core.errors import ModelError

    use_model(ScriptedModel.of(ScriptStep.fail(ModelError("the endpoint refused the request"))))
    session_id = run(alice_api, "Fail, please")["session_id"]
    client.force_login(alice)
    html = client.get(f"/sessions/{session_id}/").content.decode()
    assert 'class="row-error"' in html
    assert "the endpoint refused the request" in html


def test_ledger_page_escapes_text_from_the_ledger(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("<img src=x onerror=alert(1)>"))
    session_id = run(alice_api, "<script>alert('x')</script>")["session_id"]
    client.force_login(alice)
    html = client.get(f"/sessions/{session_id}/").content.decode()
    assert "<script>alert(" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(" in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_ledger_page_of_another_users_session_is_not_found(
    client: Any, bob: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("hello"))
    session_id = run(alice_api, "Say hello")["session_id"]
    client.force_login(bob)
    response = client.get(f"/sessions/{session_id}/")
    assert response.status_code == 404
    assert "Say hello" not in response.content.decode()


def test_ledger_page_of_an_unknown_session_is_not_found(client: Any, alice: Any) -> None:
    client.force_login(alice)
    assert client.get("/sessions/no-such-session/").status_code == 404


def test_ledger_page_carries_the_context_inspector_wired_to_its_api(
    client: Any, alice: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("hello"))
    session_id = run(alice_api, "Say hello")["session_id"]
    client.force_login(alice)
    html = client.get(f"/sessions/{session_id}/").content.decode()
    assert '<section id="context-inspector"' in html
    assert '<h2 id="context-heading">Context</h2>' in html
    assert f'data-url="/api/sessions/{session_id}/context/"' in html
    assert "agentsite/inspector.js" in html
    assert f'href="/chat/{session_id}/"' in html  # back to the conversation
