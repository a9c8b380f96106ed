"""Google ADK under the peers workload: a BaseLlm fake, an LlmAgent with the lookup tool.

Runs in bench/.venv-peers, as a child of run.py: `adk_driver.py CONFIG WORKDIR`.

- `memory`: InMemoryRunner (InMemorySessionService);
- `db`: Runner + DatabaseSessionService on a SQLite file (SQLAlchemy + aiosqlite);
- `db-compaction`: the same with the App's EventsCompactionConfig. Its token-threshold
  trigger is set as Agentsite's governance is (70% of an 8,192-token window), and its
  summarizer is extractive (no model call), as Agentsite's benchmark summarizer is: the
  comparison is of runtimes, not of summarizing models.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for `bench.peers.workload`

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner, Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from bench.peers import workload

CONFIGS = ("memory", "db", "db-compaction")
APP = "bench"
USER = "bench-alice"
CONTEXT_WINDOW = 8192
THRESHOLD_RATIO = 0.7  # Agentsite's ContextThreshold default
SUMMARY_CHARS = 2000


def _part_size(part: types.Part) -> int:
    size = len(part.text or "")
    if part.function_call is not None:
        size += len(part.function_call.name or "") + len(json.dumps(part.function_call.args or {}))
    if part.function_response is not None:
        size += len(part.function_response.name or "") + workload.text_size(part.function_response.response or {})
    return size


def request_size(request: LlmRequest) -> int:
    """Characters of the system instruction and every part of every content sent."""
    system = request.config.system_instruction if request.config is not None else None
    size = len(system) if isinstance(system, str) else 0
    for content in request.contents:
        size += sum(_part_size(part) for part in content.parts or ())
    return size


class FakeLlm(BaseLlm):
    """Three lookups, then the answer; records each request's size; reports chars/4 as
    prompt tokens, the estimate Agentsite's ScriptedModel reports too."""

    recorder: Any = None

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> Any:
        size = request_size(llm_request)
        kind, value = workload.step_for(self.recorder.record(size), self.recorder.turn)
        if kind == "call":
            part = types.Part(function_call=types.FunctionCall(name=workload.TOOL_NAME, args={"q": value}))
        else:
            part = types.Part(text=value)
        yield LlmResponse(
            content=types.Content(role="model", parts=[part]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=size // 4, candidates_token_count=max(1, len(value) // 4)
            ),
        )


class ExtractiveSummarizer(BaseEventsSummarizer):
    """The compacted events' text, cut to its last SUMMARY_CHARS characters: bounded, and free."""

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        if not events:
            return None
        lines = []
        for event in events:
            for part in (event.content.parts or ()) if event.content else ():
                if part.text:
                    lines.append(f"{event.author}: {part.text}")
                if part.function_response is not None:
                    lines.append(f"{part.function_response.name}: {part.function_response.response}")
        text = "\n".join(lines)[-SUMMARY_CHARS:]
        return Event(
            author="user",
            invocation_id=Event.new_id(),
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=events[0].timestamp,
                    end_timestamp=events[-1].timestamp,
                    compacted_content=types.Content(role="model", parts=[types.Part(text=text)]),
                )
            ),
        )


class AdkDriver:
    def __init__(self, config: str, workdir: str) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.recorder = workload.Recorder()
        self.counter: workload.Counter | None = None
        self.runner: Any = None

    async def setup(self) -> dict[str, Any]:
        if self.config != "memory":
            counter = workload.SqliteCounter()
            counter.install()  # before the engine opens its first connection
            self.counter = counter
        agent = LlmAgent(
            name="oncall",
            model=FakeLlm(model="bench-fake", recorder=self.recorder),
            instruction=workload.INSTRUCTION,
            tools=[workload.lookup],
        )
        if self.config == "memory":
            self.runner = InMemoryRunner(agent=agent, app_name=APP)
            storage = "InMemoryRunner"
        else:
            compaction = None
            if self.config == "db-compaction":
                compaction = EventsCompactionConfig(
                    summarizer=ExtractiveSummarizer(),
                    token_threshold=int(CONTEXT_WINDOW * THRESHOLD_RATIO),
                    event_retention_size=2 * workload.MODEL_CALLS_PER_TURN,
                )
            service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{self.workdir / 'adk.sqlite3'}")
            app = App(name=APP, root_agent=agent, events_compaction_config=compaction)
            self.runner = Runner(app=app, session_service=service)
            storage = "DatabaseSessionService, SQLite file" + (", events compaction" if compaction else "")
        return {
            "runtime": "Google ADK",
            "storage": storage,
            "version": f"google-adk {version('google-adk')}",
            "durable": self.config != "memory",
        }

    async def new_session(self, label: str) -> Any:
        return await self.runner.session_service.create_session(app_name=APP, user_id=USER)

    async def turn(self, session: Any, number: int) -> None:
        message = types.Content(role="user", parts=[types.Part(text=workload.user_message(number))])
        final = ""
        async for event in self.runner.run_async(user_id=USER, session_id=session.id, new_message=message):
            if event.content and event.content.parts and event.content.parts[0].text and event.author == "oncall":
                final = event.content.parts[0].text
        if final != workload.answer(number):
            raise RuntimeError(f"turn {number}: the agent answered {final!r}")

    async def finish(self, session: Any, turns: int) -> dict[str, Any]:
        stored = await self.runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        events = len(stored.events) if stored is not None else -1
        await self.runner.close()
        return {"stored_events": events}


def build(config: str, workdir: str) -> AdkDriver:
    return AdkDriver(config, workdir)


if __name__ == "__main__":
    sys.exit(workload.main(build, CONFIGS))
