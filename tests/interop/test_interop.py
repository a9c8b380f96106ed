"""The frameworks integrators use, against a live Agentsite (issue 25, "Done when").

LangChain `ChatOpenAI` (invoke, stream, `with_structured_output`), a LangGraph ReAct loop
with a local tool, the OpenAI Agents SDK on its default Responses path (a local function
tool, `output_type`), a failure that the client's own retries must not turn into more
runs, and Google ADK over A2A both ways: `RemoteA2aAgent` calling Agentsite as a sub-agent,
and an ADK `to_a2a` agent (uvicorn, started by the test) that Agentsite runs once it was
added in the admin. The ADK agents' model is the scripted server too, through ADK's own
chat-completions client (`ApigeeLlm`, `apigee/openai/...`: LiteLlm would need litellm). The
frameworks live in their own pinned virtualenv (tests/interop/requirements.txt,
built here or by `make test-interop`); each case runs tests/interop/clients.py there against
a Daphne server over the test database, whose model is a scripted OpenAI-compatible server,
so the test checks what the framework got, what the model was sent and what was stored.
Skipped, saying why, when that virtualenv cannot be built (no PyPI).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from runs import models as run_orm
from runs.core.responses import ECHO_EXTENSION
from sessions_app import models as session_orm
from sessions_app.mapping import event_from_row
from tests.support.daphne import LiveServer, free_port, live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

# The first test's set-up may build the venv: more than the suite's 300 s per test.
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
REQUIREMENTS = HERE / "requirements.txt"
BUILD_TIMEOUT_S = 420  # the whole build; under the first test's timeout, so that it skips instead
CASE_TIMEOUT_S = 120


def _stamp() -> Path:
    """The file that says the venv holds this requirements file (as the Makefile names it)."""
    return VENV / f".installed-{hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]}"


def _build() -> str | None:
    """Build the interop venv when it is not current; the reason it could not be, else None."""
    if _stamp().exists():
        return None
    # Few retries: without PyPI the suite should skip soon, not after pip's long backoff.
    steps = {
        "venv": [sys.executable, "-m", "venv", "--clear", str(VENV)],
        "pip install": [
            str(VENV / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--retries",
            "1",
            "--timeout",
            "30",
            "-r",
            str(REQUIREMENTS),
        ],
    }
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    for name, step in steps.items():
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return f"building {VENV} took over {BUILD_TIMEOUT_S}s"
        if done.returncode != 0:
            return f"could not build {VENV} ({name}): {done.stderr.strip()[-400:]}"
    _stamp().touch()
    return None


@pytest.fixture(scope="module")
def interop_python() -> Path:
    problem = _build()
    if problem is not None:
        pytest.skip(f"the interop frameworks are not installed: {problem}")
    return VENV / "bin" / "python"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: Any, interop_python: Path, model: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    # Auto memory off: its extraction would take a scripted answer. No model retries inside
    # the server: the failure case needs the upstream's error to fail the run at once.
    env = {
        "AGENTSITE_MODEL": "gpt-4o-mini",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-test",
        "AGENTSITE_MEMORY_AUTO": "0",
        "AGENTSITE_MODEL_MAX_RETRIES": "0",
    }
    with live_daphne(tmp_path_factory.mktemp("interop"), env=env) as live:
        yield live


@pytest.fixture
def script(model: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    """The module's model; what a test scripts must be used by its end."""
    model.requests.clear()
    yield model
    try:
        model.assert_consumed()
    finally:
        while model.remaining:  # the next test starts with an empty script
            model._next_step({})
        model.unexpected.clear()


def run_case(python: Path, server: LiveServer, user: Any, case: str, **extra_env: str) -> dict[str, Any]:
    """Run one framework case in the interop venv; its JSON result."""
    token = Token.objects.get_or_create(user=user)[0].key
    env = {**os.environ, "AGENTSITE_URL": server.url, "AGENTSITE_TOKEN": token, **extra_env}
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)  # the client knows the server, nothing else
    done = subprocess.run(
        [str(python), str(HERE / "clients.py"), case], capture_output=True, text=True, timeout=CASE_TIMEOUT_S, env=env
    )
    assert done.returncode == 0, f"{case} failed:\n{done.stderr[-3000:]}\nserver log:\n{server.output()[-3000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _runs(user: Any) -> list[run_orm.Run]:
    return list(run_orm.Run.objects.filter(user=user).order_by("created_at"))


def _user_turns(user: Any) -> list[str]:
    events = session_orm.Event.objects.filter(session__user=user).order_by("created_at", "seq")
    return [e.text for e in events if e.role == "user"]


def test_langchain_chat_openai_invokes_streams_and_returns_structured_output(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    incident = {"host": "payments.internal", "expired": True, "severity": "high"}
    script.script(
        "INC-1042 is a certificate expiry.",
        ServerStep.answer("The certificate expired.", chunk_size=4),
        json.dumps(incident),
        "The same answer, as a response.",
    )
    got = run_case(interop_python, server, alice, "langchain_chat")
    assert got["invoke"] == "INC-1042 is a certificate expiry."
    assert got["stream"] == "The certificate expired." and got["stream_chunks"] > 3
    assert got["structured"] == incident
    assert script.requests[2]["response_format"]["type"] == "json_schema"
    assert got["responses"] == "The same answer, as a response."
    assert [r.status for r in _runs(alice)] == ["completed"] * 4


def test_a_langgraph_react_loop_runs_its_local_tool_and_continues_one_session(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    script.script(ServerStep.call("get_weather", {"city": "Paris"}, id="call_lg1"), "It is 18C and sunny in Paris.")
    got = run_case(interop_python, server, alice, "langgraph_react")
    messages = got["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    assert messages[1]["tool_calls"] == ["get_weather"] and messages[2]["content"] == "Paris: 18C and sunny"
    assert messages[-1]["content"] == "It is 18C and sunny in Paris."
    # The model's second step saw the result the client's tool gave.
    result = script.requests[1]["messages"][-1]
    assert (result["role"], result["tool_call_id"], result["content"]) == ("tool", "call_lg1", "Paris: 18C and sunny")
    # One session and one run: the resent history continued the run that waited for the tool.
    assert session_orm.Session.objects.filter(user=alice).count() == 1
    assert [r.status for r in _runs(alice)] == ["completed"]


def test_the_agents_sdk_on_its_default_responses_path_calls_a_local_tool_and_returns_its_output_type(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    script.script(
        ServerStep.call("get_weather", {"city": "Paris"}, id="call_sdk1"), json.dumps({"city": "Paris", "celsius": 18})
    )
    got = run_case(interop_python, server, alice, "agents_sdk")
    assert got["final_output"] == {"city": "Paris", "celsius": 18}
    assert "tool_call_item" in got["items"] and "tool_call_output_item" in got["items"]
    first, second = script.requests
    assert "get_weather" in {t["function"]["name"] for t in first["tools"]}
    assert first["response_format"]["type"] == "json_schema"
    # The SDK's instructions reach the model beside the agent's own.
    assert any("Report the weather as asked." in m["content"] for m in first["messages"] if m["role"] == "system")
    assert second["messages"][-1]["content"] == "Paris: 18C and sunny"
    assert session_orm.Session.objects.filter(user=alice).count() == 1
    assert _user_turns(alice) == ["What is the weather in Paris?"]
    # Both requests came through /v1/responses: their turns hold what the request said.
    turns = [
        event_from_row(e) for e in session_orm.Event.objects.filter(session__user=alice, role__in=("user", "tool"))
    ]
    assert len(turns) == 2 and all(ECHO_EXTENSION in e.extensions for e in turns)


def test_an_agents_sdk_handoff_into_an_agentsite_agent_streams_its_answer(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    script.script(
        ServerStep.call("transfer_to_support_desk", {}, id="call_h1"),
        ServerStep.answer("Support desk: INC-1042 is a certificate expiry.", chunk_size=6),
    )
    got = run_case(interop_python, server, alice, "agents_sdk_handoff")
    assert got["final_output"] == "Support desk: INC-1042 is a certificate expiry."
    assert got["last_agent"] == "support desk"
    assert {"raw_response_event", "run_item_stream_event", "agent_updated_stream_event"} <= set(got["stream_events"])
    first, second = script.requests
    assert "transfer_to_support_desk" in {t["function"]["name"] for t in first["tools"]}
    # The support agent's model saw the question and the handoff (a call of the client's, as context).
    sent = json.dumps(second["messages"])
    assert "What is INC-1042?" in sent and "transfer_to_support_desk" in sent
    assert any("Answer ticket questions." in m["content"] for m in second["messages"] if m["role"] == "system")


def test_a_failure_retried_by_the_clients_leaves_one_run_and_one_user_turn_per_call(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    script.script(ServerStep.error(500, "the model is down"), ServerStep.error(500, "the model is still down"))
    got = run_case(interop_python, server, alice, "retried_failure")
    refused = {"status": 422, "should_retry": "false"}
    assert got == {"langchain": refused, "agents_sdk": refused}
    assert [r.status for r in _runs(alice)] == ["failed", "failed"]
    assert sorted(_user_turns(alice)) == sorted(["Check the fleet.", "Check the fleet again."])


def test_a_slow_run_retried_by_the_client_with_its_key_is_one_run_and_one_user_turn(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    # Longer than the client's 2 s timeout: it retries (same key), and a retry joins the run.
    script.script(ServerStep.delay(3.5, then=ServerStep.answer("Yes: it expires tomorrow.")))
    got = run_case(interop_python, server, alice, "retried_timeout")
    assert got == {"invoke": "Yes: it expires tomorrow."}
    assert [r.status for r in _runs(alice)] == ["completed"]
    assert _user_turns(alice) == ["Renew the certificate?"]


def test_an_adk_remote_a2a_agent_as_a_sub_agent_stores_agentsites_answer_once(
    interop_python: Path, server: LiveServer, script: ScriptedOpenAIServer, alice: Any
) -> None:
    # Agentsite's support agent looks a ticket up (a progress status over A2A), then answers;
    # called streamed, then not.
    answers = ["INC-1042 is a certificate expiry on payments.internal.", "INC-1042: the certificate expired."]
    transfer = ServerStep.call("transfer_to_agent", {"agent_name": "agentsite"})
    script.script(
        transfer,
        ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_adk1"),
        ServerStep.answer(answers[0], chunk_size=5),
        transfer,
        ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_adk2"),
        answers[1],
    )
    got = run_case(interop_python, server, alice, "adk_remote_sub_agent", ADK_MODEL_URL=script.base_url)
    for mode, answer in zip(("streamed", "not_streamed"), answers, strict=True):
        parts = got[mode]
        assert not [p for p in parts if "error" in p], (mode, got)
        # The root agent's model transferred to the remote agent...
        assert [(p["call"], p["response"]) for p in parts if p["author"] == "triage"] == [
            ("transfer_to_agent", None),
            (None, "transfer_to_agent"),
        ], mode
        # ...whose session holds Agentsite's answer once: no progress text, no thoughts, no copies.
        assert [p["text"] for p in parts if p["author"] == "agentsite" and p["text"]] == [answer], (mode, got)
        assert not any(p["thought"] for p in parts), mode
    # One run per call, one user turn each: the question, with the transfer ADK quotes after it.
    assert [r.status for r in _runs(alice)] == ["completed", "completed"]
    turns = _user_turns(alice)
    assert len(turns) == 2 and all(t.startswith("What is INC-1042?\n") and "transfer_to_agent" in t for t in turns)
    # ADK's root agent asked the model with its transfer tool; Agentsite's model got the question once.
    assert "transfer_to_agent" in {t["function"]["name"] for t in script.requests[0]["tools"]}
    assert json.dumps(script.requests[1]["messages"]).count("What is INC-1042?") == 1


ADK_ANSWER = "ADK here: the payments.internal certificate expired on 2026-11-30."


@pytest.fixture
def adk_agent(interop_python: Path, tmp_path: Path, model: ScriptedOpenAIServer) -> Iterator[str]:
    """An ADK agent served with `to_a2a` (uvicorn, in the interop venv), its model the scripted
    server; its URL."""
    port = free_port()
    log = tmp_path / "adk.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(interop_python), str(HERE / "clients.py"), "adk_serve", str(port)],
            env={**os.environ, "ADK_MODEL_URL": model.base_url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/.well-known/agent-card.json", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                f"ADK did not start:\n{log.read_text()[-3000:]}"
            )
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_agentsite_runs_an_adk_to_a2a_agent_registered_in_the_admin_without_code(
    adk_agent: str, script: ScriptedOpenAIServer, admin_client: Any, alice_api: Any, settings: Any
) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # no post-run extraction asks the model
    script.script(ADK_ANSWER, ADK_ANSWER)  # what the ADK agent's model answers, on each surface
    response = admin_client.post(
        "/admin/runs/remoteagent/add/",
        {
            "name": "adk-certs",
            "url": adk_agent,
            "description": "",
            "header_name": "",
            "as_agent": "on",
            "tool_of": "",
            "enabled": "on",
            "token": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    row = run_orm.RemoteAgent.objects.get(name="adk-certs")
    assert row.card["name"] == "adk_certs" and row.description == "Knows the certificates of the fleet."

    listed = {agent["name"]: agent for agent in alice_api.get("/api/agents/").json()["results"]}
    assert listed["adk-certs"]["kind"] == "a2a"
    run = alice_api.post(
        "/api/runs/",
        {"message": "When did the payments certificate expire?", "agent": "adk-certs", "wait": True},
        format="json",
    )
    assert run.status_code == 201, run.content
    assert run.json()["status"] == "completed", run.json()
    events = alice_api.get(f"/api/sessions/{run.json()['session_id']}/events/").json()["results"]
    [answer] = [e for e in events if e["role"] == "assistant"]
    assert (answer["author"], answer["text"]) == ("adk-certs", ADK_ANSWER)
    chat = alice_api.post(
        "/v1/chat/completions",
        {"model": "adk-certs", "messages": [{"role": "user", "content": "And the date again?"}]},
        format="json",
    )
    assert chat.status_code == 200, chat.content
    assert chat.json()["choices"][0]["message"]["content"] == ADK_ANSWER
    # The ADK agent's model got each question, with the agent's instruction.
    sent = [json.dumps(request["messages"]) for request in script.requests]
    assert "When did the payments certificate expire?" in sent[0] and "And the date again?" in sent[1]
    assert all("Answer certificate questions." in text for text in sent)
