"""A2AAgent: a remote A2A agent run as one of ours; A2ATool: the same, offered to a model.

`A2AAgent` implements the Agent protocol on the `a2a-sdk` client. Each run sends the
current user message to the remote agent (streaming when its card allows) and turns what
comes back into our events:

- artifact text, and an Agentsite server's text deltas (`agentsite_progress` status
  metadata) -> `chat.completion.chunk` partial events (one message id per run), so the
  answer streams to every consumer like a model's;
- `working` status messages, and an Agentsite server's tool progress -> partial
  `a2a.status` events (progress, never persisted);
- the end -> one complete assistant event with the answer (the final status message, else
  the last artifact's text); `failed`, `canceled` or `rejected` -> an error event instead.

The remote conversation continues across turns: its context id (and, while the remote
asks for input, its task id) is kept in session state under `a2a:<name>:*`, recorded by
the state delta of the final event. Cancelling our run cancels the remote task.

`A2ATool` wraps an `A2AAgent` as `ask_<name>(question)`, for an LLM agent that delegates.
No Django here: the client side works anywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from runs.core.invocation import Invocation
from runs.core.llm.base import ToolSpec
from runs.core.tools.base import ToolArgumentError, ToolContext
from sessions_app.core.events import (
    OBJECT_CHUNK,
    OBJECT_COMPLETION,
    OBJECT_ERROR,
    Event,
    EventError,
    new_id,
)
from sessions_app.core.events import Message as ChatMessage

logger = logging.getLogger(__name__)

OBJECT_A2A_STATUS = "a2a.status"
DEFAULT_TIMEOUT_S = 300.0
_CANCEL_TIMEOUT_S = 5.0

_TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
_INTERRUPTED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
_FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}


class A2ARemoteError(RuntimeError):
    """The remote agent failed, refused, or could not be reached."""


def _text(parts: Any) -> str:
    return "".join(part.text for part in parts if part.HasField("text"))


def _answer_text(parts: Any) -> str:
    """An artifact's text: its text parts, and its data parts (a structured answer) as JSON."""
    texts = [
        part.text if part.HasField("text") else json.dumps(MessageToDict(part)["data"], ensure_ascii=False)
        for part in parts
        if part.HasField("text") or part.HasField("data")
    ]
    return "".join(texts)


PROGRESS_KEY = "agentsite_progress"
"""Status-update metadata key under which an Agentsite server reports a task's progress."""


def _progress(metadata: Any) -> Mapping[str, Any] | None:
    if PROGRESS_KEY not in metadata.fields:
        return None
    value = MessageToDict(metadata).get(PROGRESS_KEY)
    return value if isinstance(value, Mapping) else None


@dataclass(frozen=True, kw_only=True)
class RemoteUpdate:
    """One step of a remote exchange, in our terms."""

    kind: Literal["delta", "status", "final"]
    text: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    task_id: str = ""
    context_id: str = ""

    @property
    def failed(self) -> bool:
        return self.kind == "final" and self.state in _FAILED

    @property
    def needs_input(self) -> bool:
        return self.kind == "final" and self.state in _INTERRUPTED


@dataclass(kw_only=True)
class _Exchange:
    """What one exchange has learnt so far: ids, artifact texts, the final status text."""

    task_id: str = ""
    context_id: str = ""
    artifacts: dict[str, str] = field(default_factory=dict)
    streamed: set[str] = field(default_factory=set)  # message ids whose text came as progress deltas
    done: bool = False

    def answer(self, status_text: str) -> str:
        if status_text:
            return status_text
        texts = [text for text in self.artifacts.values() if text]
        return texts[-1] if texts else ""


class A2AAgent:
    """A remote A2A agent (e.g. another Agentsite at `https://host/a2a/support`) as an Agent.

    `url` is the agent's base URL: its card is read from `<url>/.well-known/agent-card.json`
    unless `card` is given. `token` is sent as `Authorization: Bearer <token>`; `headers`
    adds any other header. `http_client` lends a client of your own (tests, proxies); the
    agent then never closes it.
    """

    kind = "a2a"

    def __init__(
        self,
        *,
        name: str,
        url: str,
        description: str = "",
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        card: AgentCard | None = None,
        streaming: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"an A2AAgent name must be 1-64 letters, digits, '_' or '-', got {name!r}")
        self.name = name
        self.url = url.rstrip("/")
        self.description = description
        self.streaming = streaming
        self.timeout_s = timeout_s
        self._headers = dict(headers or {})
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._card = card
        self._http_client = http_client
        self._background: set[asyncio.Task[None]] = set()

    @property
    def model_name(self) -> str | None:
        return None

    @property
    def context_key(self) -> str:
        """The session-state key of the remote context id."""
        return f"a2a:{self.name}:context_id"

    @property
    def task_key(self) -> str:
        """The session-state key of a remote task waiting for input."""
        return f"a2a:{self.name}:task_id"

    # -- the client -----------------------------------------------------------------------

    def _http(self) -> tuple[httpx.AsyncClient, bool]:
        if self._http_client is not None:
            return self._http_client, False
        timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
        return httpx.AsyncClient(headers=self._headers, timeout=timeout), True

    async def card(self) -> AgentCard:
        """The remote agent's card (read once)."""
        if self._card is None:
            http, owned = self._http()
            try:
                self._card = await A2ACardResolver(http, self.url).get_agent_card()
            finally:
                if owned:
                    await http.aclose()
        return self._card

    async def _client(self) -> tuple[Client, httpx.AsyncClient, bool]:
        card = await self.card()
        http, owned = self._http()
        if not owned:
            for header, value in self._headers.items():
                http.headers.setdefault(header, value)
        return ClientFactory(ClientConfig(httpx_client=http, streaming=self.streaming)).create(card), http, owned

    # -- one exchange ---------------------------------------------------------------------

    async def exchange(
        self,
        text: str,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[RemoteUpdate]:
        """Send `text` and yield what comes back, ending with one `final` update.

        Raises `A2ARemoteError` when the remote cannot be reached or answers with an error.
        Closing the iterator early (our run was cancelled) cancels the remote task."""
        message = Message(
            role=Role.ROLE_USER,
            message_id=new_id(),
            parts=[Part(text=text)],
            context_id=context_id or "",
            task_id=task_id or "",
        )
        if metadata:
            message.metadata.update(dict(metadata))
        seen = _Exchange(task_id=task_id or "", context_id=context_id or "")
        try:
            client, http, owned = await self._client()
        except (A2AError, httpx.HTTPError) as exc:
            raise A2ARemoteError(f"A2A agent {self.url!r} is not reachable: {exc}") from exc
        try:
            async for response in client.send_message(SendMessageRequest(message=message)):
                for update in self._updates(response, seen):
                    yield update
                if seen.done:
                    return
            if not seen.done:
                raise A2ARemoteError(f"A2A agent {self.url!r} ended its stream before the task ended")
        except (A2AError, httpx.HTTPError) as exc:
            raise A2ARemoteError(f"A2A agent {self.url!r} failed: {exc}") from exc
        finally:
            if seen.task_id and not seen.done:
                # Our side stopped first (cancel, error): the remote task must not run on.
                self._spawn_cancel(client, http if owned else None, seen.task_id)
            elif owned:
                await http.aclose()

    def _updates(self, response: StreamResponse, seen: _Exchange) -> list[RemoteUpdate]:
        ids = {"task_id": seen.task_id, "context_id": seen.context_id}
        if response.HasField("message"):
            seen.context_id = response.message.context_id or seen.context_id
            seen.done = True
            return [
                RemoteUpdate(
                    kind="final",
                    text=_text(response.message.parts),
                    state=TaskState.TASK_STATE_COMPLETED,
                    task_id=seen.task_id,
                    context_id=seen.context_id,
                )
            ]
        if response.HasField("task"):
            task = response.task
            seen.task_id, seen.context_id = task.id, task.context_id
            for artifact in task.artifacts:
                seen.artifacts[artifact.artifact_id] = _answer_text(artifact.parts)
            return self._status(task.status, seen)
        if response.HasField("artifact_update"):
            update = response.artifact_update
            seen.task_id = update.task_id or seen.task_id
            seen.context_id = update.context_id or seen.context_id
            artifact, text = update.artifact, _answer_text(update.artifact.parts)
            before = seen.artifacts.get(artifact.artifact_id, "") if update.append else ""
            seen.artifacts[artifact.artifact_id] = before + text
            if artifact.artifact_id in seen.streamed:
                return []  # an Agentsite answer whose text already streamed as progress
            return [RemoteUpdate(kind="delta", text=text, **ids)] if text else []
        if response.HasField("status_update"):
            update = response.status_update
            seen.task_id = update.task_id or seen.task_id
            seen.context_id = update.context_id or seen.context_id
            progress = _progress(update.metadata) if update.status.state == TaskState.TASK_STATE_WORKING else None
            if progress is not None:
                return self._progress_updates(progress, seen)
            return self._status(update.status, seen)
        return []

    @staticmethod
    def _progress_updates(progress: Mapping[str, Any], seen: _Exchange) -> list[RemoteUpdate]:
        """An Agentsite server's progress (status metadata, never a message): text deltas
        stream like artifact chunks; tool calls and results become status lines."""
        ids = {"task_id": seen.task_id, "context_id": seen.context_id}
        text = progress.get("text")
        if progress.get("kind") == "text_delta" and isinstance(text, str) and text:
            seen.streamed.add(str(progress.get("messageId") or ""))
            return [RemoteUpdate(kind="delta", text=text, **ids)]
        summary = progress.get("summary")
        if isinstance(summary, str) and summary:
            return [RemoteUpdate(kind="status", text=summary, state=TaskState.TASK_STATE_WORKING, **ids)]
        return []

    @staticmethod
    def _status(status: Any, seen: _Exchange) -> list[RemoteUpdate]:
        text = _text(status.message.parts) if status.HasField("message") else ""
        ids = {"task_id": seen.task_id, "context_id": seen.context_id}
        if status.state in _TERMINAL or status.state in _INTERRUPTED:
            seen.done = True
            answer = text if status.state in _FAILED | _INTERRUPTED else seen.answer(text)
            return [RemoteUpdate(kind="final", text=answer, state=status.state, **ids)]
        return [RemoteUpdate(kind="status", text=text, state=status.state, **ids)] if text else []

    def _spawn_cancel(self, client: Client, http: httpx.AsyncClient | None, task_id: str) -> None:
        async def cancel() -> None:
            try:
                await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), _CANCEL_TIMEOUT_S)
            except Exception as exc:  # the task may have ended meanwhile; nothing more to do
                logger.info("A2A agent %s: could not cancel remote task %s: %s", self.name, task_id, exc)
            finally:
                if http is not None:
                    await http.aclose()

        task = asyncio.get_running_loop().create_task(cancel(), name=f"a2a-cancel-{task_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def ask(self, question: str, *, context_id: str | None = None, task_id: str | None = None) -> RemoteUpdate:
        """One whole exchange: the final update (raises `A2ARemoteError` when it failed)."""
        updates = self.exchange(question, context_id=context_id, task_id=task_id)
        async with aclosing(updates):
            async for update in updates:
                if update.kind != "final":
                    continue
                if update.failed:
                    raise A2ARemoteError(
                        f"A2A agent {self.name!r} ended {TaskState.Name(update.state)}: {update.text or 'no reason given'}"
                    )
                return update
        raise A2ARemoteError(f"A2A agent {self.name!r} sent no answer")

    # -- the Agent protocol ---------------------------------------------------------------

    async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
        state = invocation.session.state
        message_id = new_id()
        pending_task = str(state.get(self.task_key) or "") or None
        final: RemoteUpdate | None = None
        updates = self.exchange(
            invocation.message.content,
            context_id=str(state.get(self.context_key) or "") or None,
            task_id=pending_task,
        )
        try:
            async with aclosing(updates):
                async for update in updates:
                    a2a = {"task_id": update.task_id, "context_id": update.context_id}
                    if update.kind == "delta":
                        yield invocation.stamp(
                            Event(
                                author=self.name,
                                object=OBJECT_CHUNK,
                                partial=True,
                                message=_assistant(update.text),
                                extensions={"message_id": message_id, "a2a": a2a},
                            )
                        )
                    elif update.kind == "status":
                        yield invocation.stamp(
                            Event(
                                author=self.name,
                                object=OBJECT_A2A_STATUS,
                                partial=True,
                                message=_assistant(update.text + "\n"),
                                extensions={
                                    "message_id": f"{message_id}:status",
                                    "a2a": {**a2a, "state": TaskState.Name(update.state)},
                                },
                            )
                        )
                    else:
                        final = update
        except A2ARemoteError as exc:
            yield invocation.stamp(
                Event(
                    author=self.name,
                    object=OBJECT_ERROR,
                    done=True,
                    error=EventError(type="a2a_error", message=str(exc)),
                )
            )
            return
        assert final is not None  # exchange() ends with a final update or raises
        delta: dict[str, Any] = {}
        if final.context_id and final.context_id != state.get(self.context_key):
            delta[self.context_key] = final.context_id
        if final.needs_input:
            delta[self.task_key] = final.task_id
        elif pending_task:
            delta[self.task_key] = None
        extensions = {
            "message_id": message_id,
            "a2a": {"task_id": final.task_id, "context_id": final.context_id, "state": TaskState.Name(final.state)},
        }
        if final.failed or not final.text:
            reason = final.text or "the remote agent finished without an answer"
            yield invocation.stamp(
                Event(
                    author=self.name,
                    object=OBJECT_ERROR,
                    done=True,
                    state_delta=delta,
                    extensions=extensions,
                    error=EventError(type="a2a_task_failed", message=f"{TaskState.Name(final.state)}: {reason}"),
                )
            )
            return
        yield invocation.stamp(
            Event(
                id=message_id,
                author=self.name,
                object=OBJECT_COMPLETION,
                message=_assistant(final.text),
                done=True,
                finish_reason="stop",
                state_delta=delta,
                extensions=extensions,
            )
        )


def _assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


class A2ATool:
    """`ask_<name>(question)`: a model's way to delegate to a remote A2A agent.

    The remote conversation continues across calls in the same session (its context id is
    kept in session state through the tool result's state delta)."""

    def __init__(self, agent: A2AAgent, *, name: str | None = None, description: str | None = None) -> None:
        self.agent = agent
        self.name = name or f"ask_{agent.name}"
        self.description = description or (
            f"Ask the remote agent {agent.name!r} a question and get its answer."
            + (f" It {agent.description[0].lower()}{agent.description[1:]}" if agent.description else "")
        )

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters={
                "type": "object",
                "properties": {"question": {"type": "string", "description": "The question or task, self-contained."}},
                "required": ["question"],
                "additionalProperties": False,
            },
        )

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolArgumentError("question: expected a non-empty string")
        if set(args) - {"question"}:
            raise ToolArgumentError(
                f"unexpected argument(s) {sorted(set(args) - {'question'})!r}; expected ['question']"
            )
        state = context.state
        answer = await self.agent.ask(
            question,
            context_id=str(state.get(self.agent.context_key) or "") or None,
            task_id=str(state.get(self.agent.task_key) or "") or None,
        )
        if answer.context_id and answer.context_id != state.get(self.agent.context_key):
            context.state_delta[self.agent.context_key] = answer.context_id
        if answer.needs_input:
            context.state_delta[self.agent.task_key] = answer.task_id
        elif state.get(self.agent.task_key):
            context.state_delta[self.agent.task_key] = None
        return answer.text
