"""REST steering (SPEC 1.5): `POST|DELETE /api/runs/<id>/messages/`, on a real OpenAI-compatible
endpoint (the local scripted server, slowed down so that a message lands mid-run)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    # Auto memory would ask the same scripted endpoint after each run and take its answers.
    settings.AGENTSITE_MEMORY_AUTO = False


def slow(step: ServerStep, delay_s: float = 0.15) -> ServerStep:
    """`step` streamed over a few seconds: a message posted meanwhile lands before the next step."""
    return dataclasses.replace(step, chunk_delay_s=delay_s, fragment_size=1, chunk_size=2)


def wait_until(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError("the condition never held")


def finished(client: Any, run_id: str) -> dict[str, Any]:
    # The slow step alone streams for several seconds: on a loaded machine (a parallel run)
    # the run took over 10 s to end. A generous deadline costs nothing when it ends sooner.
    return wait_until(
        lambda: (r := client.get(f"/api/runs/{run_id}/").json())["status"] != "running" and r, timeout_s=60.0
    )


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def start_slow_run(client: Any, use_model: Callable[[Model], None], *, words: int = 400) -> dict[str, Any]:
    """A run whose only model step streams for a few seconds; returns once it streams (a
    message queued before the first step would be taken by it)."""
    model = ScriptedModel.of(ScriptStep.answer("slow words " * words, chunk_size=4, delay_s=0.01))
    use_model(model)
    run = client.post("/api/runs/", {"message": "talk slowly"}, format="json").json()
    wait_until(lambda: model.requests)
    return run


def test_a_message_queued_mid_run_is_in_the_next_model_request_and_the_ledger_in_order(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        slow(ServerStep.call("lookup_ticket", {"ticket_id": "T-100"}, id="call_1")),
        "T-100 and T-200 are both open.",
    )
    use_model(OpenAIModel(model="gpt-4o-mini", base_url=openai_server.base_url, api_key="sk-test"))
    run = alice_api.post("/api/runs/", {"message": "Is ticket T-100 open?"}, format="json").json()
    wait_until(lambda: openai_server.requests)  # the first model step is streaming
    queued = alice_api.post(f"/api/runs/{run['id']}/messages/", {"message": "and T-200?"}, format="json")
    assert queued.status_code == 202, queued.content
    body = queued.json()
    assert body["status"] == "queued" and body["id"] and body["run_id"] == run["id"]

    assert finished(alice_api, run["id"])["status"] == "completed"
    openai_server.assert_consumed()
    # The same run's next request: the tool round, then the queued message.
    second = openai_server.requests[1]["messages"]
    assert second[-2]["role"] == "tool" and second[-2]["tool_call_id"] == "call_1"
    assert second[-1] == {"role": "user", "content": "and T-200?"}
    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    assert [(e["role"], e.get("text")) for e in events if e["role"] in ("user", "assistant")] == [
        ("user", "Is ticket T-100 open?"),
        ("assistant", None),
        ("user", "and T-200?"),
        ("assistant", "T-100 and T-200 are both open."),
    ]
    steered = [e for e in events if e.get("queued")]
    assert [(e["queued"], e["queued_id"]) for e in steered] == [("consumed", body["id"])]
    assert len({e["invocation_id"] for e in events if e["role"] != "system"}) == 1  # one run


def test_a_cancel_drops_queued_messages_and_the_ledger_lists_them(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    run = start_slow_run(alice_api, use_model)
    first = alice_api.post(f"/api/runs/{run['id']}/messages/", {"message": "stop that"}, format="json").json()
    assert alice_api.post(f"/api/runs/{run['id']}/cancel/").json()["status"] == "cancelled"
    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    assert [d["id"] for d in events[-1]["queued_dropped"]] == [first["id"]]
    assert not any(e.get("text") == "stop that" for e in events)
    assert_error(
        alice_api.post(f"/api/runs/{run['id']}/messages/", {"message": "hello?"}, format="json"), 409, "run_not_active"
    )


def withdrawn_none(client: Any, run_id: str) -> bool:
    return client.get(f"/api/runs/{run_id}/messages/").json()["queued"] == []


def test_queued_messages_can_be_listed_and_withdrawn(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    run = start_slow_run(alice_api, use_model, words=200)
    ids = [
        alice_api.post(f"/api/runs/{run['id']}/messages/", {"message": m}, format="json").json()["id"]
        for m in ("one", "two")
    ]
    listed = alice_api.get(f"/api/runs/{run['id']}/messages/").json()["queued"]
    assert [(q["id"], q["message"]) for q in listed] == [(ids[0], "one"), (ids[1], "two")]
    assert withdrawn_none(alice_api, run["id"]) is False
    withdrawn = alice_api.delete(f"/api/runs/{run['id']}/messages/")
    assert withdrawn.status_code == 200, withdrawn.content
    assert [w["id"] for w in withdrawn.json()["withdrawn"]] == ids
    assert withdrawn_none(alice_api, run["id"]) is True
    assert finished(alice_api, run["id"])["status"] == "completed"
    # Nothing was carried into a next run.
    assert len(alice_api.get("/api/runs/", {"session_id": run["session_id"]}).json()["results"]) == 1


def test_bad_input_is_refused_with_a_clear_error(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    run = start_slow_run(alice_api, use_model)
    url = f"/api/runs/{run['id']}/messages/"
    assert_error(bob_api.post(url, {"message": "hi"}, format="json"), 404, "not_found")
    assert_error(bob_api.delete(url), 404, "not_found")
    assert_error(bob_api.get(url), 404, "not_found")
    assert_error(alice_api.post("/api/runs/nope/messages/", {"message": "hi"}, format="json"), 404, "not_found")
    for bad in ({}, {"message": ""}, {"message": "   "}, {"message": 42}, {"message": ["a"]}):
        assert alice_api.post(url, bad, format="json").status_code == 400, bad
    with override_settings(AGENTSITE_MAX_MESSAGE_CHARS=10):
        error = assert_error(alice_api.post(url, {"message": "x" * 11}, format="json"), 413, "message_too_large")
        assert "11" in error["message"]
    alice_api.post(f"/api/runs/{run['id']}/cancel/")
    error = assert_error(alice_api.post(url, {"message": "late"}, format="json"), 409, "run_not_active")
    assert "cancelled" in error["message"]
    assert_error(alice_api.delete(url), 409, "run_not_active")


def test_a_flood_of_queued_messages_is_refused_past_the_limit(
    alice_api: Any, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_MAX_QUEUED_MESSAGES = 3  # read when the runner is built
    run = start_slow_run(alice_api, use_model)
    url = f"/api/runs/{run['id']}/messages/"
    for n in range(3):
        assert alice_api.post(url, {"message": f"m{n}"}, format="json").status_code == 202
    error = assert_error(alice_api.post(url, {"message": "one too many"}, format="json"), 429, "queue_full")
    assert "limit is 3" in error["message"]
    alice_api.post(f"/api/runs/{run['id']}/cancel/")


def test_a_message_queued_during_the_final_answer_opens_the_next_run(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of(ScriptStep.answer("slow words " * 100, chunk_size=4, delay_s=0.01), "the next answer")
    use_model(model)
    run = alice_api.post("/api/runs/", {"message": "talk slowly"}, format="json").json()
    wait_until(lambda: model.requests)
    queued = alice_api.post(f"/api/runs/{run['id']}/messages/", {"message": "one more thing"}, format="json").json()
    assert finished(alice_api, run["id"])["status"] == "completed"

    def both_done() -> list[dict[str, Any]] | None:
        runs = alice_api.get("/api/runs/", {"session_id": run["session_id"]}).json()["results"]
        return runs if len(runs) == 2 and all(r["status"] == "completed" for r in runs) else None

    runs = wait_until(both_done)
    assert runs[0]["answer"] == "the next answer"  # newest first
    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    carried = [e for e in events if e.get("queued")]
    assert [(e["text"], e["queued"], e["queued_id"]) for e in carried] == [("one more thing", "carried", queued["id"])]
