"""StateGraph and GraphAgent (SPEC 10, 11.3): compile checks, supersteps, joins, reducers,
max steps, interrupt and resume, cancel, history in the initial state. Driven through the
public Runner API on in-memory services; the database checkpoint store has its own file."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from runs.core.agents.graph import (
    END,
    GraphAgent,
    GraphCompileError,
    InMemoryCheckpointStore,
    NodeContext,
    NotWaitingError,
    RunNotFoundError,
    StateField,
    StateGraph,
    StateSchema,
    graph_info,
    pending_interrupt,
    resume_graph_run,
)
from runs.core.agents.graph.events import (
    OBJECT_EXECUTION,
    OBJECT_INTERRUPT,
    OBJECT_NODE_COMPLETE,
    OBJECT_NODE_START,
    OBJECT_STATE_UPDATE,
)
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey, Summary, SummaryBoundary

APP = "t"


def make_runner(*agents: Any) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    return Runner(app=APP, agents=list(agents), session_service=service), service


async def run_events(runner: Runner, **kwargs: Any) -> list[Event]:
    handle = await runner.start(user_id=kwargs.pop("user_id", "alice"), stream=True, **kwargs)
    return [e async for e in handle.events()]


def nodes_of(events: list[Event], object_: str) -> list[str]:
    return [info.node for e in events if e.object == object_ and (info := graph_info(e)) and info.node]


def noop(state: Mapping[str, Any]) -> None:
    return None


# -- compile ------------------------------------------------------------------------------------


def compile_problems(graph: StateGraph) -> list[str]:
    with pytest.raises(GraphCompileError) as caught:
        graph.compile()
    return caught.value.problems


def test_compile_refuses_a_graph_without_entry_point() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite")).add_node("a", noop).set_finish_point("a")
    problems = compile_problems(graph)
    assert any("no entry point" in p for p in problems)


def test_compile_names_an_edge_to_an_unknown_node() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite")).add_node("a", noop)
    graph.set_entry_point("a").add_edge("a", "ghost").set_finish_point("a")
    assert compile_problems(graph) == ["edge 'a' -> 'ghost': unknown node 'ghost'"]


def test_compile_names_an_undeclared_conditional_target() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite")).add_node("a", noop).add_node("b", noop)
    graph.set_entry_point("a").add_conditional_edges("a", lambda s: "go", {"go": "b", "other": "nowhere"})
    graph.set_finish_point("b")
    problems = compile_problems(graph)
    assert problems == ["conditional edge from 'a' declares target 'other' -> 'nowhere', which is not a node"]


def test_compile_names_an_unreachable_node() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite"))
    graph.add_node("a", noop).add_node("island", noop)
    graph.set_entry_point("a").set_finish_point("a").set_finish_point("island")
    assert compile_problems(graph) == ["node 'island' is unreachable from the entry point"]


def test_compile_names_a_node_with_no_path_to_the_end() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite"))
    graph.add_node("a", noop).add_node("loop1", noop).add_node("loop2", noop)
    graph.set_entry_point("a").set_finish_point("a").add_edge("a", "loop1")
    graph.add_edge("loop1", "loop2").add_edge("loop2", "loop1")
    problems = compile_problems(graph)
    assert sorted(problems) == [
        "node 'loop1' has no path to the end ('__end__')",
        "node 'loop2' has no path to the end ('__end__')",
    ]


def test_compile_lists_every_problem_at_once_and_refuses_duplicates() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite")).add_node("a", noop).add_node("a", noop)
    problems = compile_problems(graph)
    assert "node 'a' is declared twice" in problems
    assert any("no entry point" in p for p in problems)
    assert any("'a' has no path to the end" in p for p in problems)


def test_a_join_whose_source_is_unreachable_makes_its_target_unreachable() -> None:
    graph = StateGraph("g", StateSchema.of(x="overwrite"))
    graph.add_node("a", noop).add_node("b", noop).add_node("c", noop)
    graph.set_entry_point("a").add_edge(["a", "b"], "c").set_finish_point("c").set_finish_point("b")
    problems = compile_problems(graph)
    assert "node 'b' is unreachable from the entry point" in problems
    assert "node 'c' is unreachable from the entry point" in problems


# -- reducers -----------------------------------------------------------------------------------


def test_reducers_append_merge_and_overwrite() -> None:
    schema = StateSchema.of(
        items="append", facts="merge", last="overwrite", count=StateField(reducer=lambda a, b: (a or 0) + b)
    )
    state = schema.initial()
    assert state == {"items": [], "facts": {}, "last": None, "count": None}
    state, delta = schema.apply(
        state,
        [
            ("n1", {"items": [1, 2], "facts": {"a": 1}, "last": "x", "count": 2}),
            ("n2", {"items": 3, "facts": {"b": 2, "a": 9}, "last": "y", "count": 3}),
        ],
    )
    assert state == {"items": [1, 2, 3], "facts": {"a": 9, "b": 2}, "last": "y", "count": 5}
    assert delta == state
    _, unchanged = schema.apply(state, [("n3", {"last": "y"})])
    assert unchanged == {}


def test_defaults_are_fresh_per_run() -> None:
    schema = StateSchema.of(items="append")
    first = schema.initial()
    first["items"].append("leak")
    assert schema.initial() == {"items": []}


# -- execution ----------------------------------------------------------------------------------


def fan_out_graph(log: list[str], delays: Mapping[str, float]) -> StateGraph:
    schema = StateSchema.of(trail="append", facts="merge", winner="overwrite")
    graph = StateGraph("fan", schema)

    def worker(name: str) -> Any:
        async def run(state: Mapping[str, Any]) -> dict[str, Any]:
            log.append(f"start {name}")
            await asyncio.sleep(delays.get(name, 0))
            log.append(f"end {name}")
            return {"trail": [name], "facts": {name: True}, "winner": name}

        return run

    graph.add_node("plan", worker("plan"))
    graph.add_node("slow", worker("slow"))
    graph.add_node("fast", worker("fast"))
    graph.add_node("extra", worker("extra"))
    graph.add_node("join", lambda state: {"trail": [f"join saw {sorted(state['facts'])}"]})
    graph.set_entry_point("plan")
    graph.add_edge("plan", "slow").add_edge("plan", "fast")
    graph.add_edge("fast", "extra")
    graph.add_edge(["slow", "extra"], "join")
    graph.set_finish_point("join")
    return graph


async def test_fan_out_runs_concurrently_and_the_join_waits_for_all_sources() -> None:
    log: list[str] = []
    store = InMemoryCheckpointStore()
    agent = GraphAgent(name="fan", graph=fan_out_graph(log, {"slow": 0.05}), checkpoints=store)
    runner, _ = make_runner(agent)
    handle = await runner.start(user_id="alice", message="go", stream=True)
    events = [e async for e in handle.events()]

    # slow and fast started together (one superstep), fast finished first.
    assert log[:4] == ["start plan", "end plan", "start slow", "start fast"]
    assert log.index("end fast") < log.index("end slow")
    # extra ran in the step after fast, while slow was still going; the join only after both.
    assert nodes_of(events, OBJECT_NODE_START) == ["plan", "slow", "fast", "extra", "join"]
    final = await store.latest(handle.run_id)
    assert final is not None and final.finished
    # Writes fold in declaration order, whatever the finishing order: slow before fast.
    assert final.state["trail"] == ["plan", "slow", "fast", "extra", "join saw ['extra', 'fast', 'plan', 'slow']"]
    assert final.state["winner"] == "extra"
    assert [c.step for c in await store.list(handle.run_id)] == [0, 1, 2, 3, 4]
    assert events[-1].extensions["status"] == "completed"


async def test_events_mark_node_progress_and_state_deltas() -> None:
    agent = GraphAgent(name="fan", graph=fan_out_graph([], {}), checkpoints=InMemoryCheckpointStore())
    runner, service = make_runner(agent)
    handle = await runner.start(user_id="alice", message="go", stream=True)
    events = [e async for e in handle.events()]
    assert sorted(nodes_of(events, OBJECT_NODE_COMPLETE)) == ["extra", "fast", "join", "plan", "slow"]
    # Each node finishes after it starts.
    for node in ("plan", "slow", "fast", "extra", "join"):
        start = next(i for i, e in enumerate(events) if e.object == OBJECT_NODE_START and graph_info(e).node == node)  # type: ignore[union-attr]  # graph events have info
        end = next(i for i, e in enumerate(events) if e.object == OBJECT_NODE_COMPLETE and graph_info(e).node == node)  # type: ignore[union-attr]  # graph events have info
        assert start < end
    updates = [graph_info(e) for e in events if e.object == OBJECT_STATE_UPDATE]
    assert updates[0] is not None and updates[0].state_delta == {
        "trail": ["plan"],
        "facts": {"plan": True},
        "winner": "plan",
    }
    done = [graph_info(e) for e in events if e.object == OBJECT_EXECUTION]
    assert len(done) == 1 and done[0] is not None and done[0].status == "completed"
    # Progress is emitted, never persisted: the ledger has the user message and the completion.
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=100)
    assert [e.object for e in stored] == ["chat.completion", "runner.completion"]


def routing_graph(pick: Any) -> StateGraph:
    graph = StateGraph("route", StateSchema.of(trail="append", pick="overwrite"))
    graph.add_node("decide", lambda s: {"pick": pick})
    for name in ("a", "b", "c"):
        graph.add_node(name, lambda s, ctx: {"trail": [ctx.node]})
    graph.set_entry_point("decide")
    graph.add_conditional_edges("decide", lambda s: s["pick"], {"a": "a", "b": "b", "c": "c", "stop": END})
    for name in ("a", "b", "c"):
        graph.set_finish_point(name)
    return graph


@pytest.mark.parametrize(("pick", "expected"), [(["a", "c"], ["a", "c"]), ("b", ["b"]), ("stop", [])])
async def test_a_conditional_edge_routes_and_fans_out_to_declared_targets(pick: Any, expected: list[str]) -> None:
    store = InMemoryCheckpointStore()
    runner, _ = make_runner(GraphAgent(name="route", graph=routing_graph(pick), checkpoints=store))
    handle = await runner.start(user_id="alice", message="x", stream=True)
    events = [e async for e in handle.events()]
    final = await store.latest(handle.run_id)
    assert final is not None and final.finished and final.state["trail"] == expected
    assert nodes_of(events, OBJECT_NODE_START) == ["decide", *expected]


async def test_routing_to_an_undeclared_label_fails_the_run_naming_the_node() -> None:
    graph = StateGraph("bad", StateSchema.of(x="overwrite"))
    graph.add_node("decide", noop).add_node("a", noop)
    graph.set_entry_point("decide").add_conditional_edges("decide", lambda s: "elsewhere", ["a"]).set_finish_point("a")
    runner, _ = make_runner(GraphAgent(name="bad", graph=graph))
    events = await run_events(runner, message="x")
    error = next(e for e in events if e.is_error)
    assert error.error is not None and error.error.type == "graph_undeclared_target"
    assert "node 'decide' routed to 'elsewhere'" in error.error.message
    assert events[-1].extensions["status"] == "failed"


async def test_a_failing_node_fails_the_run_with_its_name() -> None:
    def explode(state: Mapping[str, Any]) -> None:
        raise LookupError("no such host")

    graph = StateGraph("boom", StateSchema.of(x="overwrite")).add_node("probe", explode)
    graph.set_entry_point("probe").set_finish_point("probe")
    runner, _ = make_runner(GraphAgent(name="boom", graph=graph))
    events = await run_events(runner, message="x")
    error = next(e for e in events if e.is_error)
    assert error.error is not None and error.error.type == "graph_node_error"
    assert error.error.message == "node 'probe' failed: LookupError: no such host"


async def test_writing_an_unknown_field_fails_naming_node_and_field() -> None:
    graph = StateGraph("typo", StateSchema.of(x="overwrite")).add_node("n", lambda s: {"y": 1})
    graph.set_entry_point("n").set_finish_point("n")
    runner, _ = make_runner(GraphAgent(name="typo", graph=graph))
    events = await run_events(runner, message="x")
    error = next(e for e in events if e.is_error)
    assert error.error is not None and "node 'n' wrote 'y'" in error.error.message


async def test_a_graph_stops_with_an_error_past_max_steps() -> None:
    graph = StateGraph("loop", StateSchema.of(n=StateField(reducer=lambda a, b: (a or 0) + b, default=0)), max_steps=5)
    graph.add_node("tick", lambda s: {"n": 1})
    graph.set_entry_point("tick").add_conditional_edges(
        "tick", lambda s: "again" if s["n"] < 1000 else "done", {"again": "tick", "done": END}
    )
    store = InMemoryCheckpointStore()
    runner, _ = make_runner(GraphAgent(name="loop", graph=graph, checkpoints=store))
    handle = await runner.start(user_id="alice", message="x", stream=True)
    events = [e async for e in handle.events()]
    error = next(e for e in events if e.is_error)
    assert error.error is not None and error.error.type == "graph_max_steps"
    assert "ran 5 supersteps" in error.error.message
    assert nodes_of(events, OBJECT_NODE_START) == ["tick"] * 5
    latest = await store.latest(handle.run_id)
    assert latest is not None and latest.state["n"] == 5


async def test_the_default_step_limit_is_100() -> None:
    graph = StateGraph("loop", StateSchema.of(x="overwrite"))
    graph.add_node("tick", noop).set_entry_point("tick")
    graph.add_conditional_edges("tick", lambda s: "again", {"again": "tick", "done": END})
    runner, _ = make_runner(GraphAgent(name="loop", graph=graph))
    events = await run_events(runner, message="x")
    assert len(nodes_of(events, OBJECT_NODE_START)) == 100
    assert any(e.error is not None and e.error.type == "graph_max_steps" for e in events)


# -- interrupt and resume -----------------------------------------------------------------------


def approval_graph(side_effects: list[str]) -> StateGraph:
    graph = StateGraph("approve", StateSchema.of(report="overwrite", approvals="append", trail="append"))
    graph.add_node("draft", lambda s: side_effects.append("draft") or {"report": "cert expired", "trail": ["draft"]})
    graph.add_node("other", lambda s: side_effects.append("other") or {"trail": ["other"]})

    def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        side_effects.append("ask")
        answer = ctx.interrupt({"question": "Send the report?", "report": state["report"]})
        return {"approvals": [answer], "trail": ["ask"]}

    graph.add_node("ask", ask)
    graph.add_node("send", lambda s: {"trail": ["send"]})
    graph.set_entry_point("draft")
    graph.add_edge("draft", "ask").add_edge("draft", "other")
    graph.add_edge(["ask", "other"], "send").set_finish_point("send")
    return graph


async def test_interrupt_pauses_with_a_persisted_question_and_resume_continues() -> None:
    effects: list[str] = []
    store = InMemoryCheckpointStore()
    agent = GraphAgent(name="approve", graph=approval_graph(effects), checkpoints=store)
    runner, service = make_runner(agent)
    first = await runner.start(user_id="alice", message="check payments", stream=True)
    events = [e async for e in first.events()]
    record = await first.wait()

    assert record.status == "completed"
    question = next(e for e in events if e.object == OBJECT_INTERRUPT)
    assert question.text == "Send the report?" and question.seq is not None  # persisted
    info = graph_info(question)
    assert info is not None and info.node == "ask" and info.interrupt is not None
    assert info.interrupt["payload"] == {"question": "Send the report?", "report": "cert expired"}
    assert graph_info(events[-2]).status == "interrupted"  # type: ignore[union-attr]  # the execution marker
    assert nodes_of(events, OBJECT_NODE_COMPLETE) == ["draft", "other"]  # ask paused, send never ran
    waiting = await pending_interrupt(store, first.run_id)
    assert waiting is not None and waiting.node == "ask"
    waiting_checkpoint = await store.latest(first.run_id)
    assert waiting_checkpoint is not None and info.checkpoint_id == waiting_checkpoint.id

    second = await resume_graph_run(runner, user_id="alice", run_id=first.run_id, value="yes", stream=True)
    resumed = [e async for e in second.events()]
    assert (await second.wait()).status == "completed"
    assert second.session_id == first.session_id
    # Only the paused node ran again; `other` finished before the pause and kept its write.
    assert effects == ["draft", "other", "ask", "ask"]
    assert nodes_of(resumed, OBJECT_NODE_START) == ["ask", "send"]
    final = await store.latest(second.run_id)
    assert final is not None and final.finished
    assert final.state["approvals"] == ["yes"] and final.state["trail"] == ["draft", "other", "ask", "send"]
    # Lineage across runs: the resumed run's first checkpoint points at the pause.
    assert (await store.list(second.run_id))[0].parent_id == waiting_checkpoint.id
    # The answer is the resumed run's user message, in the same session.
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=first.session_id), limit=100)
    assert [e.text for e in stored if e.role == "user"] == ["check payments", "yes"]
    assert await pending_interrupt(store, first.run_id) is None


async def test_a_pause_is_answered_once() -> None:
    store = InMemoryCheckpointStore()
    runner, _ = make_runner(GraphAgent(name="approve", graph=approval_graph([]), checkpoints=store))
    first = await runner.start(user_id="alice", message="go", stream=True)
    [e async for e in first.events()]
    await first.wait()
    second = await resume_graph_run(runner, user_id="alice", run_id=first.run_id, value="yes")
    with pytest.raises(NotWaitingError, match="already resumed"):
        await resume_graph_run(runner, user_id="alice", run_id=first.run_id, value="again")
    await second.wait()
    # The resuming run finished the graph: it waits for nothing either.
    with pytest.raises(NotWaitingError, match="not waiting"):
        await resume_graph_run(runner, user_id="alice", run_id=second.run_id, value="more")


async def test_resume_refuses_someone_elses_run_and_non_graph_runs() -> None:
    store = InMemoryCheckpointStore()
    llm = LLMAgent(name="chat", model=ScriptedModel.of("hello"))
    runner, _ = make_runner(GraphAgent(name="approve", graph=approval_graph([]), checkpoints=store), llm)
    first = await runner.start(user_id="alice", message="go", stream=True)
    [e async for e in first.events()]
    with pytest.raises(RunNotFoundError):
        await resume_graph_run(runner, user_id="bob", run_id=first.run_id, value="yes")
    with pytest.raises(RunNotFoundError):
        await resume_graph_run(runner, user_id="alice", run_id="nope", value="yes")
    chat = await runner.start(user_id="alice", message="hi", agent="chat", stream=True)
    [e async for e in chat.events()]
    with pytest.raises(NotWaitingError, match="not a graph run"):
        await resume_graph_run(runner, user_id="alice", run_id=chat.run_id, value="yes")


async def test_a_node_can_ask_twice_and_gets_each_answer_in_order() -> None:
    graph = StateGraph("two", StateSchema.of(answers="overwrite"))

    def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"answers": [ctx.interrupt("first?"), ctx.interrupt("second?")]}

    graph.add_node("ask", ask).set_entry_point("ask").set_finish_point("ask")
    store = InMemoryCheckpointStore()
    runner, _ = make_runner(GraphAgent(name="two", graph=graph, checkpoints=store))
    run = await runner.start(user_id="alice", message="go", stream=True)
    questions = [e.text async for e in run.events() if e.object == OBJECT_INTERRUPT]
    assert questions == ["first?"]
    run = await resume_graph_run(runner, user_id="alice", run_id=run.run_id, value=1, stream=True)
    assert [e.text async for e in run.events() if e.object == OBJECT_INTERRUPT] == ["second?"]
    run = await resume_graph_run(runner, user_id="alice", run_id=run.run_id, value=2, stream=True)
    [e async for e in run.events()]
    final = await store.latest(run.run_id)
    assert final is not None and final.state["answers"] == [1, 2]


# -- cancel ---------------------------------------------------------------------------------------


async def test_cancel_mid_graph_stops_running_nodes_and_keeps_the_last_checkpoint() -> None:
    started = asyncio.Event()
    stopped: list[str] = []

    async def wait_forever(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.append(ctx.node)
            raise
        return {"trail": [ctx.node]}

    graph = StateGraph("slow", StateSchema.of(trail="append"))
    graph.add_node("first", lambda s: {"trail": ["first"]})
    graph.add_node("hang_a", wait_forever).add_node("hang_b", wait_forever).add_node(
        "after", lambda s: {"trail": ["after"]}
    )
    graph.set_entry_point("first").add_edge("first", "hang_a").add_edge("first", "hang_b")
    graph.add_edge(["hang_a", "hang_b"], "after").set_finish_point("after")
    store = InMemoryCheckpointStore()
    runner, _ = make_runner(GraphAgent(name="slow", graph=graph, checkpoints=store))
    handle = await runner.start(user_id="alice", message="go", stream=True)
    seen: list[Event] = []

    async def read() -> None:
        async for event in handle.events():
            seen.append(event)

    reader = asyncio.create_task(read())
    await asyncio.wait_for(started.wait(), 5)
    assert runner.cancel(handle.run_id)
    record = await asyncio.wait_for(handle.wait(), 5)
    await reader

    assert record.status == "cancelled"
    assert sorted(stopped) == ["hang_a", "hang_b"]  # both concurrent tasks were cancelled
    assert "after" not in nodes_of(seen, OBJECT_NODE_START)
    assert seen[-1].is_runner_completion and seen[-1].extensions["status"] == "cancelled"
    latest = await store.latest(handle.run_id)
    assert latest is not None and latest.step == 1 and latest.state["trail"] == ["first"]
    assert latest.next_nodes == ("hang_a", "hang_b")


# -- history --------------------------------------------------------------------------------------


async def test_the_initial_state_gets_the_summary_and_the_events_after_its_boundary() -> None:
    seen: dict[str, Any] = {}

    def look(state: Mapping[str, Any]) -> None:
        seen.update(state)

    graph = StateGraph("look", StateSchema.of(messages="append", user_input="overwrite"))
    graph.add_node("look", look).set_entry_point("look").set_finish_point("look")
    chat = LLMAgent(name="chat", model=ScriptedModel.of("first answer", "second answer"))
    runner, service = make_runner(chat, GraphAgent(name="look", graph=graph))
    first = await runner.start(user_id="alice", message="old question", agent="chat", stream=True)
    [e async for e in first.events()]
    second = await runner.start(
        user_id="alice", message="newer question", agent="chat", session_id=first.session_id, stream=True
    )
    [e async for e in second.events()]
    key = SessionKey(app=APP, user_id="alice", session_id=first.session_id)
    stored = await service.list_events(key, limit=100)
    boundary = next(e for e in stored if e.text == "first answer")
    await service.put_summary(
        key,
        Summary(
            filter_key=APP,
            text="The user asked an old question.",
            boundary=SummaryBoundary(
                cutoff_at=boundary.created_at, last_event_id=boundary.id, last_seq=boundary.seq or 0
            ),
        ),
    )

    third = await runner.start(
        user_id="alice", message="what now?", agent="look", session_id=first.session_id, stream=True
    )
    [e async for e in third.events()]
    contents = [(m["role"], m["content"]) for m in seen["messages"]]
    assert contents[0][0] == "system" and "The user asked an old question." in contents[0][1]
    # The chat agent's answer is another agent's: context for the graph (SPEC 4.5), not its own turn.
    assert contents[1:] == [
        ("user", "newer question"),
        ("user", "For context: [chat] said: second answer"),
        ("user", "what now?"),
    ]
    assert seen["user_input"] == "what now?"


async def test_a_run_whose_process_died_mid_graph_resumes_from_its_last_checkpoint() -> None:
    hung = asyncio.Event()
    attempts: list[str] = []

    async def flaky(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        attempts.append(ctx.node)
        if len(attempts) == 1:
            hung.set()
            await asyncio.sleep(3600)  # the process dies while this runs
        return {"trail": [ctx.node]}

    def build() -> GraphAgent:
        graph = StateGraph("durable", StateSchema.of(trail="append"))
        graph.add_node("first", lambda s: {"trail": ["first"]}).add_node("second", flaky)
        graph.set_entry_point("first").add_edge("first", "second").set_finish_point("second")
        return GraphAgent(name="durable", graph=graph, checkpoints=store)

    store = InMemoryCheckpointStore()
    service = InMemorySessionService()
    dying = Runner(app=APP, agents=[build()], session_service=service)
    handle = await dying.start(user_id="alice", message="go", stream=True)
    await asyncio.wait_for(hung.wait(), 5)
    # What a reaper leaves behind: the run marked interrupted, its checkpoints in the store.
    survivor_runs = type(dying.run_store)()
    await survivor_runs.create(handle.record.replace(status="interrupted"))
    dying.cancel(handle.run_id)
    await handle.wait()

    survivor = Runner(app=APP, agents=[build()], session_service=service, run_store=survivor_runs)
    resumed = await resume_graph_run(
        survivor, user_id="alice", run_id=handle.run_id, value=None, message="continue", stream=True
    )
    events = [e async for e in resumed.events()]
    assert nodes_of(events, OBJECT_NODE_START) == ["second"]  # `first` is not run again
    final = await store.latest(resumed.run_id)
    assert final is not None and final.finished and final.state["trail"] == ["first", "second"]
    assert attempts == ["second", "second"]


async def test_model_calls_count_the_graphs_model_calls_not_its_own_words_tool_calls_or_questions() -> None:
    from runs.core.tools.function import FunctionTool

    def lookup(host: str) -> str:
        """Look a host up.

        Args:
            host: the host
        """
        return f"{host}: certificate expired"

    async def greet(state: Mapping[str, Any], ctx: NodeContext) -> None:
        await ctx.say("Checking the host.")

    def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"answer": ctx.interrupt({"question": "Renew it?"})}

    model = ScriptedModel.of("The certificate expired.")
    graph = (
        StateGraph(
            "count", StateSchema.of(messages="append", last_response="overwrite", found="overwrite", answer="overwrite")
        )
        .add_node("greet", greet)
        .add_tool_node("lookup", FunctionTool(lookup), args={"host": "auth"}, output_key="found")
        .add_model_node("explain", model)
        .add_node("ask", ask)
        .set_entry_point("greet")
        .add_edge("greet", "lookup")
        .add_edge("lookup", "explain")
        .add_edge("explain", "ask")
        .set_finish_point("ask")
    )
    runner, _ = make_runner(GraphAgent(name="count", graph=graph, checkpoints=InMemoryCheckpointStore()))
    handle = await runner.start(user_id="alice", message="check auth", stream=True)
    events = [e async for e in handle.events()]
    record = await handle.wait()
    assert any(e.object == OBJECT_INTERRUPT for e in events)  # the question went out
    spoken = [e for e in events if e.role == "assistant" and not e.partial]
    assert len(spoken) == 4  # its words, its tool call, the model's answer, its question
    assert (record.model_calls, record.tool_calls) == (1, 1)
