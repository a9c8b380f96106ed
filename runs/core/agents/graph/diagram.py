"""A compiled graph's shape as plain JSON, for drawing it (issue 21: the graph in the run
trace). Nodes in declaration order between the `__start__` and `__end__` markers; edges
as declared: plain, join (one edge per source, sharing the join's key) and conditional
(labelled with the router's label). Also layers: each node's depth along the longest path
from the start, so a client can lay the graph out left to right without a layout library.
"""

from __future__ import annotations

from typing import Any

from runs.core.agents.graph.builder import END, START, CompiledGraph


def graph_shape(graph: CompiledGraph) -> dict[str, Any]:
    """`{"name", "nodes": [{"id", "kind", "description", "layer"}], "edges": [{"source",
    "target", "kind", "label"?, "join"?}]}`; `kind` of a node is its node kind, or "start" /
    "end" for the markers; of an edge "edge", "join" or "branch"."""
    edges: list[dict[str, Any]] = [{"source": START, "target": node, "kind": "edge"} for node in graph.entry]
    for source, targets in graph.edges.items():
        for target in targets:
            edges.append({"source": source, "target": target, "kind": "edge"})
    for join in graph.joins:
        for source in join.sources:
            edges.append({"source": source, "target": join.target, "kind": "join", "join": join.key})
    for source, branch in graph.branches.items():
        for label, target in branch.targets.items():
            edges.append({"source": source, "target": target, "kind": "branch", "label": label})
    declared = graph.sort(set(graph.nodes))
    # Compiling drops plain edges to END: a node with nowhere else to go ends the run there.
    leaving = {edge["source"] for edge in edges}
    edges += [{"source": node, "target": END, "kind": "edge"} for node in declared if node not in leaving]
    names = [START, *declared, END]
    layers = _layers(names, edges)
    nodes: list[dict[str, Any]] = [{"id": START, "kind": "start", "description": "", "layer": layers[START]}]
    for name in declared:
        spec = graph.nodes[name]
        nodes.append({"id": name, "kind": spec.kind, "description": spec.description, "layer": layers[name]})
    # END sits after every node, wherever its edges come from.
    nodes.append({"id": END, "kind": "end", "description": "", "layer": max(n["layer"] for n in nodes) + 1})
    return {"name": graph.name, "nodes": nodes, "edges": edges}


def _layers(names: list[str], edges: list[dict[str, Any]]) -> dict[str, int]:
    """Longest-path depth from START over the edges, ignoring edges that close a cycle (a
    graph may loop back; a back edge must not push its target past its source)."""
    successors: dict[str, list[str]] = {name: [] for name in names}
    for edge in edges:
        if edge["source"] in successors and edge["target"] in successors:
            successors[edge["source"]].append(edge["target"])
    # Depth-first from START: an edge to a node on the current path is a back edge.
    order: list[str] = []
    state: dict[str, int] = {}  # 1 on the path, 2 finished
    forward: dict[str, list[str]] = {name: [] for name in names}

    def visit(node: str) -> None:
        state[node] = 1
        for target in successors[node]:
            if state.get(target) == 1:
                continue  # a loop back: drawn, but no part of the layering
            forward[node].append(target)
            if target not in state:
                visit(target)
        state[node] = 2
        order.append(node)

    visit(START)
    for name in names:  # anything the start cannot reach still gets a layer
        if name not in state:
            visit(name)
    layer = dict.fromkeys(names, 0)
    for node in reversed(order):  # a topological order of the forward edges
        for target in forward[node]:
            layer[target] = max(layer[target], layer[node] + 1)
    return layer


def agent_graph_shape(agent: object) -> dict[str, Any] | None:
    """The shape of `agent`'s graph when it is a graph agent (its compiled `graph`), else None."""
    graph = getattr(agent, "graph", None)
    return graph_shape(graph) if isinstance(graph, CompiledGraph) else None
