"""Nodes: what a graph step runs. Functions, model calls, tool calls and sub-agents.

Every node is an async callable `(state, ctx) -> update | None` (a plain function of the
state alone works too). `state` is the node's own copy of the state at the start of the
superstep; the update is a mapping of field names to values that the executor folds in
with the schema's reducers. Through `ctx` a node emits events and asks a human
(`ctx.interrupt(payload)`).

A node that was interrupted runs again from its start when the run is resumed, and its
`interrupt` call then returns the human's answer: whatever the node did before asking
happens twice, so ask first, or keep that part idempotent.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runs.core.agents.composite import child_invocation
from runs.core.agents.graph.errors import GraphInterrupt, GraphRunError
from runs.core.agents.graph.events import NODE_EXTENSION, NodeKind
from runs.core.context.request import sanitize
from runs.core.errors import ModelError
from runs.core.flow.tools import execute_tool_calls
from runs.core.invocation import Invocation
from runs.core.llm.base import Model, ModelRequest, ModelResponse
from runs.core.tools.base import Tool
from sessions_app.core.events import NO_MODEL_CALL, OBJECT_CHUNK, OBJECT_COMPLETION, Event, Message, ToolCall, new_id

if TYPE_CHECKING:
    from runs.core.agents.base import Agent

Update = Mapping[str, Any] | None
NodeFn = Callable[..., Awaitable[Update] | Update]
Emit = Callable[[Event], Awaitable[None]]


@dataclass(kw_only=True)
class NodeContext:
    """What a running node may see and do besides reading its state."""

    node: str
    step: int
    invocation: Invocation
    emit_event: Emit
    resume_values: Sequence[Any] = ()
    _asked: int = field(default=0, repr=False)

    @property
    def cancelled(self) -> bool:
        return self.invocation.cancel_event.is_set()

    async def emit(self, event: Event) -> None:
        """Hand an event to the run (stamped with the invocation and this node's name)."""
        extensions = (
            event.extensions if NODE_EXTENSION in event.extensions else {**event.extensions, NODE_EXTENSION: self.node}
        )
        await self.emit_event(self.invocation.stamp(event.replace(extensions=extensions)))

    async def say(self, text: str) -> Event:
        """Emit a complete assistant message authored by the graph (shown and persisted)."""
        message_id = new_id()
        event = Event(
            id=message_id,
            author=self.invocation.agent_name,
            object=OBJECT_COMPLETION,
            message=Message(role="assistant", content=text),
            done=True,
            finish_reason="stop",
            extensions={"message_id": message_id, NO_MODEL_CALL: True},
        )
        await self.emit(event)
        return event

    def interrupt(self, payload: Any) -> Any:
        """Pause the graph until a human answers `payload` (JSON); returns the answer.

        The first time, this raises `GraphInterrupt` (do not catch it): the run ends
        waiting. When the run is resumed, the node runs again and this call returns the
        resume value. The n-th call in a node gets the n-th answer.
        """
        index = self._asked
        self._asked += 1
        if index < len(self.resume_values):
            return self.resume_values[index]
        raise GraphInterrupt(payload, node=self.node, index=index)


NodeRun = Callable[[Mapping[str, Any], NodeContext], Awaitable[Update]]


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    name: str
    kind: NodeKind
    run: NodeRun
    description: str = ""


def as_node_run(fn: NodeFn) -> NodeRun:
    """Wrap a sync or async function of `(state)` or `(state, ctx)` as a node."""
    if not callable(fn):
        raise TypeError(f"a node must be callable, got {fn!r}")
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        takes_ctx = len(params) >= 2 or any(
            p.kind is p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values()
        )
    except (TypeError, ValueError):  # builtins without a signature
        takes_ctx = False

    async def run(state: Mapping[str, Any], ctx: NodeContext) -> Update:
        result = fn(state, ctx) if takes_ctx else fn(state)
        if inspect.isawaitable(result):
            result = await result
        return result

    return run


# -- model calls ----------------------------------------------------------------------------


def model_node(
    model: Model,
    *,
    instruction: str = "",
    messages_key: str = "messages",
    output_key: str | None = "last_response",
) -> NodeRun:
    """Call `model` on the messages in `state[messages_key]` (dicts, as `Message.to_dict`).

    Streams the text as partial events, emits the complete assistant message, and writes
    it to `messages_key` (append it: declare that field with the `append` reducer) and
    its text to `output_key`.
    """

    async def run(state: Mapping[str, Any], ctx: NodeContext) -> Update:
        history = [Message.from_dict(m) for m in state.get(messages_key) or ()]
        system = [m for m in history if m.role == "system"]
        prefix = [Message(role="system", content=instruction)] if instruction else []
        request = ModelRequest(messages=(*prefix, *system, *sanitize([m for m in history if m.role != "system"])))
        message_id = new_id()
        final: ModelResponse | None = None
        author = ctx.invocation.agent_name
        try:
            async for response in model.generate(request):
                if response.partial:
                    if response.delta:
                        await ctx.emit(
                            Event(
                                author=author,
                                object=OBJECT_CHUNK,
                                partial=True,
                                message=Message(role="assistant", content=response.delta),
                                extensions={"message_id": message_id},
                            )
                        )
                else:
                    final = response
        except ModelError as exc:
            raise GraphRunError(
                f"node {ctx.node!r}: the model failed: {exc}", code="model_error", node=ctx.node
            ) from exc
        if final is None or final.message is None:
            raise GraphRunError(
                f"node {ctx.node!r}: the model ended its stream without a final response", node=ctx.node
            )
        message = Message(role="assistant", content=final.message.content)
        await ctx.emit(
            Event(
                id=message_id,
                author=author,
                object=OBJECT_COMPLETION,
                message=message,
                done=True,
                finish_reason=final.finish_reason or "stop",
                usage=final.usage,
                model=final.model,
                extensions={"message_id": message_id},
            )
        )
        update: dict[str, Any] = {messages_key: [message.to_dict()]}
        if output_key:
            update[output_key] = message.content
        return update

    return run


# -- tool calls -----------------------------------------------------------------------------


def tool_node(
    tool: Tool,
    *,
    args: Callable[[Mapping[str, Any]], Mapping[str, Any]] | Mapping[str, Any] | None = None,
    output_key: str,
) -> NodeRun:
    """Call `tool` with `args` (a mapping, or a function of the state) and write its
    result (parsed JSON when it is JSON) to `output_key`.

    The call and its result are emitted as a tool-call message and a tool result, as an
    LLM agent's would be, so the ledger and the UI show the evidence. A failing tool
    writes `{"error": ...}`: the graph decides what that means.
    """

    async def run(state: Mapping[str, Any], ctx: NodeContext) -> Update:
        arguments = dict(args(state) if callable(args) else (args or {}))
        call = ToolCall(id=f"call_{new_id()[:12]}", name=tool.name, arguments=json.dumps(arguments, ensure_ascii=False))
        message_id = new_id()
        await ctx.emit(
            Event(
                id=message_id,
                author=ctx.invocation.agent_name,
                object=OBJECT_COMPLETION,
                message=Message(role="assistant", tool_calls=(call,)),
                finish_reason="tool_calls",
                extensions={"message_id": message_id, NO_MODEL_CALL: True},
            )
        )
        results, _ = await execute_tool_calls(ctx.invocation, [call], {tool.name: tool}, parallel=False)
        result = results[0]
        await ctx.emit(result)
        try:
            value: Any = json.loads(result.text)
        except json.JSONDecodeError:
            value = result.text
        return {output_key: value}

    return run


# -- sub-agents -----------------------------------------------------------------------------


def agent_node(agent: Agent, *, output_key: str | None = None, messages_key: str | None = None) -> NodeRun:
    """Run `agent` as a child of the graph's invocation (branch `<graph branch>/<agent>`);
    its events go out as they come and its final answer is written to `output_key` (and
    appended to `messages_key` as an assistant message). An error of the sub-agent fails
    the node."""

    async def run(state: Mapping[str, Any], ctx: NodeContext) -> Update:
        child = child_invocation(ctx.invocation, agent)
        answer = ""
        async with contextlib.aclosing(agent.run(child)) as events:
            async for event in events:
                if event.is_error:
                    # Reported once, by the graph, as the node's failure.
                    error = event.error
                    raise GraphRunError(
                        f"node {ctx.node!r}: agent {agent.name!r} failed: {error.message if error else event.text}",
                        code=error.type if error else "graph_node_error",
                        node=ctx.node,
                    )
                await ctx.emit(event)
                if event.is_final_response and event.text:
                    answer = event.text
        update: dict[str, Any] = {}
        if output_key:
            update[output_key] = answer
        if messages_key and answer:
            update[messages_key] = [Message(role="assistant", content=answer).to_dict()]
        return update

    return run
