"""The composition root: builds the model, agents, services and Runner from settings."""

from __future__ import annotations

import functools

from django.conf import settings

from runs.backends import DjangoRunStore
from runs.core.lifecycle import PROCESS_OWNER, Lifecycle
from runs.core.llm.base import Model
from runs.core.manager import RunManager
from runs.core.runner import Runner
from runs.fanout import ChannelLayerSink, listen_for_cancels
from sessions_app.backends import DjangoSessionService


def build_model(name: str | None = None) -> Model:
    """The offline planner unless an OpenAI-compatible endpoint is configured."""
    name = name or settings.AGENTSITE_MODEL
    if name == "offline":
        from runs.core.llm.offline import OfflineModel

        return OfflineModel(context_window=settings.AGENTSITE_CONTEXT_WINDOW)
    from runs.core.llm.openai_provider import OpenAIModel

    return OpenAIModel(
        model=name,
        base_url=settings.OPENAI_BASE_URL,
        api_key=settings.OPENAI_API_KEY or "not-needed",
        context_window=settings.AGENTSITE_CONTEXT_WINDOW,
        timeout_s=float(settings.AGENTSITE_MODEL_TIMEOUT_S),
        max_retries=settings.AGENTSITE_MODEL_MAX_RETRIES,
    )


def build_runner(model: Model | None = None) -> Runner:
    """The Runner with the demo agents on `model` (default: the configured one)."""
    from agentsite.demo.agents import build_demo_agents

    model = model or build_model()
    return Runner(
        app=settings.AGENTSITE_APP,
        agents=build_demo_agents(model),
        default_agent=settings.AGENTSITE_DEFAULT_AGENT,
        session_service=DjangoSessionService(),
        run_store=DjangoRunStore(),
        sinks=[ChannelLayerSink()],
        history_event_limit=settings.AGENTSITE_HISTORY_EVENT_LIMIT,
        owner=PROCESS_OWNER,
    )


async def _start_background(runner: Runner) -> None:
    """Per-runner background work: heartbeats and the reaper, and cross-process cancels."""
    lifecycle = Lifecycle(
        runner, interval_s=settings.AGENTSITE_RUN_HEARTBEAT_S, stale_after_s=settings.AGENTSITE_RUN_STALE_S
    )
    runner.spawn(lifecycle.run_forever(), name="runs-lifecycle")
    runner.spawn(listen_for_cancels(runner), name="runs-cancel-listener")


@functools.cache
def run_manager() -> RunManager:
    """The process's run manager (one event loop for every run of this process)."""
    manager = RunManager(build_runner)
    manager.on_start(_start_background)
    return manager


def session_service() -> DjangoSessionService:
    return DjangoSessionService()
