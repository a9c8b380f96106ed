"""`GET /api/sessions/<id>/events/`: the completion marker says how the run ended, with the
state it changed and its final answer (SPEC 1.9.2), so a reader of the ledger alone sees both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.errors import ModelError
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool

pytestmark = pytest.mark.django_db(transaction=True)


def remember_ticket(tool_context: ToolContext, ticket_id: str) -> dict[str, str]:
    """Remember the ticket the user asked about.

    Args:
        ticket_id: the ticket's id
    """
    tool_context.state_delta["last_ticket"] = ticket_id
    return {"id": ticket_id, "status": "open"}


@pytest.fixture
def use_support(settings: Any) -> Iterator[Callable[[ScriptedModel], None]]:
    """The process's run manager serving a `support` agent with `remember_ticket`, on the
    Django backends."""
    from agentsite.composition import build_runner, run_manager
    from runs.backends import DjangoRunStore
    from sessions_app.backends import DjangoSessionService

    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer

    def use(model: ScriptedModel) -> None:
        agent = LLMAgent(name="support", model=model, tools=[FunctionTool(remember_ticket)])
        run_manager().reset(
            lambda: Runner(
                app=settings.AGENTSITE_APP,
                agents=[agent],
                session_service=DjangoSessionService(),
                run_store=DjangoRunStore(),
            )
        )

    yield use
    run_manager().reset(build_runner)


def test_the_completion_event_shows_the_final_state_delta_and_final_choices(
    alice_api: Any, bob_api: Any, use_support: Callable[[ScriptedModel], None]
) -> None:
    use_support(ScriptedModel.of(ScriptStep.call("remember_ticket", {"ticket_id": "INC-9"}), "INC-9 is open."))
    run = alice_api.post("/api/runs/", {"message": "INC-9?", "wait": True}, format="json").json()
    assert run["status"] == "completed", run

    response = alice_api.get(f"/api/sessions/{run['session_id']}/events/")
    assert response.status_code == 200, response.content
    events = response.json()["results"]
    answer, completion = events[-2], events[-1]
    assert completion["object"] == "runner.completion"
    assert (completion["run_id"], completion["status"]) == (run["id"], "completed")
    assert completion["final_state_delta"] == {"last_ticket": "INC-9"}
    assert completion["final_choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "INC-9 is open."},
            "finish_reason": "stop",
            "event_id": answer["id"],
        }
    ]
    # Only the marker carries them; the tool's own event holds the delta it wrote.
    assert not any("final_choices" in e or "final_state_delta" in e for e in events[:-1])
    assert bob_api.get(f"/api/sessions/{run['session_id']}/events/").status_code == 404


def test_a_run_that_ends_without_an_answer_has_no_final_choices(
    alice_api: Any, use_support: Callable[[ScriptedModel], None]
) -> None:
    use_support(ScriptedModel.of(ScriptStep.fail(ModelError("upstream down"))))
    run = alice_api.post("/api/runs/", {"message": "INC-9?", "wait": True}, format="json").json()
    assert run["status"] == "failed", run

    completion = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"][-1]
    assert completion["object"] == "runner.completion" and completion["status"] == "failed"
    assert "final_choices" not in completion and "final_state_delta" not in completion
