"""Auto memory as a Celery job (SPEC 6.3): `memory_extract_task(session_id)`, the post-run
hook that enqueues it, and the model-backed extractor.

The task only loads the session by id and runs `AutoMemory.process` (core). Its cursor is
a database row (`MemoryCursor`) moved in the same transaction as the memory writes and
only from the position the job read: run it twice, or on a fresh worker after a crash,
and each delta is extracted exactly once. Without `REDIS_URL` Celery runs eagerly; the
hook then runs the job in a worker thread, never on the event loop.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from django.conf import settings

from runs.core.errors import TransientModelError
from runs.core.llm.base import Model, ModelRequest, ModelResponse, ToolSpec
from runs.core.records import RunRecord
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Message
from sessions_app.core.memory_episodes import (
    EPISODE_TOOL,
    EPISODE_TOOL_DESCRIPTION,
    EPISODE_TOOL_SCHEMA,
    EpisodeRequest,
    build_episode_prompt,
)
from sessions_app.core.memory_extract import (
    EXTRACT_INSTRUCTION,
    TOOL_DESCRIPTIONS,
    TOOL_SCHEMAS,
    AutoMemory,
    Checker,
    ExtractedCall,
    ExtractionRequest,
    MemoryExtractor,
    PatternMemoryExtractor,
    build_extraction_prompt,
    check_message_threshold,
    check_time_interval,
)
from sessions_app.core.session import SessionNotFoundError
from sessions_app.jobs import enqueue_session_job, session_key
from sessions_app.memory_backends import DjangoMemoryService

logger = logging.getLogger(__name__)


class ModelMemoryExtractor:
    """SPEC 6.4: one model call; the memory operations are its tool calls (parallel calls
    allowed; calls with malformed JSON arguments are ignored). With assistant episodes on,
    `AutoMemory` makes a second call through `extract_assistant_episodes`."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def request(self, request: ExtractionRequest) -> ModelRequest:
        messages = [Message(role="system", content=build_extraction_prompt(request))]
        messages.extend(Message(role=m.role, content=m.text) for m in request.messages)
        if messages[-1].role != "user":
            messages.append(Message(role="user", content=EXTRACT_INSTRUCTION))
        tools = tuple(
            ToolSpec(name=name, description=TOOL_DESCRIPTIONS[name], parameters=TOOL_SCHEMAS[name])
            for name in request.enabled_tools
        )
        return ModelRequest(messages=tuple(messages), tools=tools, stream=False, temperature=0.0)

    async def extract(self, request: ExtractionRequest) -> list[ExtractedCall]:
        return await self._calls(self.request(request))

    def episode_request(self, request: EpisodeRequest) -> ModelRequest:
        """Stage 2: the eligible exchanges, and only the private episode tool."""
        messages = (
            Message(role="system", content=build_episode_prompt(request)),
            Message(role="user", content=EXTRACT_INSTRUCTION),
        )
        tool = ToolSpec(name=EPISODE_TOOL, description=EPISODE_TOOL_DESCRIPTION, parameters=EPISODE_TOOL_SCHEMA)
        return ModelRequest(messages=messages, tools=(tool,), stream=False, temperature=0.0)

    async def extract_assistant_episodes(self, request: EpisodeRequest) -> list[ExtractedCall]:
        return await self._calls(self.episode_request(request))

    async def _calls(self, model_request: ModelRequest) -> list[ExtractedCall]:
        final: ModelResponse | None = None
        async for response in self.model.generate(model_request):
            if not response.partial:
                final = response
        if final is None or final.message is None:
            return []
        calls: list[ExtractedCall] = []
        for call in final.message.tool_calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                continue
            if isinstance(arguments, dict):
                calls.append(ExtractedCall(name=call.name, arguments=arguments))
        return calls


def build_memory_extractor(model: Model | None = None) -> MemoryExtractor:
    """The offline model extracts by patterns; any other model by its tool calls."""
    if model is None:
        from agentsite.runtime import build_model

        model = build_model(settings.AGENTSITE_SUMMARY_MODEL)
    if model.info().provider == "offline":
        return PatternMemoryExtractor()
    return ModelMemoryExtractor(model)


def memory_checkers() -> list[Checker]:
    checkers: list[Checker] = []
    if settings.AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES:
        checkers.append(check_message_threshold(settings.AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES))
    if settings.AGENTSITE_MEMORY_EXTRACT_INTERVAL_S:
        checkers.append(check_time_interval(settings.AGENTSITE_MEMORY_EXTRACT_INTERVAL_S))
    return checkers


def build_auto_memory(extractor: MemoryExtractor | None = None) -> AutoMemory:
    return AutoMemory(
        sessions=DjangoSessionService(),
        memory=DjangoMemoryService(max_per_user=settings.AGENTSITE_MEMORY_MAX_PER_USER),
        extractor=extractor or build_memory_extractor(),
        checkers=memory_checkers(),
        policy=settings.AGENTSITE_MEMORY_UPDATE_POLICY,
        assistant_episodes=settings.AGENTSITE_MEMORY_ASSISTANT_EPISODES,
    )


def memory_extract(*, session_id: str, extractor: MemoryExtractor | None = None) -> dict[str, Any]:
    """Extract memories from a session's new messages (the task's body, callable directly)."""
    key = session_key(session_id)
    if key is None:
        return {"status": "missing"}
    try:
        outcome = async_to_sync(build_auto_memory(extractor).process)(key)
    except SessionNotFoundError:
        # Deleted while the job read it (a user deleting a chat right after its run).
        return {"status": "missing"}
    return outcome.to_dict()


@shared_task(
    name="sessions_app.memory_extract_task",
    acks_late=True,
    autoretry_for=(TransientModelError,),
    retry_backoff=True,
    max_retries=3,
)
def memory_extract_task(session_id: str) -> dict[str, Any]:
    """Auto memory for one session (SPEC 6.3); idempotent, safe to retry."""
    return memory_extract(session_id=session_id)


async def enqueue_memory_extraction(record: RunRecord) -> None:
    """The Runner's post-run hook (SPEC 1.11: memory service configured, session known)."""
    if not record.session_id:
        return
    await enqueue_session_job(memory_extract_task, record.session_id)
