"""The agent registry (issue 22, item 2): AGENTSITE_AGENTS names `module:factory` entries; a
project adds its own agent, with its own model, through the setting and runs it on /api/runs/."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.agents import AgentContext, AgentRegistry
from agentsite.context_policy import ContextPolicy
from runs.core.agents.llm import LLMAgent
from runs.core.context.pinned import PINNED_HEADER
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
    return LLMAgent(
        name="billing",
        model=model,
        description="Answers billing questions.",
        instruction="You answer billing questions.",
        governance=context.governance,
    )


def two_agents(context: AgentContext) -> list[LLMAgent]:
    return [billing_agent(context), LLMAgent(name="refunds", model=context.model)]


def not_an_agent(context: AgentContext) -> str:
    return "nope"


MODELS: dict[str, ScriptedModel] = {}
"""The models the last `policy_agents` call gave its agents, by agent name."""


def policy_agents(context: AgentContext) -> list[LLMAgent]:
    """Two agents of one project with different context policies: `pinning` carries the
    user's standing instructions in a pinned block, `plain` does not."""
    agents = []
    for name, pinned in (("pinning", True), ("plain", False)):
        MODELS[name] = ScriptedModel.of("Noted.", "Yes, it is paid.", name=f"{name}-model")
        policy = replace(context.policy, pinned_intent=pinned)
        agents.append(LLMAgent(name=name, model=MODELS[name], governance=context.governance_for(policy)))
    return agents


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

    response = alice_api.post(
        "/api/runs/", {"message": "Is my invoice paid?", "agent": "billing", "wait": True}, format="json"
    )
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
    twice = AgentRegistry.from_paths(
        ["tests.runs.test_agent_registry:billing_agent", "tests.runs.test_agent_registry:two_agents"]
    )
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


def test_each_registered_agent_calls_its_model_under_its_own_context_policy(alice_api: Any, registry: Any) -> None:
    registry(["tests.runs.test_agent_registry:policy_agents"])
    for agent in ("pinning", "plain"):
        session_id = None
        for message in ("Always answer in German.", "Is my invoice paid?"):
            body = {
                "message": message,
                "agent": agent,
                "wait": True,
                **({"session_id": session_id} if session_id else {}),
            }
            response = alice_api.post("/api/runs/", body, format="json")
            assert response.status_code == 201, response.content
            assert response.json()["status"] == "completed", response.json()
            session_id = response.json()["session_id"]
    requests = {name: [" ".join(str(m.content) for m in r.messages) for r in MODELS[name].requests] for name in MODELS}
    assert len(requests["pinning"]) == len(requests["plain"]) == 2
    assert PINNED_HEADER in requests["pinning"][1] and "Always answer in German." in requests["pinning"][1]
    assert PINNED_HEADER not in requests["plain"][1]


def test_an_agents_own_policy_without_summaries_gets_no_in_run_summaries() -> None:
    from runs.core.context.governance import extractive_summarizer
    from sessions_app.core.summary import SummaryEngine

    engine = SummaryEngine(summarizer=extractive_summarizer(budget_tokens=256))
    context = AgentContext(
        model=ScriptedModel(), model_named=lambda _name: ScriptedModel(), summary_engine=engine, context_window=4096
    )
    assert context.governance_for(ContextPolicy()).summaries is engine
    own = context.governance_for(ContextPolicy(summaries=False, compaction_ratio=0.5))
    assert own.summaries is None and own.precall.ratio == 0.5 and own.context_window == 4096
