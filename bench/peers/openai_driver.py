"""The OpenAI Agents SDK under the peers workload: an Agent with the lookup tool and SQLiteSession.

Runs in bench/.venv-peers, as a child of run.py: `openai_driver.py CONFIG WORKDIR`.

- `sqlite`: SQLiteSession on a SQLite file.

The model is `FakeModel`, a direct implementation of the SDK's `Model` interface building
its outputs with `agents.testing`'s helpers. The SDK's own `agents.testing.ScriptedModel`
(present in 0.24) is not used: it deep-copies every request it records (`_record_call`),
a cost that grows with the history and belongs to the test double, not to the SDK, while
the other runtimes' fakes only measure their request.

Tracing is disabled: with no API key its exporter only logs, and the other runtimes export
nothing either.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for `bench.peers.workload`

from agents import Agent, Model, ModelResponse, RunConfig, Runner, SQLiteSession, Usage, function_tool
from agents.testing.model import assistant_message, function_call

from bench.peers import workload

CONFIGS = ("sqlite",)


def _item_size(item: Any) -> int:
    data = item if isinstance(item, dict) else item.model_dump()
    kind = data.get("type")
    if kind == "function_call":
        return len(data.get("name") or "") + len(data.get("arguments") or "")
    if kind == "function_call_output":
        return workload.text_size(data.get("output"))
    content = data.get("content")
    if isinstance(content, str):
        return len(content)
    return sum(len(part.get("text") or "") for part in content or () if isinstance(part, dict))


def request_size(system_instructions: str | None, input: str | list[Any]) -> int:
    """Characters of the instructions, the messages' text, tool calls and tool outputs."""
    items = [{"content": input}] if isinstance(input, str) else input
    return len(system_instructions or "") + sum(_item_size(item) for item in items)


def _output(recorder: workload.Recorder, size: int) -> Any:
    index = recorder.record(size)
    kind, value = workload.step_for(index, recorder.turn)
    if kind == "call":
        return function_call(workload.TOOL_NAME, {"q": value}, call_id=f"call_{recorder.turn}_{index}")
    return assistant_message(value)


class FakeModel(Model):
    """Three lookups, then the answer; records each request's size."""

    def __init__(self, recorder: workload.Recorder) -> None:
        self.recorder = recorder

    async def get_response(
        self, system_instructions: str | None, input: str | list[Any], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        item = _output(self.recorder, request_size(system_instructions, input))
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the benchmark runs the SDK unstreamed")


class OpenAIDriver:
    def __init__(self, config: str, workdir: str) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.recorder = workload.Recorder()
        self.counter: workload.Counter | None = None
        self.agent: Any = None
        self.run_config = RunConfig(tracing_disabled=True)
        self.sessions = 0
        self.opened: list[SQLiteSession] = []

    async def setup(self) -> dict[str, Any]:
        counter = workload.SqliteCounter()
        counter.install()
        self.counter = counter
        model = FakeModel(self.recorder)
        self.agent = Agent(
            name="oncall", instructions=workload.INSTRUCTION, model=model, tools=[function_tool(workload.lookup)]
        )
        return {
            "runtime": "OpenAI Agents SDK",
            "storage": "SQLiteSession, SQLite file",
            "version": f"openai-agents {version('openai-agents')}",
            "durable": True,
        }

    async def new_session(self, label: str) -> Any:
        self.sessions += 1
        session = SQLiteSession(f"{label}-{self.sessions}", db_path=self.workdir / "openai.sqlite3")
        self.opened.append(session)
        return session

    async def turn(self, session: Any, number: int) -> None:
        result = await Runner.run(
            self.agent, workload.user_message(number), session=session, run_config=self.run_config
        )
        if result.final_output != workload.answer(number):
            raise RuntimeError(f"turn {number}: the agent answered {result.final_output!r}")

    async def finish(self, session: Any, turns: int) -> dict[str, Any]:
        items = len(await session.get_items())
        for opened in self.opened:
            opened.close()
        return {"stored_items": items}


def build(config: str, workdir: str) -> OpenAIDriver:
    return OpenAIDriver(config, workdir)


if __name__ == "__main__":
    sys.exit(workload.main(build, CONFIGS))
