"""Issue 21, what the demo teaches: the Effectiveness gate replays the evidence task without
the candidate and with it, on the demo support agent and the offline planner, and passes
only a candidate that is not worse (failed calls, tool calls lost, answer coverage of the
evidence); when it fails, its detail and findings say why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentsite.demo.agents import build_support_agent
from evolution_app.core.delta import ReviewDelta, scan_delta
from evolution_app.core.gates import (
    EffectivenessGate,
    GateContext,
    ReplayOutcome,
    evidence_terms,
)
from evolution_app.core.reconcile import Proposal
from evolution_app.core.replay import AgentReplayer
from evolution_app.core.review import HeuristicReviewer, ReviewInput
from evolution_app.core.spec import render_files
from runs.core.agents.base import Agent
from runs.core.llm.base import Model
from runs.core.llm.offline import OfflineModel
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from skills_app.core.repository import FolderSkillRepository, SkillRepository
from skills_app.core.tools import SkillsConfig, SkillToolset

DEMO_SKILLS = Path(__file__).resolve().parents[2] / "agentsite" / "demo" / "skills"
README_TASK = (
    "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com "
    "and search the logs and tickets"
)
FLEET_TASK = "Check the certificate of payments.internal.example.com, scan the fleet, search the logs and tickets"


@pytest.fixture(autouse=True)
def _fast_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSITE_DEMO_SCAN_DELAY_S", "0")


def support(model: Model, skills: SkillRepository) -> Agent:
    return build_support_agent(model, skills=SkillToolset(skills, config=SkillsConfig(profile="knowledge_only")))


def support_by_name(*arguments: Any) -> Agent:
    """The replay's agent factory: (the evidence's agent name, when the replayer passes it,)
    the model and the skills; the evidence here always ran on the support agent."""
    *name, model, skills = arguments
    assert name in ([], ["support"])
    return support(model, skills)


async def evidence_run(task: str) -> ReviewDelta:
    """The recorded run the candidate is learned from: the support agent on the offline model."""
    sessions = InMemorySessionService()
    runner = Runner(
        app="test", agents=[support(OfflineModel(), FolderSkillRepository([DEMO_SKILLS]))], session_service=sessions
    )
    events = [e async for e in runner.run(user_id="alice", message=task)]
    record = await runner.status(events[-1].extensions["run_id"])
    session = await sessions.get_session(SessionKey(app="test", user_id="alice", session_id=record.session_id))
    await runner.close()
    return scan_delta(session.events)


async def learned(delta: ReviewDelta) -> GateContext:
    """The heuristic reviewer's candidate for the delta, as the gates see it."""
    decision = await HeuristicReviewer().review(ReviewInput(app="test", user_id="alice", session_id="s", delta=delta))
    [spec] = decision.skills
    return GateContext(proposal=Proposal(action="create", spec=spec), files=render_files(spec), delta=delta)


def replayer() -> AgentReplayer:
    return AgentReplayer(
        agent_factory=support_by_name, library=FolderSkillRepository([DEMO_SKILLS]), mode="model", model=OfflineModel()
    )


async def test_the_readme_candidate_is_not_worse_than_the_run_without_it_and_passes() -> None:
    context = await learned(await evidence_run(README_TASK))
    assert context.proposal.spec.name == "search-logs-inspect-certificate-lookup-ticket"
    terms = evidence_terms(context.delta)
    assert "payments.internal.example.com" in terms and "INC-1042" in terms

    result = await EffectivenessGate(replayer=replayer()).check(context)

    assert result.status == "pass", result.findings
    assert "without: 3 tool call(s), 0 failed" in result.detail
    assert f"{len(terms)}/{len(terms)} evidence term(s)" in result.detail


async def test_a_candidate_that_crowds_out_a_tool_call_fails_and_the_gate_says_which() -> None:
    # Four tools fit the fleet task; with the candidate, loading it takes a slot of the step
    # and the ticket lookup (and the past incident it finds) drops out of the answer.
    context = await learned(await evidence_run(FLEET_TASK))

    result = await EffectivenessGate(replayer=replayer()).check(context)

    assert result.status == "fail"
    assert any("tool calls lost: lookup_ticket" in f for f in result.findings), result.findings
    assert any(f.startswith("the answer covers less of the evidence:") and "INC-" in f for f in result.findings)
    assert "with the candidate:" in result.detail and "without:" in result.detail


class Outcomes:
    """A replayer that answers from two prepared outcomes (the gate's arithmetic alone)."""

    def __init__(self, *, without: ReplayOutcome, with_: ReplayOutcome) -> None:
        self.outcomes = {False: without, True: with_}
        self.asked: list[bool] = []

    async def replay(self, context: GateContext, *, with_candidate: bool = True) -> ReplayOutcome:
        self.asked.append(with_candidate)
        return self.outcomes[with_candidate]


async def test_more_failed_calls_with_the_candidate_fail_the_gate_and_equal_outcomes_pass() -> None:
    context = await learned(await evidence_run(README_TASK))
    answer = context.delta.answers[0].text
    tools = ("search_logs", "inspect_certificate", "lookup_ticket")
    good = ReplayOutcome(completed=True, answer=answer, tool_calls=3, skill_seen=True, succeeded_tools=tools)
    worse = ReplayOutcome(
        completed=True, answer=answer, tool_calls=4, tool_errors=1, skill_seen=True, succeeded_tools=tools
    )

    same = Outcomes(without=good, with_=good)
    assert (await EffectivenessGate(replayer=same).check(context)).status == "pass"
    assert same.asked == [False, True]
    failed = await EffectivenessGate(replayer=Outcomes(without=good, with_=worse)).check(context)
    assert failed.status == "fail"
    assert failed.findings == ("more failed tool calls: 1 with the candidate, 0 without",)
    unseen = await EffectivenessGate(
        replayer=Outcomes(
            without=good, with_=ReplayOutcome(completed=True, answer=answer, tool_calls=3, succeeded_tools=tools)
        )
    ).check(context)
    assert unseen.findings == ("the replayed model never saw the candidate in its skill overview",)
