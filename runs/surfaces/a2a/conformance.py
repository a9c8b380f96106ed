"""The conformance test agent: live tasks for the A2A compatibility kit (a2aproject/a2a-tck).

Served at `/a2a/conformance` only while `AGENTSITE_A2A_CONFORMANCE_AGENT` is on (off by
default; never turn it on in production). It runs no model and writes no session: each
task stays live until it is cancelled or answered, so that CancelTask, SubscribeToTask,
a follow-up message and state transitions are exercised on a task that has not ended.

- `SendMessage` (blocking, the default): the task goes `working`, then `input-required`.
  A blocking send returns at a terminal or interrupted state (SPEC 3.1.1), so a task
  left `working` would hold the call until the caller gave up; `input-required` is the
  live state a blocking call can return. `returnImmediately` returns it `submitted`.
- `SendStreamingMessage`: `working`, an artifact echoing the text, `completed`. When the
  message id starts with `test-resubscribe-message-id` (the kit's SUT requirement), the
  task stays `working` for `AGENTSITE_A2A_CONFORMANCE_HOLD_S` seconds first (at least
  twice the kit's `TCK_STREAMING_TIMEOUT`), unless it is cancelled.
- A message naming a live task (`taskId`) answers it: an artifact, then `completed`.
- `CancelTask`: `canceled`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Part, TaskState
from a2a.utils.errors import InvalidRequestError
from django.conf import settings

CONFORMANCE_AGENT = "conformance"
RESUBSCRIBE_PREFIX = "test-resubscribe-message-id"
_LIVE = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_INPUT_REQUIRED)


@dataclass(frozen=True, kw_only=True)
class ConformanceAgent:
    """What the agent card is built from (no tools, no model)."""

    name: str = CONFORMANCE_AGENT
    description: str = (
        "A2A conformance test agent: its tasks stay live until cancelled or answered. "
        "For the A2A compatibility kit only."
    )
    tools: tuple[()] = ()


class ConformanceExecutor(AgentExecutor):
    """The conformance agent's tasks (see the module docstring)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message, task = context.message, context.current_task
        if message is None or not context.task_id or not context.context_id:
            raise InvalidRequestError(message="a message is required")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = "".join(part.text for part in message.parts if part.HasField("text"))
        if task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        elif task.status.state in _LIVE and task.status.state != TaskState.TASK_STATE_SUBMITTED:
            await self._answer(updater, f"You answered: {text}")
            return
        await updater.start_work(message=updater.new_agent_message([Part(text="Working on it.")]))
        if context.call_context.state.get("method") in ("SendStreamingMessage", "message/stream"):
            if message.message_id.startswith(RESUBSCRIBE_PREFIX):
                # Cancelling the task cancels this sleep (the SDK cancels execute()).
                await asyncio.sleep(settings.AGENTSITE_A2A_CONFORMANCE_HOLD_S)
            await self._answer(updater, f"You said: {text}")
            return
        await updater.requires_input(
            message=updater.new_agent_message(
                [Part(text="Waiting for your answer: send a message with this taskId, or cancel the task.")]
            )
        )

    @staticmethod
    async def _answer(updater: TaskUpdater, text: str) -> None:
        await updater.add_artifact([Part(text=text)], name="response", last_chunk=True)
        await updater.complete(message=updater.new_agent_message([Part(text=text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(message=updater.new_agent_message([Part(text="Cancelled at the caller's request.")]))
