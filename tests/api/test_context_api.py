"""The context inspector API, and governance end to end over the REST API and a real OpenAI client."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def governed(settings: Any) -> Any:
    """Governance with explicit, small knobs (not the demo's), summaries as asyncio jobs."""
    settings.AGENTSITE_DEMO_GOVERNANCE = False
    settings.AGENTSITE_SUMMARY_JOBS = "inprocess"
    settings.AGENTSITE_SUMMARY_LOCK = "database"
    settings.AGENTSITE_TOOL_RESULT_MAX_TOKENS = 100
    return settings


@pytest.fixture
def use_models() -> Iterator[Callable[..., None]]:
    """Serve the demo agents on `model`, summarizing with `summary_model`."""
    from agentsite.composition import build_runner, run_manager

    manager = run_manager()

    def use(model: Model, summary_model: Model | None = None) -> None:
        manager.reset(lambda: build_runner(model, summary_model))

    yield use
    manager.reset(build_runner)


def run(client: Any, message: str, session_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "wait": True}
    if session_id:
        body["session_id"] = session_id
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "completed", response.json()
    return response.json()


def summary_jobs_done() -> None:
    from agentsite.composition import run_manager

    async def join(runner: Any) -> None:
        if runner.summary_scheduler is not None:
            await runner.summary_scheduler.join()

    run_manager().call(join, timeout=30)


def summarize_first_turns(session_id: str, through_seq: int, text: str) -> None:
    from asgiref.sync import async_to_sync
    from django.conf import settings

    from sessions_app import models as orm
    from sessions_app.backends import DjangoSessionService
    from sessions_app.core.session import SessionKey, Summary, SummaryBoundary

    row = orm.Session.objects.get(id=session_id)
    last = orm.Event.objects.get(session=row, seq=through_seq)
    key = SessionKey(app=settings.AGENTSITE_APP, user_id=str(row.user_id), session_id=session_id)
    async_to_sync(DjangoSessionService().advance_summary)(
        key,
        Summary(
            filter_key=settings.AGENTSITE_APP,
            text=text,
            covered_events=2,
            covered_tokens=4000,
            boundary=SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.event_id, last_seq=through_seq),
        ),
    )


def test_the_context_shows_the_summary_events_and_placeholders_with_token_counts(
    alice_api: Any, governed: Any, use_model: Callable[[Model], None]
) -> None:
    governed.AGENTSITE_SUMMARIES = False  # the summary is written by hand below
    use_model(
        ScriptedModel.of(
            "first answer",
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_old"),
            "INC-1042 was an expired certificate.",
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1187"}, id="call_new"),
            "INC-1187 is open.",
        )
    )
    first = run(alice_api, "Why does checkout fail?")
    session_id = first["session_id"]
    run(alice_api, "What happened in INC-1042?", session_id)
    run(alice_api, "And INC-1187?", session_id)
    summarize_first_turns(session_id, 3, "The user asked why checkout fails.")  # user, answer, completion

    response = alice_api.get(f"/api/sessions/{session_id}/context/")
    assert response.status_code == 200, response.content
    context = response.json()
    assert context["agent"] == "support" and context["filter_key"] == "agentsite" and context["context_window"] == 8192
    assert context["boundary"]["last_seq"] == 3
    kinds = [(b["kind"], b["role"]) for b in context["blocks"]]
    assert kinds == [
        ("instruction", "system"),
        ("summary", "system"),
        ("event", "user"),
        ("event", "assistant"),
        ("placeholder", "tool"),
        ("event", "assistant"),
        ("event", "user"),
        ("event", "assistant"),
        ("event", "tool"),
        ("event", "assistant"),
    ]
    summary, placeholder, kept = context["blocks"][1], context["blocks"][4], context["blocks"][8]
    assert (
        summary["version"] == 1
        and summary["preview"] == "The user asked why checkout fails."
        and summary["tokens"] > 10
    )
    assert placeholder["tool_call_id"] == "call_old" and placeholder["compaction"] == "pass1"
    assert placeholder["original_tokens"] > placeholder["tokens"] and placeholder["seq"] == 6
    assert kept["tool_call_id"] == "call_new" and "compaction" not in kept  # the last completed request
    assert all(isinstance(b["tokens"], int) and b["tokens"] > 0 for b in context["blocks"])
    totals = context["totals"]
    assert totals["sent_tokens"] == sum(b["tokens"] for b in context["blocks"])
    assert (
        totals["raw_tokens"] > totals["sent_tokens"]
        and totals["saved_tokens"] == totals["raw_tokens"] - totals["sent_tokens"]
    )
    assert totals["compaction"]["pass1"] == 1 and totals["ledger_events"] == 13
    # Every past model call, oldest first, with what it sent against the raw ledger.
    calls = context["calls"]
    assert [c["seq"] for c in calls] == [2, 5, 7, 10, 12]
    assert all(c["sent_tokens"] <= c["raw_tokens"] for c in calls)
    # Each of those calls still had INC-1042's request as its last completed one (protected);
    # only the next call, after INC-1187's, compacts it.
    assert all(c["compaction"]["pass1"] == 0 for c in calls) and calls[0]["summary"] is None


def test_another_users_session_context_is_not_found(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("hello"))
    session_id = run(alice_api, "hi")["session_id"]
    response = bob_api.get(f"/api/sessions/{session_id}/context/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert alice_api.get(f"/api/sessions/{session_id}/context/").status_code == 200


def test_the_openapi_schema_documents_the_context_endpoint(alice_api: Any) -> None:
    schema = alice_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/sessions/{session_id}/context/"]["get"]
    assert "next model call" in operation["summary"]
    components = schema["components"]["schemas"]
    assert {"blocks", "totals", "calls", "boundary"} <= set(components["ContextOutput"]["properties"])


LONG_QUESTION = (
    "Checkout has been failing since this morning. Here is what I saw in the browser console, "
    "the load balancer and the payments dashboard: "
    + "upstream connect error or disconnect/reset before headers; "
    * 60
)


def test_governance_end_to_end_over_the_openai_protocol(
    alice_api: Any, governed: Any, openai_server: ScriptedOpenAIServer, use_models: Callable[..., None]
) -> None:
    # The summary trigger: more than 500 tokens to summarize (the first question alone is more).
    governed.AGENTSITE_SUMMARY_TRIGGER_RATIO = 0.0001
    governed.AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = 500
    openai_server.script(
        "It is the expired certificate.",
        ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_ticket"),
        "INC-1042: the certificate expired; renew it.",
        "Yes, renew it with the full chain.",
        "You are welcome.",
    )
    with ScriptedOpenAIServer("SUMMARY-1: checkout fails with upstream connect errors.") as summaries:
        use_models(
            OpenAIModel(model="gpt-4o-mini", base_url=openai_server.base_url, api_key="sk-test"),
            OpenAIModel(model="gpt-4o-mini", base_url=summaries.base_url, api_key="sk-test"),
        )
        session_id = run(alice_api, LONG_QUESTION)["session_id"]
        summary_jobs_done()
        for question in ("What happened in INC-1042?", "Should I renew it?", "Thanks!"):
            run(alice_api, question, session_id)
            summary_jobs_done()
        summaries.assert_consumed()
        openai_server.assert_consumed()
        [summary_request] = summaries.requests

    # The summary request: one standalone, non-streaming prompt with the first turn in it.
    assert summary_request["stream"] is False
    assert "<conversation>" in summary_request["messages"][-1]["content"]
    assert "upstream connect error" in summary_request["messages"][-1]["content"]

    # What the agent's model really received on the last turn.
    last = openai_server.requests[-1]["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    # One section, headed by the ledger range it stands for (issue 12, C1): from the first
    # event to the boundary (the answer, or the run's completion marker when the job saw it).
    assert re.search(
        r"<summary_of_previous_interactions>\n\[events 1-[23]\]\nSUMMARY-1: checkout fails with upstream connect errors\.",
        last[1]["content"],
    )
    assert not any("upstream connect error or disconnect" in (m.get("content") or "") for m in last)  # summarized away
    placeholder = last[4]
    assert placeholder["tool_call_id"] == "call_ticket" and last[3]["tool_calls"][0]["id"] == "call_ticket"
    assert placeholder["content"].startswith("[compacted tool result]")
    assert "tool_name: lookup_ticket" in placeholder["content"] and "event_id: " in placeholder["content"]
    assert last[-1] == {"role": "user", "content": "Thanks!"}  # the active turn, intact

    # The ledger still holds every byte of the compacted result.
    events = alice_api.get(f"/api/sessions/{session_id}/events/").json()["results"]
    tool_event = next(e for e in events if e.get("tool_call_id") == "call_ticket")
    assert json.loads(tool_event["text"])["ticket"]["id"] == "INC-1042"
    assert events[0]["text"] == LONG_QUESTION

    # The inspector tells the same story.
    context = alice_api.get(f"/api/sessions/{session_id}/context/").json()
    assert context["blocks"][1]["kind"] == "summary" and context["boundary"]["last_seq"] >= 2
    assert [b["kind"] for b in context["blocks"]].count("placeholder") == 1
    assert context["calls"][-1]["summary"]["version"] == 1
