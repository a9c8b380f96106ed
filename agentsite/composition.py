"""The composition root: builds the model, agents, services and Runner from settings.

Nothing imports this module but `agentsite.apps`, whose `ready()` installs it as the
process's `agentsite.runtime` (an import-linter contract keeps the apps off it); the apps
reach what it builds through that accessor. Tests and benchmarks may import it to build a
Runner of their own.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from django.conf import settings

from agentsite.agents import AgentContext, AgentRegistry
from agentsite.context_policy import ContextPolicy, governance
from agentsite.runtime import Runtime
from agentsite.runtime import install as install_runtime
from runs.backends import DjangoRunStore, active_runs_admission
from runs.core.callbacks import Callbacks
from runs.core.context.governance import (
    TIKTOKEN,
    ContextGovernance,
    chunked_summarizer,
    extractive_summarizer,
    llm_summarizer,
)
from runs.core.context.recall_preload import SessionRecallPreload
from runs.core.lifecycle import PROCESS_OWNER, Lifecycle
from runs.core.llm.base import Model
from runs.core.manager import RunManager
from runs.core.runner import Runner
from runs.fanout import ChannelLayerSink, listen_for_cancels
from runs.remote_agents import attach_remote_agents, watch_remote_agents
from sessions_app.backends import DjangoSessionService
from sessions_app.core.cache import CachedSessionService
from sessions_app.core.session import SessionService
from sessions_app.core.summary import (
    ContextThreshold,
    EventThreshold,
    InProcessSummaryScheduler,
    Summarizer,
    SummaryEngine,
    SummaryLock,
    SummaryScheduler,
    TimeThreshold,
    checks_any,
)
from sessions_app.recall_backends import DjangoRecallIndex
from sessions_app.recall_tools import RECALL_INSTRUCTION


def build_model(name: str | None = None) -> Model:
    """The offline planner unless an OpenAI-compatible endpoint is configured."""
    name = name or settings.AGENTSITE_MODEL
    if name == "offline":
        from runs.core.llm.offline import OfflineModel

        return OfflineModel(context_window=settings.AGENTSITE_CONTEXT_WINDOW)
    from agentsite.demo.extensions import Redactor
    from runs.core.llm.openai_provider import OpenAIModel

    return OpenAIModel(
        model=name,
        base_url=settings.OPENAI_BASE_URL,
        api_key=settings.OPENAI_API_KEY or "not-needed",
        context_window=settings.AGENTSITE_CONTEXT_WINDOW,
        timeout_s=float(settings.AGENTSITE_MODEL_TIMEOUT_S),
        max_retries=settings.AGENTSITE_MODEL_MAX_RETRIES,
        # Issue 20: secrets and card numbers never leave in any upstream request (agent
        # steps, summaries, memory extraction, evolution review all come through here).
        request_filters=(Redactor().filter,),
    )


def context_policy() -> ContextPolicy:
    """The process's context policy: the settings' (docs/settings.md), with the demo profile
    (agentsite/demo/profile.py) in their place while AGENTSITE_DEMO_GOVERNANCE is on."""
    from agentsite.demo.profile import demo_profile

    policy = ContextPolicy.from_settings()
    return demo_profile(policy) if settings.AGENTSITE_DEMO_GOVERNANCE else policy


def build_summarizer(policy: ContextPolicy, summary_model: Model | None = None) -> Summarizer:
    """AGENTSITE_SUMMARIZER: `auto` (extractive on the offline model, else the summary
    model), or `module:factory` returning a Summarizer. The summary model's summarizer is
    the chunked one (issue 12, C6: no request over its window, so the jobs and the 0.7
    pre-call path cannot overflow) unless AGENTSITE_SUMMARY_CHUNKED is off."""
    if policy.summarizer != "auto":
        module, _, name = policy.summarizer.partition(":")
        custom: Callable[[], Summarizer] = getattr(importlib.import_module(module), name)
        return custom()
    from runs.core.llm.offline import OfflineModel

    model = summary_model or build_model(settings.AGENTSITE_SUMMARY_MODEL)
    if isinstance(model, OfflineModel):
        return extractive_summarizer(budget_tokens=policy.summary_budget_tokens)
    from agentsite.demo.agents import demo_runner_callbacks

    factory = chunked_summarizer if policy.summary_chunked else llm_summarizer
    runner_callbacks = demo_runner_callbacks()
    return factory(
        model,
        context_window=settings.AGENTSITE_CONTEXT_WINDOW,
        max_summary_words=policy.summary_max_words,
        cache_safe_forking=policy.summary_cache_safe_fork,
        # SPEC 3.4 model callbacks (issue 26): the Runner's model callbacks apply to the
        # summarizer's calls too (the redactor masks what a summary request sends).
        callbacks=Callbacks(before_model=runner_callbacks.before_model, after_model=runner_callbacks.after_model),
    )


@functools.cache
def _redis_lock(url: str) -> SummaryLock:
    from sessions_app.locks import RedisSummaryLock

    return RedisSummaryLock(url, ttl_s=settings.AGENTSITE_SUMMARY_LOCK_TTL_S)


def summary_engine(summary_model: Model | None = None, *, window: int | None = None) -> SummaryEngine:
    """How this process summarizes: summarizer, trigger (DESIGN 6) and lock."""
    from sessions_app.locks import DatabaseSummaryLock

    policy = context_policy()
    if not policy.summaries:
        return SummaryEngine(summarizer=None)
    window = window or settings.AGENTSITE_CONTEXT_WINDOW or build_model().info().context_window
    trigger: Any = ContextThreshold(
        ratio=policy.summary_trigger_ratio, min_tokens=policy.summary_trigger_min_tokens, window=window
    )
    if policy.summary_event_threshold:
        trigger = checks_any(trigger, EventThreshold(events=policy.summary_event_threshold))
    if settings.AGENTSITE_SUMMARY_TIME_THRESHOLD_S:
        trigger = checks_any(trigger, TimeThreshold(seconds=settings.AGENTSITE_SUMMARY_TIME_THRESHOLD_S))
    lock = (
        _redis_lock(settings.REDIS_URL)
        if settings.AGENTSITE_SUMMARY_LOCK == "redis"
        else DatabaseSummaryLock(ttl_s=settings.AGENTSITE_SUMMARY_LOCK_TTL_S)
    )
    return SummaryEngine(
        summarizer=build_summarizer(policy, summary_model),
        checker=trigger,
        lock=lock,
        tokenizer=TIKTOKEN,
        context_window=window,
        allowlist=tuple(settings.AGENTSITE_SUMMARY_FILTER_KEYS) or None,
    )


def build_governance(engine: SummaryEngine) -> ContextGovernance:
    """The process's context policy as the governance the registered agents are offered
    (AgentContext.governance); an agent may build its own from a ContextPolicy."""
    return governance(context_policy(), engine=engine, context_window=settings.AGENTSITE_CONTEXT_WINDOW)


def build_summary_scheduler(engine: SummaryEngine, sessions: SessionService | None = None) -> SummaryScheduler | None:
    """AGENTSITE_SUMMARY_JOBS: Celery workers, or asyncio tasks of the run loop (reading
    through `sessions`, the runner's, so that a job finds its events in the runner's cache)."""
    if engine.summarizer is None:
        return None
    if settings.AGENTSITE_SUMMARY_JOBS == "celery":
        from sessions_app.tasks import CelerySummaryScheduler

        return CelerySummaryScheduler(engine=engine)
    return InProcessSummaryScheduler(engine, sessions or DjangoSessionService())


def agent_registry() -> AgentRegistry:
    """The factories AGENTSITE_AGENTS names (each checked importable)."""
    return AgentRegistry.from_paths(settings.AGENTSITE_AGENTS)


def agent_context(
    model: Model, governance: ContextGovernance | None, *, engine: SummaryEngine | None = None
) -> AgentContext:
    """What this server offers the registered agent factories (agentsite/agents.py):
    `governance` is the process policy's; `engine` summarizes for an agent's own policy."""
    from runs.backends import DjangoCheckpointStore

    return AgentContext(
        model=model,
        model_named=build_model,
        governance=governance,
        policy=context_policy(),
        summary_engine=engine,
        context_window=settings.AGENTSITE_CONTEXT_WINDOW,
        service_tools=tuple(service_tools()),
        service_instruction=RECALL_INSTRUCTION,
        memory_preload=settings.AGENTSITE_MEMORY_PRELOAD,
        session_recall=SessionRecallPreload(
            max_results=settings.AGENTSITE_RECALL_PRELOAD,
            injection=settings.AGENTSITE_RECALL_PRELOAD_INJECTION,
        )
        if settings.AGENTSITE_RECALL_PRELOAD
        else None,
        skills=skill_tools(),
        skill_repository=skill_repository(),
        # Graph agents checkpoint in the database so a paused run can be resumed by any
        # process, also after a restart.
        checkpoints=DjangoCheckpointStore(),
    )


def build_runner(model: Model | None = None, summary_model: Model | None = None) -> Runner:
    """The Runner with the registered agents (AGENTSITE_AGENTS) on `model` (default: the
    configured one), governed as the settings say; summaries on `summary_model` (default:
    AGENTSITE_SUMMARY_MODEL)."""
    from agentsite.demo.agents import demo_runner_callbacks

    model = model or build_model()
    engine = summary_engine(summary_model, window=settings.AGENTSITE_CONTEXT_WINDOW or model.info().context_window)
    # Issue 18: the sessions of this process's runs stay in memory between turns, each read
    # checked against the stored last_seq (sessions_app.core.cache).
    sessions = CachedSessionService(DjangoSessionService())
    scheduler = build_summary_scheduler(engine, sessions)
    return Runner(
        app=settings.AGENTSITE_APP,
        agents=agent_registry().build(agent_context(model, build_governance(engine), engine=engine)),
        summary_scheduler=scheduler,
        load_after_summary=scheduler is not None or engine.summarizer is not None,
        default_agent=settings.AGENTSITE_DEFAULT_AGENT or None,
        session_service=sessions,
        run_store=DjangoRunStore(),
        sinks=[ChannelLayerSink()],
        history_event_limit=settings.AGENTSITE_HISTORY_EVENT_LIMIT,
        owner=PROCESS_OWNER,
        services={"recall": DjangoRecallIndex(), **memory_and_artifact_services(), "sessions": DjangoSessionService()},
        post_run=post_run_hooks(),
        admission=active_runs_admission(settings.AGENTSITE_MAX_ACTIVE_RUNS_PER_USER),
        max_events_per_run=settings.AGENTSITE_MAX_RUN_EVENTS,
        max_queued_messages=settings.AGENTSITE_MAX_QUEUED_MESSAGES,
        persist_interrupted_assistant=settings.AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT,
        callbacks=demo_runner_callbacks(),
    )


def service_tools() -> list[Any]:
    """Tools over the services: session recall, long-term memory (search only: extraction
    runs after each run), artifacts."""
    from sessions_app.artifact_backends import artifact_function_tools
    from sessions_app.memory_backends import memory_function_tools
    from sessions_app.recall_tools import recall_tools

    return [*recall_tools(), *memory_function_tools(mode="auto"), *artifact_function_tools()]


def skill_repository() -> Any:
    """Skills the agents can load: published database revisions first, then the folders
    of AGENTSITE_SKILLS_ROOTS (SPEC 8.1)."""
    from skills_app.backends import DjangoSkillRepository
    from skills_app.core.repository import ChainedSkillRepository

    return ChainedSkillRepository([DjangoSkillRepository(app=settings.AGENTSITE_APP), _folder_skills()])


@functools.cache
def _folder_skills() -> Any:
    from skills_app.core.repository import FolderSkillRepository

    return FolderSkillRepository(settings.AGENTSITE_SKILLS_ROOTS)


def workspace_config() -> Any:
    """The code workspace and its sandbox, from the AGENTSITE_WORKSPACE_* settings."""
    from skills_app.core.workspace import MIB, SandboxLimits, WorkspaceConfig

    return WorkspaceConfig(
        root=settings.AGENTSITE_WORKSPACE_ROOT,
        limits=SandboxLimits(
            timeout_s=float(settings.AGENTSITE_WORKSPACE_TIMEOUT_S),
            cpu_s=settings.AGENTSITE_WORKSPACE_CPU_S,
            memory_bytes=settings.AGENTSITE_WORKSPACE_MEMORY_MB * MIB,
            file_size_bytes=settings.AGENTSITE_WORKSPACE_FILE_SIZE_MB * MIB,
            max_processes=settings.AGENTSITE_WORKSPACE_MAX_PROCESSES,
            output_limit_bytes=settings.AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES,
        ),
        uid_pool=range(
            settings.AGENTSITE_WORKSPACE_UID_BASE,
            settings.AGENTSITE_WORKSPACE_UID_BASE + settings.AGENTSITE_WORKSPACE_UID_COUNT,
        ),
        allowed_commands=tuple(settings.AGENTSITE_WORKSPACE_ALLOWED_COMMANDS),
        denied_commands=tuple(settings.AGENTSITE_WORKSPACE_DENIED_COMMANDS),
        max_artifacts=settings.AGENTSITE_WORKSPACE_MAX_ARTIFACTS,
        max_bytes=settings.AGENTSITE_WORKSPACE_MAX_BYTES,
        max_files=settings.AGENTSITE_WORKSPACE_MAX_FILES,
        ttl_s=settings.AGENTSITE_WORKSPACE_TTL_S,
    )


def skill_tools() -> Any:
    """The configured skill tools (AGENTSITE_SKILLS_PROFILE), for the agents that take them. With `full`, the sandbox
    is probed here, once per process: when it cannot work, the log says so and the
    execution tools refuse to run anything."""
    from skills_app.core.tools import SkillsConfig, SkillToolset
    from skills_app.core.workspace import WorkspaceExecutor

    config = SkillsConfig(
        profile=settings.AGENTSITE_SKILLS_PROFILE,
        load_mode=settings.AGENTSITE_SKILLS_LOAD_MODE,
        max_loaded_skills=settings.AGENTSITE_SKILLS_MAX_LOADED,
        require_load_before_run=settings.AGENTSITE_SKILLS_REQUIRE_LOAD,
    )
    executor = None
    if config.profile == "full":
        executor = WorkspaceExecutor(workspace_config())
        executor.isolation()
    return SkillToolset(skill_repository(), config=config, executor=executor)


def memory_and_artifact_services() -> dict[str, Any]:
    """Long-term memory and artifacts, for the tools in every ToolContext (SPEC 6, 7)."""
    from sessions_app.artifact_backends import DjangoArtifactService
    from sessions_app.core.artifact_tools import ARTIFACT_SERVICE
    from sessions_app.core.memory_tools import MEMORY_SERVICE
    from sessions_app.memory_backends import DjangoMemoryService

    return {
        MEMORY_SERVICE: DjangoMemoryService(max_per_user=settings.AGENTSITE_MEMORY_MAX_PER_USER),
        ARTIFACT_SERVICE: DjangoArtifactService(),
    }


def post_run_hooks() -> list[Any]:
    """What runs after each run's completion is saved: auto memory and the evolution
    review (each when enabled)."""
    from evolution_app.tasks import enqueue_evolution_review
    from sessions_app.memory_tasks import enqueue_memory_extraction

    hooks: list[Any] = [enqueue_memory_extraction] if settings.AGENTSITE_MEMORY_AUTO else []
    if settings.AGENTSITE_EVOLUTION:
        hooks.append(enqueue_evolution_review)
    return hooks


async def _start_background(runner: Runner) -> None:
    """Per-runner background work: heartbeats and the reaper, and cross-process cancels."""
    lifecycle = Lifecycle(
        runner, interval_s=settings.AGENTSITE_RUN_HEARTBEAT_S, stale_after_s=settings.AGENTSITE_RUN_STALE_S
    )
    runner.spawn(lifecycle.run_forever(), name="runs-lifecycle")
    runner.spawn(listen_for_cancels(runner), name="runs-cancel-listener")
    # The admin's remote A2A agents, as agents and as tools of the registered ones (issue 25, item 8).
    await attach_remote_agents(runner)
    runner.spawn(watch_remote_agents(runner), name="runs-remote-agents")


@functools.cache
def run_manager() -> RunManager:
    """The process's run manager (one event loop for every run of this process)."""
    manager = RunManager(build_runner)
    manager.on_start(_start_background)
    return manager


def session_service() -> DjangoSessionService:
    return DjangoSessionService()


def replay_agent(name: str, model: Model, skills: Any) -> Any:
    """The registered agent `name` ("": the default one) rebuilt for the evolution gate's
    replay: on `model`, the `skills` repository in knowledge-only mode (a replay never runs
    a skill's script), no services (AgentContext.for_replay)."""
    context = AgentContext.for_replay(model=model, skills=skills)
    registry = agent_registry()
    if not name:
        name = settings.AGENTSITE_DEFAULT_AGENT or registry.build(context)[0].name
    return registry.build_named(name, context)


def runtime() -> Runtime:
    """This root as the apps reach it (`agentsite.runtime`)."""
    return Runtime(
        run_manager=run_manager,
        build_model=build_model,
        summary_engine=summary_engine,
        skill_repository=skill_repository,
        workspace_config=workspace_config,
        replay_agent=replay_agent,
    )


def install() -> None:
    """Install this root for the process (`agentsite.apps.AgentsiteConfig.ready`). A bad
    AGENTSITE_AGENTS entry stops the start here, naming it, not the first run."""
    agent_registry()
    install_runtime(runtime())
