"""Tool execution phase: run the model's tool calls and turn results into events."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from runs.core.callbacks import NO_CALLBACKS, Callbacks, ToolCallContext, run_after_tool, run_before_tool, with_changes
from runs.core.errors import StopAgent
from runs.core.invocation import Invocation
from runs.core.tools.base import Tool, ToolArgumentError, ToolContext
from sessions_app.core.events import OBJECT_TOOL_RESPONSE, Event, Message, ToolCall

logger = logging.getLogger(__name__)


def serialize_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def _error_payload(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


async def _call_one(
    invocation: Invocation,
    call: ToolCall,
    tools: Mapping[str, Tool],
    callbacks: Callbacks = NO_CALLBACKS,
) -> tuple[Event, StopAgent | None]:
    context = ToolContext(
        session=invocation.session,
        invocation_id=invocation.invocation_id,
        tool_call_id=call.id,
        agent_name=invocation.agent_name,
        cancel_event=invocation.cancel_event,
        services=invocation.services,
        tool_name=call.name,
    )
    failed = True
    stop: StopAgent | None = None
    tool = tools.get(call.name)
    # Issue 20, item 4: before_tool may change the call, veto it or answer it itself.
    hook = ToolCallContext(invocation=invocation, tool=tool)
    gate = await run_before_tool(callbacks, hook, call) if callbacks.before_tool else None
    if gate is not None:
        # The result answers the model's call: a replaced call keeps its id.
        call = dataclasses.replace(gate.call, id=call.id)
        tool = tools.get(call.name)
    if gate is not None and gate.veto is not None:
        content = _error_payload(f"vetoed: {gate.veto.reason}")
    elif gate is not None and gate.answer is not None:
        content = gate.answer.content
        failed = False
    elif tool is None:
        content = _error_payload(f"unknown tool {call.name!r}; available tools: {sorted(tools)!r}")
    else:
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ToolArgumentError(f"arguments must be a JSON object, got {type(args).__name__}")
            content = serialize_result(await tool.call(context, args))
            failed = False
        except json.JSONDecodeError as exc:
            content = _error_payload(f"arguments are not valid JSON: {exc}")
        except ToolArgumentError as exc:
            content = _error_payload(f"invalid arguments for {call.name!r}: {exc}")
        except StopAgent as exc:
            stop = exc
            content = _error_payload(f"stopped: {exc}")
        except Exception as exc:  # a tool's failure is information for the model, not a crash
            logger.info("tool %s failed: %r", call.name, exc)
            content = _error_payload(f"{type(exc).__name__}: {exc}")
    changes = gate.changes if gate is not None else []
    if callbacks.after_tool:
        content, after = await run_after_tool(callbacks, hook, call, content)
        changes = [*changes, *after]
    event = Event(
        author=invocation.agent_name,
        object=OBJECT_TOOL_RESPONSE,
        message=Message(role="tool", content=content, tool_call_id=call.id, tool_name=call.name),
        state_delta=dict(context.state_delta),
        extensions={**context.extensions, **({"tool_error": True} if failed else {})},
    )
    return invocation.stamp(with_changes(event, changes)), stop


async def execute_tool_calls(
    invocation: Invocation,
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    *,
    parallel: bool,
    callbacks: Callbacks = NO_CALLBACKS,
) -> tuple[list[Event], StopAgent | None]:
    """Run the calls (concurrently when `parallel`) and return their results in call order,
    plus the first `StopAgent` a tool raised, if any. `callbacks`' before_tool and
    after_tool run around each call (runs.core.callbacks)."""
    if parallel and len(calls) > 1:
        outcomes = await asyncio.gather(*(_call_one(invocation, c, tools, callbacks) for c in calls))
    else:
        outcomes = [await _call_one(invocation, c, tools, callbacks) for c in calls]
    stop = next((s for _, s in outcomes if s is not None), None)
    return [event for event, _ in outcomes], stop
