"""StateGraph: declare nodes and edges, then `compile()` (SPEC 10.1).

    graph = StateGraph("triage", StateSchema.of(messages="append", logs="overwrite"))
    graph.add_node("collect", collect)
    graph.add_tool_node("certificate", inspect_certificate, args=..., output_key="certificate")
    graph.set_entry_point("plan")
    graph.add_edge("plan", "collect")            # plan fans out to collect ...
    graph.add_edge("plan", "certificate")        # ... and certificate, in one superstep
    graph.add_edge(["collect", "certificate"], "decide")   # join: waits for both
    graph.add_conditional_edges("decide", route, {"fix": "report", "fine": END})
    compiled = graph.compile()

Edges: a plain edge triggers its target when its source finishes; a join (a list of
sources) triggers its target once *every* source has finished, however many supersteps
apart; a conditional edge calls its router on the state after the superstep and goes to
the targets it names (a label, or a list of labels to fan out), which must be among the
declared ones. `START` and `END` are the special ends.

`compile()` refuses a graph that cannot work and names the node in each problem: no entry
point, an edge from or to an unknown node, a conditional target that is not a node,
a node the entry cannot reach, a node with no path to `END`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runs.core.agents.graph.errors import GraphCompileError, GraphRunError
from runs.core.agents.graph.events import NodeKind
from runs.core.agents.graph.nodes import NodeFn, NodeRun, NodeSpec, agent_node, as_node_run, model_node, tool_node
from runs.core.agents.graph.state import StateSchema
from runs.core.llm.base import Model
from runs.core.tools.base import Tool

if TYPE_CHECKING:
    from runs.core.agents.base import Agent

START = "__start__"
END = "__end__"
DEFAULT_MAX_STEPS = 100

Router = Callable[[Mapping[str, Any]], str | Sequence[str] | Awaitable[str | Sequence[str]]]


@dataclass(frozen=True, kw_only=True)
class Join:
    """`target` runs once every one of `sources` has finished."""

    sources: tuple[str, ...]
    target: str

    @property
    def key(self) -> str:
        return f"{'+'.join(self.sources)}->{self.target}"


@dataclass(frozen=True, kw_only=True)
class Branch:
    """A conditional edge: `router(state)` names labels; `targets` maps labels to nodes."""

    source: str
    router: Router
    targets: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class CompiledGraph:
    """A graph that passed validation; run it with `GraphAgent` (or `Executor`)."""

    name: str
    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    entry: tuple[str, ...]
    edges: Mapping[str, tuple[str, ...]]
    joins: tuple[Join, ...]
    branches: Mapping[str, Branch]
    max_steps: int = DEFAULT_MAX_STEPS
    order: Mapping[str, int] = field(default_factory=dict)

    def sort(self, nodes: set[str] | Sequence[str]) -> tuple[str, ...]:
        """Nodes in declaration order: the order tasks are listed and their writes applied."""
        return tuple(sorted(set(nodes), key=lambda n: self.order.get(n, len(self.order))))

    async def route(self, node: str, state: Mapping[str, Any]) -> list[str]:
        """The nodes `node`'s conditional edge sends the run to (END left out)."""
        branch = self.branches.get(node)
        if branch is None:
            return []
        chosen = branch.router(state)
        if inspect.isawaitable(chosen):
            chosen = await chosen
        labels = [chosen] if isinstance(chosen, str) else list(chosen)
        targets: list[str] = []
        for label in labels:
            if label not in branch.targets:
                raise GraphRunError(
                    f"node {node!r} routed to {label!r}, which is not among its declared targets {sorted(branch.targets)!r}",
                    code="graph_undeclared_target",
                    node=node,
                )
            target = branch.targets[label]
            if target != END:
                targets.append(target)
        return targets


class StateGraph:
    """A graph under construction."""

    def __init__(self, name: str, schema: StateSchema, *, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps!r}")
        self.name = name
        self.schema = schema
        self.max_steps = max_steps
        self._nodes: dict[str, NodeSpec] = {}
        self._edges: list[tuple[str, str]] = []
        self._joins: list[Join] = []
        self._branches: dict[str, Branch] = {}
        self._problems: list[str] = []

    # -- nodes ----------------------------------------------------------------------------

    def _add(self, name: str, kind: NodeKind, run: NodeRun, description: str) -> StateGraph:
        if not name or not isinstance(name, str):
            self._problems.append(f"a node needs a non-empty name, got {name!r}")
        elif name in (START, END):
            self._problems.append(f"node {name!r}: the name is reserved")
        elif name in self._nodes:
            self._problems.append(f"node {name!r} is declared twice")
        else:
            self._nodes[name] = NodeSpec(name=name, kind=kind, run=run, description=description)
        return self

    def add_node(self, name: str, fn: NodeFn, *, description: str = "") -> StateGraph:
        """A function node: `fn(state)` or `fn(state, ctx)`, sync or async, returning an update."""
        return self._add(name, "function", as_node_run(fn), description)

    def add_model_node(
        self,
        name: str,
        model: Model,
        *,
        instruction: str = "",
        messages_key: str = "messages",
        output_key: str | None = "last_response",
        description: str = "",
    ) -> StateGraph:
        """A model call on the state's messages (see `nodes.model_node`)."""
        run = model_node(model, instruction=instruction, messages_key=messages_key, output_key=output_key)
        return self._add(name, "model", run, description)

    def add_tool_node(
        self,
        name: str,
        tool: Tool,
        *,
        output_key: str,
        args: Callable[[Mapping[str, Any]], Mapping[str, Any]] | Mapping[str, Any] | None = None,
        description: str = "",
    ) -> StateGraph:
        """A tool call with arguments from the state (see `nodes.tool_node`)."""
        return self._add(name, "tool", tool_node(tool, args=args, output_key=output_key), description)

    def add_agent_node(
        self,
        name: str,
        agent: Agent,
        *,
        output_key: str | None = None,
        messages_key: str | None = None,
        description: str = "",
    ) -> StateGraph:
        """A sub-agent (an LLMAgent, a composite, another graph) run as one node."""
        run = agent_node(agent, output_key=output_key, messages_key=messages_key)
        return self._add(name, "agent", run, description or agent.description)

    # -- edges ----------------------------------------------------------------------------

    def add_edge(self, source: str | Sequence[str], target: str) -> StateGraph:
        """`source` -> `target`; with a list of sources, a join that waits for all of them."""
        if isinstance(source, str):
            self._edges.append((source, target))
            return self
        sources = tuple(sorted(set(source) - {START}))
        if not sources:
            self._problems.append(f"join into {target!r} has no sources")
            return self
        if len(sources) == 1:
            self._edges.append((sources[0], target))
        else:
            self._joins.append(Join(sources=sources, target=target))
        return self

    def add_conditional_edges(
        self,
        source: str,
        router: Router,
        targets: Mapping[str, str] | Sequence[str],
    ) -> StateGraph:
        """After `source`, go where `router(state)` says: a label or a list of labels (fan
        out), each a key of `targets` (or, given a list, a node name among them)."""
        if source in self._branches:
            self._problems.append(f"node {source!r} has two conditional edges; give it one router")
            return self
        mapping = dict(targets) if isinstance(targets, Mapping) else {t: t for t in targets}
        if not mapping:
            self._problems.append(f"conditional edge from {source!r} declares no targets")
        self._branches[source] = Branch(source=source, router=router, targets=mapping)
        return self

    def set_entry_point(self, node: str) -> StateGraph:
        return self.add_edge(START, node)

    def set_finish_point(self, node: str) -> StateGraph:
        return self.add_edge(node, END)

    # -- compile --------------------------------------------------------------------------

    def compile(self) -> CompiledGraph:
        """Validate and freeze the graph; raises `GraphCompileError` listing every problem."""
        problems = list(self._problems)
        nodes = self._nodes
        known = set(nodes)

        def check_endpoint(node: str, what: str, *, allow_start: bool, allow_end: bool) -> bool:
            if node in known or (allow_start and node == START) or (allow_end and node == END):
                return True
            problems.append(f"{what}: unknown node {node!r}")
            return False

        successors: dict[str, set[str]] = {name: set() for name in (*known, START)}
        edges: dict[str, list[str]] = {}
        for source, target in self._edges:
            what = f"edge {source!r} -> {target!r}"
            ok = check_endpoint(source, what, allow_start=True, allow_end=False)
            ok = check_endpoint(target, what, allow_start=False, allow_end=True) and ok
            if ok:
                successors[source].add(target)
                if target not in edges.setdefault(source, []):
                    edges[source].append(target)
        joins: list[Join] = []
        for join in self._joins:
            what = f"join {list(join.sources)!r} -> {join.target!r}"
            ok = all([check_endpoint(s, what, allow_start=False, allow_end=False) for s in join.sources])
            ok = check_endpoint(join.target, what, allow_start=False, allow_end=True) and ok
            if ok:
                joins.append(join)
        branches: dict[str, Branch] = {}
        for source, branch in self._branches.items():
            ok = check_endpoint(source, f"conditional edge from {source!r}", allow_start=False, allow_end=False)
            for label, target in branch.targets.items():
                if target not in known and target != END:
                    problems.append(
                        f"conditional edge from {source!r} declares target {label!r} -> {target!r}, which is not a node"
                    )
                    ok = False
                elif source in successors:
                    # Valid targets count for reachability even when a sibling target is
                    # bad, so one mistake is reported once.
                    successors[source].add(target)
            if ok:
                branches[source] = branch

        entry = [t for s, t in self._edges if s == START and (t in known)]
        if not any(s == START for s, _ in self._edges):
            problems.append("the graph has no entry point: call set_entry_point(<node>)")

        # Reachability from the entry: a join's target is reached once all its sources are.
        reached: set[str] = set()
        frontier = [START]
        while frontier:
            current = frontier.pop()
            for nxt in successors.get(current, ()):
                if nxt not in reached:
                    reached.add(nxt)
                    frontier.append(nxt)
            for join in joins:
                if join.target not in reached and all(s in reached for s in join.sources):
                    reached.add(join.target)
                    frontier.append(join.target)
        if entry:
            for name in nodes:
                if name not in reached:
                    problems.append(f"node {name!r} is unreachable from the entry point")

        # A path to END from every node: walk the edges backwards from END.
        predecessors: dict[str, set[str]] = {}
        for source, targets in successors.items():
            for target in targets:
                predecessors.setdefault(target, set()).add(source)
        for join in joins:
            for source in join.sources:
                predecessors.setdefault(join.target, set()).add(source)
        ends: set[str] = set()
        frontier = [END]
        while frontier:
            current = frontier.pop()
            for prev in predecessors.get(current, ()):
                if prev not in ends:
                    ends.add(prev)
                    frontier.append(prev)
        for name in nodes:
            if name not in ends:
                problems.append(f"node {name!r} has no path to the end ({END!r})")

        if problems:
            raise GraphCompileError(self.name, problems)
        order = {name: index for index, name in enumerate(nodes)}
        return CompiledGraph(
            name=self.name,
            schema=self.schema,
            nodes=dict(nodes),
            entry=tuple(sorted(set(entry), key=order.__getitem__)),
            edges={k: tuple(t for t in v if t != END) for k, v in edges.items() if k != START},
            joins=tuple(joins),
            branches=branches,
            max_steps=self.max_steps,
            order=order,
        )
