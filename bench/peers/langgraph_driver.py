"""LangGraph under the peers workload: StateGraph(MessagesState) with a ToolNode.

Runs in bench/.venv-peers, as a child of run.py: `langgraph_driver.py CONFIG WORKDIR`.

- `memory`: InMemorySaver;
- `sqlite`: SqliteSaver (langgraph-checkpoint-sqlite) on a SQLite file.

The graph is the canonical tool loop (agent -> tools_condition -> tools -> agent), invoked
synchronously: that is SqliteSaver's own mode (its async twin goes through aiosqlite's
thread), so LangGraph gets its most direct path. A thread id is a session.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for `bench.peers.workload`

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from bench.peers import workload

CONFIGS = ("memory", "sqlite")


def _message_size(message: BaseMessage) -> int:
    size = workload.text_size(message.content)
    for call in getattr(message, "tool_calls", None) or ():
        size += len(call["name"]) + len(json.dumps(call["args"]))
    return size


class FakeChatModel(BaseChatModel):
    """Three lookups, then the answer; records each request's size."""

    recorder: Any = None

    @property
    def _llm_type(self) -> str:
        return "bench-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> FakeChatModel:
        return self  # the script decides the calls; the tool schemas are not needed

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        size = sum(_message_size(m) for m in messages)
        index = self.recorder.record(size)
        kind, value = workload.step_for(index, self.recorder.turn)
        if kind == "call":
            call_id = f"call_{self.recorder.turn}_{index}"
            message = AIMessage(
                content="", tool_calls=[{"name": workload.TOOL_NAME, "args": {"q": value}, "id": call_id}]
            )
        else:
            message = AIMessage(content=value)
        return ChatResult(generations=[ChatGeneration(message=message)])


class LangGraphDriver:
    def __init__(self, config: str, workdir: str) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.recorder = workload.Recorder()
        self.counter: workload.Counter | None = None
        self.graph: Any = None
        self.connection: sqlite3.Connection | None = None
        self.sessions = 0

    async def setup(self) -> dict[str, Any]:
        if self.config == "sqlite":
            counter = workload.SqliteCounter()
            counter.install()
            self.counter = counter
            self.connection = sqlite3.connect(str(self.workdir / "langgraph.sqlite3"), check_same_thread=False)
            checkpointer: Any = SqliteSaver(self.connection)
            storage = "SqliteSaver, SQLite file"
        else:
            checkpointer = InMemorySaver()
            storage = "InMemorySaver"
        model = FakeChatModel(recorder=self.recorder).bind_tools([workload.lookup])

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke([SystemMessage(workload.INSTRUCTION), *state["messages"]])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([workload.lookup]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        self.graph = builder.compile(checkpointer=checkpointer)
        return {
            "runtime": "LangGraph",
            "storage": storage,
            "version": f"langgraph {version('langgraph')}, checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}",
            "durable": self.config == "sqlite",
        }

    async def new_session(self, label: str) -> Any:
        self.sessions += 1
        return {"configurable": {"thread_id": f"{label}-{self.sessions}"}}

    async def turn(self, session: Any, number: int) -> None:
        result = self.graph.invoke({"messages": [HumanMessage(workload.user_message(number))]}, session)
        final = result["messages"][-1].content
        if final != workload.answer(number):
            raise RuntimeError(f"turn {number}: the graph answered {final!r}")

    async def finish(self, session: Any, turns: int) -> dict[str, Any]:
        messages = len(self.graph.get_state(session).values["messages"])
        if self.connection is not None:
            self.connection.close()
        return {"stored_messages": messages}


def build(config: str, workdir: str) -> LangGraphDriver:
    return LangGraphDriver(config, workdir)


if __name__ == "__main__":
    sys.exit(workload.main(build, CONFIGS))
