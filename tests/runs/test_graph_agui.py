"""Graph events through the AG-UI translator: node steps, state deltas, the interrupt, and a
paused run's RUN_FINISHED, each validated against the `ag_ui.core` models."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui.core import BaseEvent
from ag_ui.core import Event as AguiEvent
from pydantic import TypeAdapter

from runs.core.agents.graph import GraphAgent, InMemoryCheckpointStore, NodeContext, StateGraph, StateSchema
from runs.core.protocols.agui import GRAPH_INTERRUPT_EVENT, MODEL_STEP, AguiTranslator
from runs.core.runner import Runner
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService

ANY_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)


def wire(events: Sequence[BaseEvent]) -> list[dict[str, Any]]:
    """Each event as its camelCase JSON, re-parsed by the AG-UI model of its type."""
    out = []
    for item in events:
        data = json.loads(item.model_dump_json(by_alias=True, exclude_none=True))
        parsed = ANY_EVENT.validate_python(data)
        assert type(parsed) is type(item)
        out.append(data)
    return out


def review_graph() -> StateGraph:
    graph = StateGraph("review", StateSchema.of(facts="merge", verdict="overwrite"))
    graph.add_node("logs", lambda s: {"facts": {"logs": 3}})
    graph.add_node("cert", lambda s: {"facts": {"cert": "expired"}})

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"verdict": ctx.interrupt({"question": "Ship it?", "kind": "approval"})}

    graph.add_node("ask", ask)
    graph.set_entry_point("logs").set_entry_point("cert")
    graph.add_edge(["logs", "cert"], "ask").set_finish_point("ask")
    return graph


async def run_and_translate() -> tuple[list[Event], list[dict[str, Any]], str]:
    runner = Runner(
        app="t",
        agents=[GraphAgent(name="review", graph=review_graph(), checkpoints=InMemoryCheckpointStore())],
        session_service=InMemorySessionService(),
    )
    handle = await runner.start(user_id="alice", message="go", stream=True)
    events = [e async for e in handle.events()]
    translator = AguiTranslator(thread_id=handle.session_id)
    out: list[BaseEvent] = []
    for event in events:
        out.extend(translator.translate(event, run_id=handle.run_id))
    return events, wire(out), handle.run_id


async def test_graph_nodes_become_balanced_steps_and_state_becomes_json_patch() -> None:
    _, frames, _ = await run_and_translate()
    steps = [
        (f["type"], f["stepName"]) for f in frames if f["type"].startswith("STEP_") and f["stepName"] != MODEL_STEP
    ]
    # Both entry nodes run in one superstep; the join's node only starts after both finished.
    assert steps[:2] == [("STEP_STARTED", "logs"), ("STEP_STARTED", "cert")]
    assert set(steps[2:4]) == {("STEP_FINISHED", "logs"), ("STEP_FINISHED", "cert")}
    assert steps[4:] == [("STEP_STARTED", "ask"), ("STEP_FINISHED", "ask")]
    started = next(f for f in frames if f["type"] == "STEP_STARTED" and f["stepName"] == "ask")
    assert started["metadata"]["graph"] == {"graph": "review", "node": "ask", "kind": "function", "step": 1}
    delta = next(f for f in frames if f["type"] == "STATE_DELTA")
    assert delta["delta"] == [{"op": "add", "path": "/facts", "value": {"logs": 3, "cert": "expired"}}]


async def test_an_interrupt_is_a_message_a_custom_event_and_an_interrupt_outcome() -> None:
    _, frames, run_id = await run_and_translate()
    types = [f["type"] for f in frames]
    text = "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Ship it?"
    custom = next(f for f in frames if f["type"] == "CUSTOM")
    assert custom["name"] == GRAPH_INTERRUPT_EVENT
    value = custom["value"]
    assert value["runId"] == run_id and value["node"] == "ask" and value["graph"] == "review"
    assert value["payload"] == {"question": "Ship it?", "kind": "approval"}
    assert value["checkpointId"] and value["interruptId"]
    # The paused node's step is closed before the custom event; the run ends with RUN_FINISHED.
    assert types.index("CUSTOM") > max(i for i, f in enumerate(frames) if f["type"] == "STEP_FINISHED")
    paused = [f for f in frames if f["type"] == "STEP_FINISHED" and f["stepName"] == "ask"]
    assert len(paused) == 1 and paused[0]["metadata"]["graph"]["status"] == "paused"
    finished = frames[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["runId"] == run_id
    assert finished["outcome"]["type"] == "interrupt"
    [interrupt] = finished["outcome"]["interrupts"]
    assert interrupt["id"] == value["interruptId"] and interrupt["reason"] == "approval"
    assert interrupt["message"] == "Ship it?" and interrupt["metadata"]["node"] == "ask"


async def test_replaying_the_ledger_still_shows_the_pause() -> None:
    events, _, run_id = await run_and_translate()
    persisted = [e for e in events if not e.partial and (e.message is not None or e.is_runner_completion)]
    translator = AguiTranslator(thread_id="t")
    frames = wire([f for e in persisted for f in translator.translate(e, run_id=run_id)])
    assert [f["type"] for f in frames if f["type"] in ("CUSTOM", "RUN_FINISHED")] == ["CUSTOM", "RUN_FINISHED"]
    assert frames[-1]["outcome"]["type"] == "interrupt"


async def test_a_cancelled_graph_closes_its_open_node_steps_before_run_finished() -> None:
    translator = AguiTranslator(thread_id="t")
    start = Event(
        author="g",
        object="graph.node.start",
        extensions={"graph": {"graph": "g", "step": 0, "node": "slow", "kind": "function"}},
    )
    done = Event(author="g", object="runner.completion", done=True, extensions={"run_id": "r", "status": "cancelled"})
    frames = wire(translator.translate(start, run_id="r") + translator.translate(done, run_id="r"))
    assert [(f["type"], f.get("stepName")) for f in frames] == [
        ("RUN_STARTED", None),
        ("STEP_STARTED", "slow"),
        ("STEP_FINISHED", "slow"),
        ("RUN_FINISHED", None),
    ]
    assert frames[-1]["outcome"] == {"type": "cancelled"}
    assert frames[2]["metadata"]["graph"]["status"] == "stopped"
