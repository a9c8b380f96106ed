"""OpenAI-compatible `/v1`, the run (runs.surfaces.openai_compat): the session a request
continues (`X-Session-Id`, or the one holding its resent history), the history it seeds, its
`Idempotency-Key`, and `start_run`, the flow chat completions and responses share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase

from agentsite.api.json_input import InputError, check_text
from runs import selectors as run_selectors
from runs.core.context.fingerprint import conversation_after, history_fingerprint
from runs.core.context.seeding import own_tool_names
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
from runs.core.invocation import RunOptions
from runs.core.records import RunRecord
from runs.core.runner import Runner
from runs.core.tools.client import (
    ClientToolError,
    check_choice,
    check_clashes,
    takes_client_tools,
)
from runs.surfaces.openai_request import ChatRequest, OpenAIError
from sessions_app import fingerprints
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Event, ToolCall
from sessions_app.core.session import SessionNotFoundError

SESSION_HEADER = "X-Session-Id"
RUN_HEADER = "X-Run-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MATCH_HEADER = "X-Session-Match"
"""Issue 25, item 5: `history` when a request without `X-Session-Id` continued the session
holding its resent history; `history-ambiguous` when several of the user's sessions held it
(the most recently updated one was continued)."""
REQUEST_ID_MAX = 64  # Run.request_id's length
SESSION_ID_MAX = 64  # the column's length


def requested_session(request: HttpRequest) -> str | None:
    """`X-Session-Id`, refused when no session could have it (too long for the column,
    or text the database cannot store)."""
    return _checked_header(request, SESSION_HEADER, SESSION_ID_MAX, code="invalid_session_id")


def idempotency_key(request: HttpRequest) -> str | None:
    """`Idempotency-Key`: the run's request id, so it is refused as a request id would be."""
    key = _checked_header(request, IDEMPOTENCY_HEADER, REQUEST_ID_MAX, code="invalid_idempotency_key")
    if key is not None and not key.strip():
        raise OpenAIError(
            400, f"{IDEMPOTENCY_HEADER} must not be empty", param=IDEMPOTENCY_HEADER, code="invalid_idempotency_key"
        )
    return key


def _checked_header(request: HttpRequest, name: str, limit: int, *, code: str) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    if len(value) > limit:
        raise OpenAIError(400, f"{name} must be at most {limit} characters, got {len(value)}", param=name, code=code)
    try:
        check_text(value, name)
    except InputError as exc:
        raise OpenAIError(400, exc.message(), param=name, code=code) from None
    return value


async def open_session(user: Any, session_id: str | None) -> str | None:
    """The session to continue: the user's own, a new one with the client's id, or None."""
    if not session_id:
        return None
    if await db_call(session_selectors.session_of_another)(user=user, session_id=session_id):
        raise OpenAIError(404, f"session {session_id!r} not found", param=SESSION_HEADER, code="session_not_found")
    return session_id


@dataclass(frozen=True, kw_only=True)
class RunFields:
    """How a surface names the request fields `start_run` refuses (chat completions and
    the Responses API spell them differently)."""

    tool_name: Callable[[int], str]
    """The field of the i-th client tool's name."""
    tool_result: Callable[[str], str | None]
    """The field of the tool result a runner's refusal (its message) names."""
    tool_error: Callable[[ClientToolError], OpenAIError] | None = None
    """The error for a refused client tool or tool_choice; None: as the check words it."""
    session: str | None = None
    """The parameter to name when the runner finds no such session."""


@dataclass(frozen=True, kw_only=True)
class StartedRun:
    """A run a `/v1` request started: its record, its events as they happen, and the
    response headers naming its session and run (and how the session was found)."""

    record: RunRecord
    events: AsyncIterator[Event]
    headers: dict[str, str]


async def start_run(
    manager: Any,
    user: Any,
    chat: ChatRequest,
    *,
    key: str | None,
    find_session: Callable[[], Awaitable[str | None]],
    match_history: bool,
    replay: Callable[[RunRecord], Awaitable[HttpResponseBase]],
    options: RunOptions,
    fields: RunFields,
    turn_extensions: dict[str, Any] | None = None,
) -> StartedRun | HttpResponseBase:
    """The flow chat completions and responses share: the agent and the client's tools
    checked (refused before anything is stored), the session found (`find_session`; else,
    with `match_history`, the one of the user's sessions holding the resent chat), a request
    whose `Idempotency-Key` already made a run answered by `replay`, else the run started.
    Raises `OpenAIError` for what it refuses."""
    try:
        server_tools, kind = await manager.acall(lambda runner: check_agent(runner, chat.agent))
    except AgentNotFoundError:
        raise OpenAIError(
            404,
            f"the model {chat.agent!r} does not exist (models are agent names; see /v1/models)",
            param="model",
            code="model_not_found",
        ) from None
    if chat.client_tools and kind != "llm":
        raise OpenAIError(
            400,
            f"the model {chat.agent!r} is a {kind} agent, which cannot call client tools; use an LLM agent",
            param="tools",
            code="unsupported_client_tools",
        )
    try:
        check_clashes(chat.client_tools, server_tools, fields.tool_name, agent=chat.agent)
        check_choice(chat.tool_choice, {*server_tools, *(t.name for t in chat.client_tools)})
    except ClientToolError as exc:
        if fields.tool_error is not None:
            raise fields.tool_error(exc) from None
        raise OpenAIError(400, str(exc), param=exc.param, code=exc.code) from None
    session_id = await find_session()
    match, seed = None, chat.seed
    if match_history and session_id is None and chat.seed:
        # A stateless client (the Agents SDK's default) resending its chat: continue the
        # session that holds it.
        match = await db_call(fingerprints.session_of_history)(
            user=user, fingerprint=history_fingerprint(chat.agent, chat.seed)
        )
        if match is not None:
            session_id, seed = match.session_id, ()
    if key is not None:
        earlier = await db_call(run_selectors.run_by_request)(user=user, request_id=key)
        if earlier is not None:
            return await replay(earlier)
    listener, events = manager.bridge()

    async def start(runner: Runner) -> RunRecord:
        handle = await runner.start(
            user_id=str(user.pk),
            message=chat.message,
            session_id=session_id,
            agent=chat.agent,
            seed=seed,
            listeners=[listener],
            tool_results=chat.tool_results,
            request_id=key,
            options=options,
            turn_extensions=turn_extensions,
        )
        return handle.record

    try:
        # Shielded: a client that gives up (its timeout) while the run starts must not
        # cancel the start; the run goes on, and its retry (same Idempotency-Key) joins it.
        record = await asyncio.shield(manager.acall(start))
    except TooManyRunsError as exc:
        raise OpenAIError(429, str(exc), type="rate_limit_error", code="too_many_runs") from None
    except DuplicateRequestError:
        if key is None:  # a request id the runner made itself is never a duplicate
            raise
        # The same key arrived twice at once: the other request started the run; join it.
        return await replay(await run_of_key(user, key))
    except SessionNotFoundError as exc:
        raise OpenAIError(400, str(exc), param=fields.session) from None
    except UsageError as exc:  # e.g. a tool result for no call the session waits on: nothing stored
        raise OpenAIError(
            400, str(exc), param=fields.tool_result(str(exc)), code="unknown_tool_call" if chat.tool_results else None
        ) from None
    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id}
    if match is not None:
        headers[MATCH_HEADER] = "history-ambiguous" if match.ambiguous else "history"
    return StartedRun(record=record, events=events, headers=headers)


@dataclass(frozen=True, kw_only=True)
class Remember:
    """Records the chat the client now holds, for its next request to find this session
    (runs.core.context.fingerprint); only when `fresh`, the ledger being that chat (the
    session is new or was found by it): a session the request named may hold turns the
    client does not resend."""

    user: Any
    chat: ChatRequest
    session_id: str
    fresh: bool

    async def __call__(self, text: str, calls: Sequence[ToolCall]) -> None:
        if not self.fresh:
            return
        chat = self.chat
        sent = (*chat.seed, *((chat.message,) if chat.message is not None else chat.tool_results))
        fingerprint = history_fingerprint(chat.agent, conversation_after(sent, text, calls))
        await db_call(fingerprints.remember_history)(
            user=self.user, session_id=self.session_id, fingerprint=fingerprint
        )


async def run_of_key(user: Any, key: str) -> RunRecord:
    """The run a concurrent request with the same key registered; its row may still be on
    its way to the database (the runner refuses a duplicate before the row is written)."""
    for _ in range(50):
        record = await db_call(run_selectors.run_by_request)(user=user, request_id=key)
        if record is not None:
            return record
        await asyncio.sleep(0.1)
    raise OpenAIError(
        409,
        f"a request with {IDEMPOTENCY_HEADER} {key!r} is starting; retry",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_in_use",
    )


async def check_agent(runner: Runner, name: str) -> tuple[frozenset[str], str]:
    """The agent's own tool names and its kind ("llm" when it takes client tools);
    `AgentNotFoundError` for an unknown agent."""
    agent = runner.agent(name)
    return own_tool_names(agent), "llm" if takes_client_tools(agent) else str(getattr(agent, "kind", "other"))
