"""LLMAgent: the model-and-tools loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from runs.core.errors import ModelError, TransientModelError
from runs.core.flow.request import build_request
from runs.core.flow.tools import execute_tool_calls
from runs.core.invocation import Invocation
from runs.core.llm.base import Model, ModelResponse
from runs.core.tools.base import Tool
from sessions_app.core.events import (
    OBJECT_CHUNK,
    OBJECT_COMPLETION,
    OBJECT_ERROR,
    Event,
    EventError,
    Message,
    new_id,
)

DEFAULT_MAX_STEPS = 10


class LLMAgent:
    """Ask the model; run the tools it calls; repeat until it answers or steps run out.

    Each step streams text deltas as partial events, then yields the complete assistant
    event and, for tool calls, one tool-result event per call (in call order).
    """

    kind = "llm"

    def __init__(
        self,
        *,
        name: str,
        model: Model,
        instruction: str = "",
        description: str = "",
        tools: Sequence[Tool] = (),
        max_steps: int = DEFAULT_MAX_STEPS,
        parallel_tools: bool = True,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps!r}")
        names = [t.name for t in tools]
        if len(names) != len(set(names)):
            raise ValueError(f"duplicate tool names in {names!r}")
        self.name = name
        self.model = model
        self.instruction = instruction
        self.description = description
        self.tools = {t.name: t for t in tools}
        self.max_steps = max_steps
        self.parallel_tools = parallel_tools

    @property
    def model_name(self) -> str | None:
        return self.model.info().name

    def _error(self, invocation: Invocation, type_: str, message: str, code: str | None = None) -> Event:
        return invocation.stamp(
            Event(author=self.name, object=OBJECT_ERROR, done=True, error=EventError(type=type_, message=message, code=code))
        )

    async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
        max_steps = invocation.options.max_steps or self.max_steps
        instruction = invocation.options.instruction or self.instruction
        specs = [t.spec() for t in self.tools.values()]
        for _ in range(max_steps):
            request = build_request(invocation, instruction=instruction, tools=specs)
            message_id = new_id()
            final: ModelResponse | None = None
            try:
                async for response in self.model.generate(request):
                    if response.partial:
                        if response.delta:
                            yield invocation.stamp(Event(
                                author=self.name,
                                object=OBJECT_CHUNK,
                                partial=True,
                                message=Message(role="assistant", content=response.delta),
                                extensions={"message_id": message_id},
                            ))
                    else:
                        final = response
            except TransientModelError as exc:
                yield self._error(invocation, "model_unavailable", str(exc), exc.code)
                return
            except ModelError as exc:
                yield self._error(invocation, "model_error", str(exc), exc.code)
                return
            if final is None or final.message is None:
                yield self._error(invocation, "model_error", "the model ended its stream without a final response")
                return
            message = final.message
            yield invocation.stamp(Event(
                id=message_id,
                author=self.name,
                object=OBJECT_COMPLETION,
                message=message,
                done=not message.tool_calls,
                finish_reason=final.finish_reason or ("tool_calls" if message.tool_calls else "stop"),
                usage=final.usage,
                model=final.model,
                extensions={"message_id": message_id},
            ))
            if not message.tool_calls:
                return
            results, stop = await execute_tool_calls(
                invocation, message.tool_calls, self.tools, parallel=self.parallel_tools
            )
            for event in results:
                yield event
            if stop is not None:
                yield self._error(invocation, "stop_agent_error", str(stop))
                return
        yield self._error(
            invocation, "max_steps_exceeded", f"the agent used all {max_steps} steps without a final answer"
        )
