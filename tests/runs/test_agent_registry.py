"""The agent registry (issue 22, item 2): AGENTSITE_AGENTS names `module:factory` entries; a
project adds its own agent, with its own model, through the setting and runs it on /api/runs/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.agents import AgentContext, AgentRegistry
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from skills_app.core.repository import InMemorySkillRepository

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = [
    "agentsite.demo.factories:support_agent",
    "agentsite.demo.factories:general_agent",
    "agentsite.demo.factories:troubleshoot_agent",
]
ANSWER = "Billing agent here: your invoice is paid."


def billing_agent(context: AgentContext) -> LLMAgent:
    """A project's agent, defined outside Agentsite: its own model and instruction, no tools."""
    model = context.model if context.replay else ScriptedModel(steps=[ScriptStep.answer(ANSWER)], name="billing-model")
    return LLMAgent(name="billing", model=model, description="Answers billing questions.",
                    instruction="You answer billing questions.", governance=context.governance)


def two_agents(context: AgentContext) -> list[LLMAgent]:
    return [billing_agent(context), LLMAgent(name="refunds", model=context.model)]


def not_an_agent(context: AgentContext) -> str:
    return "nope"


@pytest.fixture
def registry(settings: Any) -> Iterator[Any]:
    """Serve the agents of the given AGENTSITE_AGENTS entries (the runner rebuilt on them)."""
    from agentsite.runtime import run_manager

    def use(entries: list[str], default: str = "") -> None:
        settings.AGENTSITE_AGENTS = entries
        settings.AGENTSITE_DEFAULT_AGENT = default
        run_manager().reset()

    yield use
    run_manager().reset()


def test_the_default_registry_holds_the_demo_agents(alice_api: Any) -> None:
    response = alice_api.get("/api/agents/")
    assert response.status_code == 200
    listed = [(agent["name"], agent["default"]) for agent in response.json()["results"]]
    assert listed == [("support", True), ("general", False), ("troubleshoot", False)]


def test_an_agent_registered_from_another_module_is_listed_and_runs_on_api_runs(alice_api: Any, registry: Any) -> None:
    registry([*DEMO, "tests.runs.test_agent_registry:billing_agent"])
    listed = {agent["name"]: agent for agent in alice_api.get("/api/agents/").json()["results"]}
    assert set(listed) == {"support", "general", "troubleshoot", "billing"}
    assert listed["billing"]["model"] == "billing-model"
    assert listed["billing"]["description"] == "Answers billing questions."
    assert listed["support"]["default"] is True

    response = alice_api.post("/api/runs/", {"message": "Is my invoice paid?", "agent": "billing", "wait": True},
                              format="json")
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed", run
    assert run["agent"] == "billing"
    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    answers = [e for e in events if e.get("role") == "assistant"]
    assert answers[-1]["text"] == ANSWER
    assert answers[-1]["author"] == "billing"


def test_a_registry_without_the_demo_serves_only_the_project_agents_and_the_first_is_the_default(
    alice_api: Any, registry: Any
) -> None:
    registry(["tests.runs.test_agent_registry:two_agents"])
    listed = [(agent["name"], agent["default"]) for agent in alice_api.get("/api/agents/").json()["results"]]
    assert listed == [("billing", True), ("refunds", False)]
    response = alice_api.post("/api/runs/", {"message": "Hello", "wait": True}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["agent"] == "billing"
    assert response.json()["status"] == "completed"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("tests.runs.test_agent_registry", "module:factory"),
        ("tests.runs.no_such_module:agent", "cannot import 'tests.runs.no_such_module'"),
        ("tests.runs.test_agent_registry:no_such_factory", "no callable 'no_such_factory'"),
    ],
)
def test_a_bad_registry_entry_stops_the_start_naming_it(entry: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        AgentRegistry.from_paths([entry])


def test_a_factory_that_returns_no_agent_or_a_taken_name_is_refused() -> None:
    context = AgentContext(model=ScriptedModel(), model_named=lambda _name: ScriptedModel())
    with pytest.raises(ImproperlyConfigured, match="returned 'nope', not an agent"):
        AgentRegistry.from_paths(["tests.runs.test_agent_registry:not_an_agent"]).build(context)
    twice = AgentRegistry.from_paths(["tests.runs.test_agent_registry:billing_agent",
                                      "tests.runs.test_agent_registry:two_agents"])
    with pytest.raises(ImproperlyConfigured, match="both make an agent named 'billing'"):
        twice.build(context)


def test_the_evolution_replay_rebuilds_the_evidence_runs_own_agent_on_the_replay_model(registry: Any) -> None:
    from agentsite import runtime

    registry([*DEMO, "tests.runs.test_agent_registry:billing_agent"])
    replay_model = ScriptedModel(name="evolution-replay")
    skills = InMemorySkillRepository([])
    billing = runtime.replay_agent("billing", replay_model, skills)
    assert billing.name == "billing" and billing.model_name == "evolution-replay"
    assert runtime.replay_agent("general", replay_model, skills).name == "general"
    assert runtime.replay_agent("", replay_model, skills).name == "support"  # the default agent
    with pytest.raises(LookupError, match="'gone'"):
        runtime.replay_agent("gone", replay_model, skills)
