"""A test double for the trace page's live graph (issue 21): a small graph agent, registered
by a live server's `AGENTSITE_AGENTS`, whose middle node waits until a gate file exists,
so a browser test can open the run's trace while the run is still going and then let it
finish. The gate's path comes from `AGENTSITE_TEST_GRAPH_GATE`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentsite.agents import AgentContext
from runs.core.agents.graph import END, GraphAgent, NodeContext, StateGraph, StateSchema

NAME = "gated-graph-double"
GATE_ENV = "AGENTSITE_TEST_GRAPH_GATE"
GATE_WAIT_S = 60.0


def prepare(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"note": "prepared"}


async def wait_for_gate(state: Mapping[str, Any]) -> dict[str, Any]:
    gate = Path(os.environ[GATE_ENV])
    for _ in range(int(GATE_WAIT_S / 0.05)):
        if await asyncio.to_thread(gate.exists):
            return {"note": "gate opened"}
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the gate {gate} was never opened")


async def finish(state: Mapping[str, Any], ctx: NodeContext) -> None:
    await ctx.say(f"Finished: {state.get('note')}.")


def gated_graph_double(context: AgentContext) -> GraphAgent:
    """prepare -> wait_for_gate -> finish; `skipped` is declared but never reached."""
    graph = StateGraph(NAME, StateSchema.of(messages="append", user_input="overwrite", note="overwrite"))
    graph.add_node("prepare", prepare, description="write a note")
    graph.add_node("wait_for_gate", wait_for_gate, description="wait until the test opens the gate")
    graph.add_node("finish", finish, description="say the note")
    graph.add_node("skipped", prepare, description="a branch this run never takes")
    graph.set_entry_point("prepare")
    graph.add_edge("prepare", "wait_for_gate")
    graph.add_conditional_edges("wait_for_gate", lambda s: "on", {"on": "finish", "off": "skipped"})
    graph.add_edge("finish", END).add_edge("skipped", END)
    return GraphAgent(
        name=NAME,
        graph=graph,
        description="a test double: a graph that waits for a gate file",
        checkpoints=context.checkpoints,
    )
