"""The evolution review as a Celery job: `evolution_review_task(session_id)`, the post-run
hook that enqueues it, and the engine built from settings.

The task loads the session by id and runs `EvolutionEngine.review` (core). Its cursor is
`ReviewCursor`, moved in the same transaction as the review's writes and only from the
position the job read: run it twice and the delta is reviewed once. A reviewer that
fails on a transient model error leaves the cursor where it was and the task retries.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from django.conf import settings

from evolution_app.backends import DjangoReviewStore
from evolution_app.core.delta import ReviewPolicy
from evolution_app.core.engine import EvolutionEngine
from evolution_app.core.gates import EffectivenessGate, Gate, HumanGate, SafetyGate, SpecGate
from evolution_app.core.replay import AgentReplayer
from evolution_app.core.review import HeuristicReviewer, ModelReviewer, Reviewer
from runs.core.agents.base import Agent
from runs.core.errors import TransientModelError
from runs.core.llm.base import Model
from runs.core.records import RunRecord
from sessions_app.backends import DjangoSessionService
from sessions_app.jobs import enqueue_session_job, session_key
from skills_app.core.repository import SkillRepository


def evolution_model() -> Model:
    from agentsite.runtime import build_model

    return build_model(settings.AGENTSITE_EVOLUTION_MODEL)


def build_reviewer(model: Model | None = None) -> Reviewer:
    """The heuristic reviewer on the offline model; a model call with a JSON schema otherwise."""
    model = model or evolution_model()
    if model.info().provider == "offline":
        return HeuristicReviewer()
    return ModelReviewer(model)


def replay_agent(name: str, model: Model, skills: SkillRepository) -> Agent:
    """The agent the Effectiveness gate replays with: the evidence run's own agent (`name`;
    "" for the default one) as the registry rebuilds it, the skills in knowledge-only mode
    (a replay never runs a skill's script)."""
    from agentsite import runtime

    return runtime.replay_agent(name, model, skills)


def build_gates(model: Model | None = None) -> list[Gate]:
    """The gates AGENTSITE_EVOLUTION_GATES names (run in the canonical order)."""
    from agentsite.runtime import skill_repository

    gates: list[Gate] = []
    names = settings.AGENTSITE_EVOLUTION_GATES
    if "spec" in names:
        gates.append(SpecGate(max_chars=settings.AGENTSITE_EVOLUTION_MAX_SKILL_CHARS))
    if "safety" in names:
        gates.append(SafetyGate())
    if "effectiveness" in names:
        mode = settings.AGENTSITE_EVOLUTION_REPLAY
        replayer = None
        if mode == "auto":
            # The offline planner is free and deterministic, and it is the model a candidate
            # can change (a skill's description takes part in its tool choice): replay on it.
            # Another model's turns are played back instead of paying for two more runs.
            model = model or evolution_model()
            mode = "model" if model.info().provider == "offline" else "scripted"
        if mode != "off":
            replayer = AgentReplayer(
                agent_factory=replay_agent,
                library=skill_repository(),
                mode=mode,
                model=(model or evolution_model()) if mode == "model" else None,
            )
        gates.append(EffectivenessGate(replayer=replayer))
    if "human" in names:
        gates.append(HumanGate())
    return gates


def build_engine(*, reviewer: Reviewer | None = None, gates: list[Gate] | None = None) -> EvolutionEngine:
    return EvolutionEngine(
        sessions=DjangoSessionService(),
        store=DjangoReviewStore(),
        reviewer=reviewer or build_reviewer(),
        gates=build_gates() if gates is None else gates,
        policy=ReviewPolicy(
            min_tool_calls=settings.AGENTSITE_EVOLUTION_MIN_TOOL_CALLS,
            on_correction=settings.AGENTSITE_EVOLUTION_ON_CORRECTION,
            on_recovered_error=settings.AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR,
        ),
    )


def evolution_review(
    *, session_id: str, reviewer: Reviewer | None = None, gates: list[Gate] | None = None
) -> dict[str, Any]:
    """Review a session's new events (the task's body, callable directly)."""
    key = session_key(session_id)
    if key is None:
        return {"status": "missing"}
    record = async_to_sync(build_engine(reviewer=reviewer, gates=gates).review)(key)
    return record.to_dict()


@shared_task(
    name="evolution_app.evolution_review_task",
    acks_late=True,
    autoretry_for=(TransientModelError,),
    retry_backoff=True,
    max_retries=3,
)
def evolution_review_task(session_id: str) -> dict[str, Any]:
    """The evolution review of one session (SPEC 9.2); idempotent, safe to retry."""
    return evolution_review(session_id=session_id)


async def enqueue_evolution_review(record: RunRecord) -> None:
    """The Runner's post-run hook: queue the review of the run's session (completed runs only:
    a failed or cancelled run is no evidence of a working method)."""
    if not record.session_id or record.status != "completed":
        return
    await enqueue_session_job(evolution_review_task, record.session_id)
