"""REST API: runs, sessions and events, with two users and bad inputs (DESIGN 5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from runs.core.errors import ModelError
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def post_run(client: Any, **body: Any) -> Any:
    return client.post("/api/runs/", body, format="json")


def events_of(client: Any, session_id: str, **params: Any) -> Any:
    return client.get(f"/api/sessions/{session_id}/events/", params)


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    if field is not None:
        assert error.get("field") == field
    return error


def test_a_run_with_wait_returns_the_answer_and_every_step_is_in_the_ledger(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(
        ScriptedModel.of(
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-2041"}), "INC-2041 was an expired certificate."
        )
    )
    response = post_run(alice_api, message="What happened in INC-2041?", wait=True)
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed"
    assert run["answer"] == "INC-2041 was an expired certificate."
    assert run["tool_calls"] == 1 and run["model_calls"] == 2

    events = events_of(alice_api, run["session_id"]).json()
    assert events["next"] is None
    roles = [(e["author"], e["role"]) for e in events["results"]]
    assert roles == [
        ("user", "user"),
        ("support", "assistant"),
        ("support", "tool"),
        ("support", "assistant"),
        ("agentsite", "system"),
    ]
    call = events["results"][1]["tool_calls"][0]
    assert call["name"] == "lookup_ticket"
    assert events["results"][2]["tool_call_id"] == call["id"]
    assert [e["seq"] for e in events["results"]] == [1, 2, 3, 4, 5]

    detail = alice_api.get(f"/api/runs/{run['id']}/").json()
    assert detail["status"] == "completed" and detail["session_id"] == run["session_id"]


def test_a_run_continues_an_existing_session(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("first answer", "second answer"))
    session = alice_api.post("/api/sessions/", {"title": "TLS trouble"}, format="json").json()
    first = post_run(alice_api, message="one", session_id=session["id"], wait=True).json()
    second = post_run(alice_api, message="two", session_id=session["id"], wait=True).json()
    assert first["session_id"] == second["session_id"] == session["id"]
    texts = [e.get("text") for e in events_of(alice_api, session["id"]).json()["results"] if e["role"] != "system"]
    assert texts == ["one", "first answer", "two", "second answer"]


def test_events_are_paged_by_seq_cursor(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("a1", "a2", "a3"))
    session_id = post_run(alice_api, message="m1", wait=True).json()["session_id"]
    for text in ("m2", "m3"):
        post_run(alice_api, message=text, session_id=session_id, wait=True)
    page = events_of(alice_api, session_id, limit=4).json()
    assert [e["seq"] for e in page["results"]] == [1, 2, 3, 4]
    assert page["next"] is not None and "after_seq=4" in page["next"]
    second = alice_api.get(page["next"]).json()
    assert [e["seq"] for e in second["results"]] == [5, 6, 7, 8]
    last = alice_api.get(second["next"]).json()
    assert [e["seq"] for e in last["results"]] == [9]
    assert last["next"] is None
    after = events_of(alice_api, session_id, after_seq=7).json()
    assert [e["seq"] for e in after["results"]] == [8, 9]


def test_alice_never_sees_bobs_sessions_or_runs(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("bob's secret answer"))
    bobs_run = post_run(bob_api, message="bob's secret", wait=True).json()
    session_id, run_id = bobs_run["session_id"], bobs_run["id"]

    assert alice_api.get("/api/sessions/").json()["results"] == []
    assert_error(alice_api.get(f"/api/sessions/{session_id}/"), 404, "not_found")
    assert_error(events_of(alice_api, session_id), 404, "not_found")
    assert_error(alice_api.delete(f"/api/sessions/{session_id}/"), 404, "not_found")
    assert_error(post_run(alice_api, message="let me in", session_id=session_id), 404, "not_found", "session_id")
    assert_error(alice_api.get(f"/api/runs/{run_id}/"), 404, "not_found")
    assert_error(alice_api.post(f"/api/runs/{run_id}/cancel/"), 404, "not_found")

    # Bob's ledger is untouched by Alice's attempts.
    texts = [e.get("text") for e in events_of(bob_api, session_id).json()["results"]]
    assert texts[:2] == ["bob's secret", "bob's secret answer"]
    assert [s["id"] for s in bob_api.get("/api/sessions/").json()["results"]] == [session_id]


def test_requests_without_credentials_are_refused(client: Any) -> None:
    assert_error(client.get("/api/sessions/"), 401, "not_authenticated")
    assert_error(
        client.post("/api/runs/", {"message": "hi"}, content_type="application/json"), 401, "not_authenticated"
    )


def test_a_wrong_token_is_refused(alice: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    assert_error(client.get("/api/sessions/"), 401, "authentication_failed")


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"message": ""}, 400, "invalid", "message"),
        ({"message": "   "}, 400, "invalid", "message"),
        ({}, 400, "invalid", "message"),
        ({"message": 42}, 400, "invalid", "message"),
        ({"message": ["a"]}, 400, "invalid", "message"),
        ({"message": "hi", "wait": "yes"}, 400, "invalid", "wait"),
        ({"message": "hi", "session_id": 7}, 400, "invalid", "session_id"),
        ({"message": "hi", "agent": "nobody"}, 400, "unknown_agent", "agent"),
        ({"message": "hi", "session_id": "no-such-session"}, 404, "not_found", "session_id"),
    ],
)
def test_bad_run_requests_get_a_4xx_envelope_and_write_nothing(
    alice_api: Any, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    assert_error(alice_api.post("/api/runs/", body, format="json"), status, code, field)
    assert alice_api.get("/api/sessions/").json()["results"] == []


def test_malformed_json_is_a_400(alice_api: Any) -> None:
    response = alice_api.post("/api/runs/", '{"message": "hi"', content_type="application/json")
    assert_error(response, 400, "malformed_json")


def test_a_json_body_that_is_not_an_object_is_a_400(alice_api: Any) -> None:
    response = alice_api.post("/api/runs/", '["message"]', content_type="application/json")
    assert_error(response, 400, "invalid")


@override_settings(AGENTSITE_MAX_MESSAGE_CHARS=100)
def test_an_oversized_message_is_a_413(alice_api: Any) -> None:
    assert_error(post_run(alice_api, message="x" * 101), 413, "message_too_large", "message")
    assert alice_api.get("/api/sessions/").json()["results"] == []


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_an_oversized_body_is_a_413(alice_api: Any) -> None:
    assert_error(post_run(alice_api, message="x" * 2000), 413, "body_too_large")


def test_a_model_failure_mid_run_fails_the_run_and_keeps_the_ledger(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(
        ScriptedModel.of(
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-2041"}),
            ScriptStep.fail(ModelError("model 'gpt-x' does not exist", status_code=404)),
        )
    )
    run = post_run(alice_api, message="check INC-2041", wait=True).json()
    assert run["status"] == "failed"
    assert run["error"]["type"] == "model_error" and "gpt-x" in run["error"]["message"]
    results = events_of(alice_api, run["session_id"]).json()["results"]
    assert [e["role"] for e in results] == ["user", "assistant", "tool", "assistant", "system"]
    assert results[3]["error"]["type"] == "model_error"
    assert "error occurred" in results[3]["text"]


def test_a_running_run_can_be_cancelled(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    model = ScriptedModel.of(ScriptStep.answer("slow words " * 400, chunk_size=4, delay_s=0.01))
    use_model(model)
    run = post_run(alice_api, message="talk slowly").json()
    assert run["status"] == "running"
    wait_until(lambda: model.requests, "the run asks its model")
    cancelled = alice_api.post(f"/api/runs/{run['id']}/cancel/")
    assert cancelled.status_code == 202, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    assert alice_api.get(f"/api/runs/{run['id']}/").json()["status"] == "cancelled"
    assert_error(alice_api.post(f"/api/runs/{run['id']}/cancel/"), 409, "run_not_active")
    last = events_of(alice_api, run["session_id"]).json()["results"][-1]
    assert last["object"] == "runner.completion"


def test_a_duplicate_request_id_is_a_409(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("once"))
    assert post_run(alice_api, message="hi", request_id="r-1", wait=True).status_code == 201
    assert_error(post_run(alice_api, message="hi again", request_id="r-1"), 409, "duplicate_request", "request_id")


def test_sessions_can_be_created_listed_and_deleted(alice_api: Any) -> None:
    created = alice_api.post("/api/sessions/", {"title": "certs", "agent": "support"}, format="json")
    assert created.status_code == 201, created.content
    session = created.json()
    assert session["agent"] == "support" and session["title"] == "certs"
    assert [s["id"] for s in alice_api.get("/api/sessions/").json()["results"]] == [session["id"]]
    assert alice_api.get(f"/api/sessions/{session['id']}/").json()["id"] == session["id"]
    assert alice_api.delete(f"/api/sessions/{session['id']}/").status_code == 204
    assert_error(alice_api.get(f"/api/sessions/{session['id']}/"), 404, "not_found")


def test_creating_a_session_for_an_unknown_agent_is_a_400(alice_api: Any) -> None:
    assert_error(alice_api.post("/api/sessions/", {"agent": "ghost"}, format="json"), 400, "unknown_agent", "agent")


@pytest.mark.parametrize("params", [{"after_seq": "x"}, {"limit": 0}, {"limit": 100000}, {"after_seq": -1}])
def test_bad_event_paging_parameters_are_a_400(alice_api: Any, params: dict[str, Any]) -> None:
    session = alice_api.post("/api/sessions/", {}, format="json").json()
    assert_error(events_of(alice_api, session["id"], **params), 400, "invalid")


def test_agents_are_listed_with_their_model(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of())
    agents = {a["name"]: a for a in alice_api.get("/api/agents/").json()["results"]}
    assert agents["support"]["kind"] == "llm"
    assert agents["support"]["model"] == "scripted-test-model"
    assert agents["support"]["default"] is True


def test_unknown_api_paths_answer_404_in_the_envelope(alice_api: Any) -> None:
    assert_error(alice_api.get("/api/nothing-here/"), 404, "not_found")


def test_openapi_schema_describes_the_api(alice_api: Any) -> None:
    response = alice_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json() if response["Content-Type"].endswith("json") else None
    text = response.content.decode()
    assert "/api/runs/" in text and "/api/sessions/{session_id}/events/" in text
    if schema is not None:
        assert schema["openapi"].startswith("3.")


def test_healthz_reports_each_component(client: Any) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    checks = response.json()["checks"]
    assert set(checks) == {"database", "channel_layer", "broker"}
    assert all(value.startswith("ok") for value in checks.values())


def test_runs_are_listed_by_session_and_status_and_the_ledger_says_how_each_ended(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("done", ScriptStep.answer("slow words " * 400, chunk_size=4, delay_s=0.01)))
    finished = post_run(alice_api, message="quick", wait=True).json()
    running = post_run(alice_api, message="slow", session_id=finished["session_id"]).json()
    listed = alice_api.get("/api/runs/", {"session_id": finished["session_id"], "status": "running"}).json()
    assert [r["id"] for r in listed["results"]] == [running["id"]]
    assert bob_api.get("/api/runs/", {"session_id": finished["session_id"]}).json()["results"] == []
    assert_error(alice_api.get("/api/runs/", {"status": "asleep"}), 400, "invalid", "status")
    alice_api.post(f"/api/runs/{running['id']}/cancel/")
    completions = [
        e for e in events_of(alice_api, finished["session_id"]).json()["results"] if e["object"] == "runner.completion"
    ]
    assert [(c["run_id"], c["status"]) for c in completions] == [
        (finished["id"], "completed"),
        (running["id"], "cancelled"),
    ]


def test_a_runs_event_count_is_its_events_in_the_ledger_not_its_streamed_deltas(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    # Issue 21: event_count said 16/21/33 where the ledger showed 5/8/5, as it counted
    # every streamed delta and left out the run's user turn and completion marker.
    long_answer = "INC-2041 was an expired certificate on the payments gateway."
    use_model(
        ScriptedModel.of(
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}),
            ScriptStep.answer(long_answer, chunk_size=4),
            ScriptStep.answer("Renewed.", chunk_size=2),
        )
    )
    first = post_run(alice_api, message="What happened in INC-2041?", wait=True).json()
    second = post_run(alice_api, message="And now?", session_id=first["session_id"], wait=True).json()
    ledger = events_of(alice_api, first["session_id"]).json()["results"]
    counts = [alice_api.get(f"/api/runs/{run['id']}/").json()["event_count"] for run in (first, second)]
    assert counts == [5, 3]  # user, call, result, answer, completion; user, answer, completion
    assert sum(counts) == len(ledger)
