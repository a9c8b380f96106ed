"""State scopes (SPEC 2.1, 2.5) seen from outside the service: a run's tools, the REST API,
and what the state view costs the hot path."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "scopes"


def remember_language(context: ToolContext, language: str) -> str:
    """Remember the user's language for every later conversation.

    Args:
        language: the language
    """
    context.state_delta["user:language"] = language
    return "remembered"


def recall_language(context: ToolContext) -> str:
    """Say which language the user prefers."""
    return str(context.state.get("user:language", "unknown"))


async def test_spec_2_1_a_tool_in_another_session_sees_the_user_state_a_run_wrote() -> None:
    service = InMemorySessionService()
    model = ScriptedModel.of(
        ScriptStep.call("remember_language", {"language": "fr"}),
        "Noted.",
        ScriptStep.call("recall_language", {}),
        "You prefer fr.",
    )
    agent = LLMAgent(name="helper", model=model, tools=[FunctionTool(remember_language), FunctionTool(recall_language)])
    runner = Runner(app=APP, agents=[agent], session_service=service)
    [e async for e in runner.run(user_id="alice", message="I read French")]
    second = [e async for e in runner.run(user_id="alice", message="which language do I read?")]  # a new session
    model.assert_consumed()
    results = [e.text for e in second if e.role == "tool"]
    assert results == ["fr"]
    assert await service.list_user_states(app=APP, user_id="alice") == {"language": "fr"}
    assert await service.list_user_states(app=APP, user_id="bob") == {}


# -- REST: GET / PATCH /api/sessions/<id>/state/ ------------------------------------------------------


def _assert_error(response: Any, status: int, code: str, field: str | None = None) -> None:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    if field is not None:
        assert error.get("field") == field


@pytest.mark.django_db(transaction=True)
def test_spec_2_1_update_session_state_over_rest_writes_no_event_and_shows_the_view(alice: Any, alice_api: Any) -> None:
    from django.conf import settings

    from sessions_app.backends import DjangoSessionService

    session = alice_api.post("/api/sessions/", {}, format="json").json()
    async_to_sync(DjangoSessionService().update_user_state)(
        app=settings.AGENTSITE_APP, user_id=str(alice.pk), state={"tz": "Europe/Paris"}
    )
    response = alice_api.patch(f"/api/sessions/{session['id']}/state/", {"state": {"plan": "A", "n": 2}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"state": {"plan": "A", "n": 2, "user:tz": "Europe/Paris"}}
    alice_api.patch(f"/api/sessions/{session['id']}/state/", {"state": {"plan": "B"}}, format="json")
    assert alice_api.get(f"/api/sessions/{session['id']}/state/").json() == {
        "state": {"plan": "B", "n": 2, "user:tz": "Europe/Paris"}
    }
    assert alice_api.get(f"/api/sessions/{session['id']}/events/").json()["results"] == []


@pytest.mark.django_db(transaction=True)
def test_spec_2_1_update_session_state_over_rest_refuses_bad_input_and_other_users(
    alice_api: Any, bob_api: Any
) -> None:
    session = alice_api.post("/api/sessions/", {}, format="json").json()
    url = f"/api/sessions/{session['id']}/state/"
    _assert_error(
        alice_api.patch(url, {"state": {"app:banner": "x"}}, format="json"),
        400,
        "invalid_state_key",
        "state.app:banner",
    )
    _assert_error(
        alice_api.patch(url, {"state": {"user:tz": "x"}}, format="json"), 400, "invalid_state_key", "state.user:tz"
    )
    _assert_error(alice_api.patch(url, {"state": ["x"]}, format="json"), 400, "invalid", "state")
    _assert_error(alice_api.patch(url, {}, format="json"), 400, "invalid", "state")
    _assert_error(bob_api.patch(url, {"state": {"a": 1}}, format="json"), 404, "not_found")
    _assert_error(bob_api.get(url), 404, "not_found")
    assert alice_api.get(url).json() == {"state": {}}


# -- the hot path: the state view is part of the statements that read the session -----------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("with_scoped_state", [False, True])
def test_spec_2_1_the_state_view_adds_no_statement_to_a_session_read(alice: Any, with_scoped_state: bool) -> None:
    from sessions_app.backends import DjangoSessionService, get_session_head_sync, get_session_sync

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk), state={"k": 1})
    if with_scoped_state:
        async_to_sync(service.update_app_state)(app=APP, state={"mode": "beta"})
        async_to_sync(service.update_user_state)(app=APP, user_id=str(alice.pk), state={"tz": "UTC"})
    key = SessionKey(app=APP, user_id=str(alice.pk), session_id=session.id)
    expected = {"k": 1, "app:mode": "beta", "user:tz": "UTC"} if with_scoped_state else {"k": 1}
    with CaptureQueriesContext(connection) as head_reads:
        head = get_session_head_sync(key)
    with CaptureQueriesContext(connection) as window_reads:
        loaded = get_session_sync(key, event_limit=10)
    assert head is not None and head.state == expected
    assert loaded is not None and loaded.state == expected
    assert len(head_reads) == 1  # the session row, its summaries and both scopes: one statement
    assert len(window_reads) == 1  # the head statement; an empty ledger has no window to read (issue 23)


@pytest.mark.django_db(transaction=True)
def test_spec_2_5_a_new_session_over_rest_starts_with_its_initial_state(alice_api: Any) -> None:
    created = alice_api.post("/api/sessions/", {"title": "t", "state": {"plan": "A", "step": 1}}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["state"] == {"plan": "A", "step": 1}
    assert alice_api.get(f"/api/sessions/{created.json()['id']}/state/").json() == {"state": {"plan": "A", "step": 1}}
    _assert_error(
        alice_api.post("/api/sessions/", {"state": {"app:banner": "x"}}, format="json"),
        400,
        "invalid_state_key",
        "state.app:banner",
    )
    _assert_error(alice_api.post("/api/sessions/", {"state": "plan"}, format="json"), 400, "invalid", "state")
    assert len(alice_api.get("/api/sessions/").json()["results"]) == 1


@pytest.mark.django_db(transaction=True)
def test_spec_2_1_an_operator_sets_app_state_in_the_admin_and_every_user_sees_it(
    admin_client: Any, alice_api: Any
) -> None:
    from django.conf import settings

    session = alice_api.post("/api/sessions/", {}, format="json").json()
    response = admin_client.post(
        "/admin/sessions_app/appstate/add/", {"app": settings.AGENTSITE_APP, "state": '{"notice": "maintenance at 6"}'}
    )
    assert response.status_code == 302, response.content
    assert alice_api.get(f"/api/sessions/{session['id']}/state/").json() == {
        "state": {"app:notice": "maintenance at 6"}
    }
    assert admin_client.get("/admin/sessions_app/userstate/").status_code == 200
