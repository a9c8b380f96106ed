"""ScriptedModel: a test double that plays back a fixed script of responses.

Each call to `generate` consumes the next step of the script and records the request it
got. A step is a text answer, a set of tool calls, an exception to raise, or a callable
that computes the step from the request. `assert_consumed()` fails when steps are left.
It never pretends to be a real model: its name says what it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse
from sessions_app.core.events import Message, ToolCall, Usage, new_id


@dataclass(frozen=True, kw_only=True)
class ScriptStep:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    raises: BaseException | None = None
    chunk_size: int = 8
    delay_s: float = 0.0

    @classmethod
    def answer(cls, text: str, *, chunk_size: int = 8, delay_s: float = 0.0) -> ScriptStep:
        return cls(text=text, chunk_size=chunk_size, delay_s=delay_s)

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None) -> ScriptStep:
        return cls.calls((name, arguments, id))

    @classmethod
    def calls(
        cls, *calls: tuple[str, dict[str, Any] | str | None, str | None] | tuple[str, dict[str, Any] | str | None]
    ) -> ScriptStep:
        built = []
        for spec in calls:
            name, arguments = spec[0], spec[1]
            call_id = spec[2] if len(spec) > 2 else None
            args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            built.append(ToolCall(id=call_id or f"call_{new_id()[:8]}", name=name, arguments=args))
        return cls(tool_calls=tuple(built))

    @classmethod
    def fail(cls, error: BaseException) -> ScriptStep:
        return cls(raises=error)


Step = ScriptStep | Callable[[ModelRequest], ScriptStep]


@dataclass(kw_only=True)
class ScriptedModel:
    steps: list[Step] = field(default_factory=list)
    name: str = "scripted-test-model"
    context_window: int = 8192
    requests: list[ModelRequest] = field(default_factory=list)

    @classmethod
    def of(cls, *steps: Step | str, **kwargs: Any) -> ScriptedModel:
        return cls(steps=[ScriptStep.answer(s) if isinstance(s, str) else s for s in steps], **kwargs)

    def extend(self, steps: Iterable[Step]) -> None:
        self.steps.extend(steps)

    def info(self) -> ModelInfo:
        return ModelInfo(name=self.name, context_window=self.context_window, provider="scripted")

    @property
    def remaining(self) -> int:
        return len(self.steps)

    def assert_consumed(self) -> None:
        if self.steps:
            raise AssertionError(f"{len(self.steps)} scripted step(s) were never used")

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError("ScriptedModel: the script is exhausted but the model was called again")
        step = self.steps.pop(0)
        if callable(step):
            step = step(request)
        if step.raises is not None:
            raise step.raises
        response_id = f"scripted-{new_id()[:8]}"
        text = step.text
        for start in range(0, len(text), max(1, step.chunk_size)):
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            yield ModelResponse(
                id=response_id, partial=True, delta=text[start : start + step.chunk_size], model=self.name
            )
        prompt = sum(len(m.content) // 4 + 1 for m in request.messages)
        yield ModelResponse(
            id=response_id,
            partial=False,
            message=Message(role="assistant", content=text, tool_calls=step.tool_calls),
            finish_reason="tool_calls" if step.tool_calls else "stop",
            usage=Usage(prompt_tokens=prompt, completion_tokens=max(1, len(text) // 4)),
            model=self.name,
        )
