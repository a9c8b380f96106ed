"""ChainAgent, ParallelAgent and CycleAgent (SPEC 11.3) through the Runner: event order,
branches and filter keys, what each child's model is shown, and how loops end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from runs.core.agents.composite import OBJECT_PARALLEL_RESULTS, ChainAgent, CycleAgent, ParallelAgent
from runs.core.agents.llm import LLMAgent
from runs.core.errors import ModelError
from runs.core.invocation import Invocation
from runs.core.llm.base import ToolSpec
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import OBJECT_COMPLETION, Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"


def lookup(topic: str) -> dict[str, str]:
    """Look something up.

    Args:
        topic: what to look up
    """
    return {"topic": topic, "found": f"facts about {topic}"}


async def run(agent: Any, message: str = "go") -> tuple[list[Event], list[Event], Any]:
    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[agent], session_service=service)
    handle = await runner.start(user_id="alice", message=message, stream=True)
    events = [e async for e in handle.events()]
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=200)
    return events, stored, await handle.wait()


def complete(events: list[Event]) -> list[Event]:
    return [e for e in events if not e.partial and e.message is not None]


# -- chain ------------------------------------------------------------------------------------


async def test_a_chain_runs_children_in_order_and_each_sees_the_ones_before() -> None:
    first_model = ScriptedModel.of(ScriptStep.call("lookup", {"topic": "tls"}), "TLS facts gathered.")
    second_model = ScriptedModel.of("Report: TLS is broken.")
    chain = ChainAgent(
        name="pipeline",
        agents=[
            LLMAgent(name="research", model=first_model, tools=[FunctionTool(lookup)]),
            LLMAgent(name="write", model=second_model),
        ],
    )
    events, stored, record = await run(chain)
    first_model.assert_consumed()
    second_model.assert_consumed()

    assert record.status == "completed"
    steps = [(e.author, e.role, e.branch) for e in complete(events)]
    assert steps == [
        ("research", "assistant", "pipeline/research"),
        ("research", "tool", "pipeline/research"),
        ("research", "assistant", "pipeline/research"),
        ("write", "assistant", "pipeline/write"),
    ]
    # The chain shares the parent's filter key: the writer's request shows the research.
    assert {e.filter_key for e in complete(events)} == {APP}
    # SPEC 4.5: the researcher's steps reach the writer as one "For context:" user message,
    # never as the writer's own assistant and tool turns.
    sent = second_model.requests[0].messages
    assert [m.role for m in sent] == ["user", "user"] and sent[0].content == "go"
    assert sent[1].content.splitlines() == [
        'For context: [research] called tool `lookup` with arguments {"topic": "tls"}.',
        *[line for line in sent[1].content.splitlines() if "returned:" in line],
        "For context: [research] said: TLS facts gathered.",
    ]
    assert [e.author for e in stored if e.message is not None] == ["user", "research", "research", "research", "write"]


async def test_a_chain_stops_at_the_first_error() -> None:
    second = ScriptedModel.of("never")
    chain = ChainAgent(
        name="pipeline",
        agents=[
            LLMAgent(name="research", model=ScriptedModel.of(ScriptStep.fail(ModelError("bad request")))),
            LLMAgent(name="write", model=second),
        ],
    )
    events, _, record = await run(chain)
    assert record.status == "failed"
    assert [e.author for e in events if e.is_error and not e.is_runner_completion] == ["research"]
    assert second.requests == [] and second.remaining == 1


# -- parallel ---------------------------------------------------------------------------------


async def test_parallel_branches_get_their_own_branch_and_filter_key_and_isolated_histories() -> None:
    slow = ScriptedModel.of(
        ScriptStep.call("lookup", {"topic": "logs"}),
        ScriptStep.answer("Logs: 3 TLS errors.", chunk_size=2, delay_s=0.01),
    )
    fast = ScriptedModel.of(ScriptStep.call("lookup", {"topic": "cert"}), "Cert: expired.")
    parallel = ParallelAgent(
        name="fanout",
        agents=[
            LLMAgent(name="logs", model=slow, tools=[FunctionTool(lookup)]),
            LLMAgent(name="cert", model=fast, tools=[FunctionTool(lookup)]),
        ],
    )
    events, stored, record = await run(parallel)
    slow.assert_consumed()
    fast.assert_consumed()
    assert record.status == "completed"

    for event in complete(events):
        assert event.branch == f"fanout/{event.author}"
        assert event.filter_key == f"{APP}/{event.author}"
    # Each branch's second request shows its own tool round, never its sibling's.
    logs_view = " ".join(m.content for m in slow.requests[1].messages)
    cert_view = " ".join(m.content for m in fast.requests[1].messages)
    assert "facts about logs" in logs_view and "facts about cert" not in logs_view
    assert "facts about cert" in cert_view and "facts about logs" not in cert_view
    assert "go" in logs_view and "go" in cert_view  # both see the shared user message
    # The fast branch finished first, yet the results list follows the declared order.
    answers = [e for e in complete(events) if e.role == "assistant" and not e.message.tool_calls]  # type: ignore[union-attr]  # complete() keeps messages
    assert [e.author for e in answers] == ["cert", "logs"]
    results = next(e for e in events if e.object == OBJECT_PARALLEL_RESULTS)
    assert [(r["agent"], r["branch"], r["filter_key"], r["text"]) for r in results.extensions["results"]] == [
        ("logs", "fanout/logs", f"{APP}/logs", "Logs: 3 TLS errors."),
        ("cert", "fanout/cert", f"{APP}/cert", "Cert: expired."),
    ]
    # Within each branch the ledger keeps its order: call, result, answer.
    for name in ("logs", "cert"):
        mine = [e.role for e in stored if e.author == name and e.message is not None]
        assert mine == ["assistant", "tool", "assistant"]


async def test_a_failing_branch_does_not_stop_its_siblings() -> None:
    ok = ScriptedModel.of("fine")
    parallel = ParallelAgent(
        name="fanout",
        agents=[
            LLMAgent(name="bad", model=ScriptedModel.of(ScriptStep.fail(ModelError("refused")))),
            LLMAgent(name="good", model=ok),
        ],
    )
    events, _, record = await run(parallel)
    ok.assert_consumed()
    results = next(e for e in events if e.object == OBJECT_PARALLEL_RESULTS).extensions["results"]
    assert results[0]["agent"] == "bad" and results[0]["error"]["type"] == "model_error"
    assert results[1] == {**results[1], "agent": "good", "text": "fine"}
    assert record.status == "failed"


# -- cycle ------------------------------------------------------------------------------------


class Counter:
    """A tiny agent: says its iteration number; escalates on `stop_at`."""

    kind = "llm"
    model_name = None
    description = ""

    def __init__(self, name: str, stop_at: int | None = None) -> None:
        self.name = name
        self.stop_at = stop_at
        self.calls = 0

    async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
        self.calls += 1
        yield invocation.stamp(
            Event(
                author=self.name,
                object=OBJECT_COMPLETION,
                done=True,
                message=Message(role="assistant", content=f"{self.name} #{self.calls}"),
                extensions={"escalate": True} if self.calls == self.stop_at else {},
            )
        )


async def test_a_cycle_loops_over_its_agents_until_the_iterations_run_out() -> None:
    cycle = CycleAgent(name="loop", agents=[Counter("draft"), Counter("review")], max_iterations=3)
    events, _, record = await run(cycle)
    assert record.status == "completed"
    assert [e.text for e in complete(events)] == [
        "draft #1",
        "review #1",
        "draft #2",
        "review #2",
        "draft #3",
        "review #3",
    ]
    assert {e.branch for e in complete(events)} == {"loop/draft", "loop/review"}


async def test_a_sub_agent_ends_the_cycle_by_escalating() -> None:
    review = Counter("review", stop_at=2)
    cycle = CycleAgent(name="loop", agents=[Counter("draft"), review, Counter("after")], max_iterations=10)
    events, _, _ = await run(cycle)
    assert [e.text for e in complete(events)] == ["draft #1", "review #1", "after #1", "draft #2", "review #2"]


class ExitLoop:
    """A tool that ends the enclosing cycle (through its result's extensions)."""

    name = "exit_loop"
    description = "Call when the work is done to leave the loop."

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters={"type": "object", "properties": {}})

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        context.extensions["escalate"] = True
        return "leaving the loop"


async def test_an_llm_agent_ends_the_cycle_with_a_tool_and_errors_end_it_too() -> None:
    model = ScriptedModel.of("try 1", "try 2", ScriptStep.call("exit_loop", {}), "unused")
    worker = LLMAgent(name="worker", model=model, tools=[ExitLoop()])
    events, _, _ = await run(CycleAgent(name="loop", agents=[worker], max_iterations=5))
    assert model.remaining == 1  # the loop ended right after the tool result
    assert [e.role for e in complete(events)][-1] == "tool"

    failing = LLMAgent(name="worker", model=ScriptedModel.of("ok", ScriptStep.fail(ModelError("nope")), "unused"))
    events, _, record = await run(CycleAgent(name="loop", agents=[failing], max_iterations=5))
    assert record.status == "failed" and sum(1 for e in events if e.is_error and not e.is_runner_completion) == 1
