"""The Effectiveness gate's replay: the evidence task run again with the candidate loaded.

`AgentReplayer` runs the delta's first user request through an in-memory Runner, on an
agent built by `agent_factory(agent, model, skills)` where `agent` is the name of the agent
that ran the evidence (the delta's; "" when unknown) and `skills` is the library with the
candidate on top. The model is either

- `scripted`: the recorded assistant turns played back (`ScriptedModel`), so the replay
  costs no model call and checks that the run still works with the candidate in the
  prompt and that the tools still answer as they did; or
- `model`: the configured model, which sees the candidate and may act differently.

The Effectiveness gate replays twice, with the candidate on top of the library and
without it (`with_candidate`), and compares the two. The outcome says whether the run
completed, what it answered, which tool calls succeeded and how many failed, and whether
the first model request showed the candidate in its skill overview. In `scripted` mode
both replays make the same calls, so the comparison checks that the tools still answer
with the candidate in the prompt; in `model` mode the model may act on the candidate
(the offline planner does: a skill's description takes part in its tool choice), which
is what the comparison is for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

from evolution_app.core.delta import ReviewDelta, is_tool_error
from evolution_app.core.gates import GateContext, ReplayOutcome
from runs.core.agents.base import Agent
from runs.core.llm.base import Model, ModelInfo, ModelRequest, ModelResponse
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app.core.events import ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from skills_app.core.repository import (
    ChainedSkillRepository,
    InMemorySkillRepository,
    SkillRepository,
    skill_from_files,
)

ReplayMode = Literal["scripted", "model"]
AgentFactory = Callable[[str, Model, SkillRepository], Agent]


def recorded_turns(delta: ReviewDelta) -> list[ScriptStep]:
    """The assistant turns of the delta's first task: tool-call steps up to the first answer."""
    steps: list[ScriptStep] = []
    started = False
    for entry in delta.transcript:
        if entry.role == "user":
            if started:
                break
            started = True
            continue
        if entry.role != "assistant" or not started:
            continue
        if entry.tool_calls:
            calls = tuple(
                ToolCall(id=f"replay_{len(steps)}_{i}", name=name, arguments=arguments)
                for i, (name, arguments) in enumerate(entry.tool_calls)
            )
            steps.append(ScriptStep(tool_calls=calls))
        elif entry.text.strip():
            steps.append(ScriptStep.answer(entry.text))
            break
    return steps


@dataclass(kw_only=True)
class _Recording:
    """A model that records the requests it gets (to see what the replayed model saw)."""

    inner: Model
    requests: list[ModelRequest] = field(default_factory=list)

    def info(self) -> ModelInfo:
        return self.inner.info()

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        self.requests.append(request)
        async for response in self.inner.generate(request):
            yield response


@dataclass(kw_only=True)
class AgentReplayer:
    """See the module docstring. `library` is the skill repository the candidate joins."""

    agent_factory: AgentFactory
    library: SkillRepository | None = None
    mode: ReplayMode = "scripted"
    model: Model | None = None

    async def replay(self, context: GateContext, *, with_candidate: bool = True) -> ReplayOutcome:
        delta = context.delta
        if not delta.user_requests:
            return ReplayOutcome(completed=False, error="the delta has no user request to replay")
        task = delta.user_requests[0].text
        if self.mode == "scripted":
            steps = recorded_turns(delta)
            if not steps:
                return ReplayOutcome(completed=False, error="no recorded model turn to replay")
            model: _Recording = _Recording(inner=ScriptedModel(steps=list(steps), name="evolution-replay"))
        else:
            if self.model is None:
                return ReplayOutcome(completed=False, error="replay mode 'model' needs a model")
            model = _Recording(inner=self.model)
        candidate = skill_from_files(context.files, source="db")
        repositories: list[SkillRepository] = [InMemorySkillRepository([candidate])] if with_candidate else []
        if self.library is not None:
            repositories.append(self.library)
        try:
            agent = self.agent_factory(delta.agent, model, ChainedSkillRepository(repositories))
        except LookupError as missing:  # the evidence's agent is no longer registered
            return ReplayOutcome(completed=False, error=str(missing))
        runner = Runner(app="evolution-replay", agents=[agent], session_service=InMemorySessionService())
        tool_calls = tool_errors = 0
        called: dict[str, str] = {}
        succeeded: list[str] = []
        answer = ""
        error = ""
        try:
            async for event in runner.run(user_id="replay", message=task):
                message = event.message
                if event.partial or message is None:
                    if event.is_error and event.error is not None:
                        error = event.error.message
                    continue
                if message.role == "assistant":
                    tool_calls += len(message.tool_calls)
                    called.update((call.id, call.name) for call in message.tool_calls)
                    if message.content.strip() and not message.tool_calls:
                        answer = message.content
                elif message.role == "tool" and is_tool_error(message.content):
                    tool_errors += 1
                elif message.role == "tool":
                    succeeded.append(message.tool_name or called.get(message.tool_call_id or "", "tool"))
        finally:
            await runner.close()
        first = model.requests[0] if model.requests else None
        seen = first is not None and any(candidate.name in m.content for m in first.messages if m.role == "system")
        return ReplayOutcome(
            completed=bool(answer) and not error,
            answer=answer,
            tool_calls=tool_calls,
            tool_errors=tool_errors,
            skill_seen=seen,
            error=error,
            succeeded_tools=tuple(succeeded),
        )
