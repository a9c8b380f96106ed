"""OpenAI-compatible endpoint: `POST /v1/chat/completions`, `GET /v1/models` and
`GET /v1/models/<id>` (SPEC 12.3).

`model` names an agent; the API token is the SDK's `api_key`. The last message is the
run's input; earlier messages seed a new, empty session, in the whole message grammar
(assistant `tool_calls` and `tool` results too: the client's tool rounds, stored as such and
shown to the agent as context, runs.core.context.seeding); `X-Session-Id` continues a
session and is echoed back. Without it, a resent history that is exactly the chat of one of
the user's sessions (its fingerprint, taken after the session's last /v1 run, the ledger
unchanged since: runs.core.context.fingerprint) continues that session instead, nothing
seeded again, `X-Session-Match` saying so (issue 25, item 5). The content of an answer is the text of each assistant message
of the run, separated by a blank line, the final answer last, whether streamed or not
(`answer_text`); streaming sends `chat.completion.chunk` events (role first, then text
deltas) through tool rounds until the run's final answer, then `finish_reason`, a usage
chunk when asked, and `data: [DONE]`. The request's `tools` are the client's own functions,
offered beside the agent's (issue 20, runs.core.tools.client): a call of one answers
`finish_reason: "tool_calls"` with the call and pauses the run (`requires_action`), the call
waiting in the ledger; the next request's trailing `tool` results continue that same run;
`tool_choice` binds the first model step. `Idempotency-Key` makes a repeated request answer
with the first run's result (joining it while it runs); a run that failed answers 422, which
SDKs do not retry. Errors use OpenAI's error format. Sampling parameters are accepted and
ignored: they are settings of the agent, not of the request.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agentsite.runtime import run_manager
from runs.auth import AuthenticationError, authenticate
from runs.core.invocation import RunOptions
from runs.core.records import RunRecord
from runs.surfaces.openai_answers import (
    PART_SEPARATOR,
    Answered,
    _completion,
    answer_part,
    answer_text,
    failure_response,
    replayed_run,
    run_answer,
    run_ended,
    run_failure,
    same_input,
    waiting_calls,
)
from runs.surfaces.openai_request import (
    ChatRequest,
    OpenAIError,
    api_user,
    parse_chat_request,
    parse_messages,
    request_body,
)
from runs.surfaces.openai_runs import (
    IDEMPOTENCY_HEADER,
    MATCH_HEADER,
    REPLAYED_HEADER,
    REQUEST_ID_MAX,
    RUN_HEADER,
    SESSION_HEADER,
    SESSION_ID_MAX,
    Remember,
    RunFields,
    StartedRun,
    check_agent,
    idempotency_key,
    open_session,
    requested_session,
    run_of_key,
    start_run,
)
from runs.surfaces.openai_stream import _stream, _stream_done, event_stream

__all__ = [
    "IDEMPOTENCY_HEADER",
    "MATCH_HEADER",
    "PART_SEPARATOR",
    "REPLAYED_HEADER",
    "REQUEST_ID_MAX",
    "RUN_HEADER",
    "SESSION_HEADER",
    "SESSION_ID_MAX",
    "Answered",
    "ChatRequest",
    "OpenAIError",
    "Remember",
    "RunFields",
    "StartedRun",
    "answer_part",
    "answer_text",
    "api_user",
    "chat_completions",
    "check_agent",
    "event_stream",
    "failure_response",
    "idempotency_key",
    "list_models",
    "open_session",
    "parse_chat_request",
    "parse_messages",
    "replayed_run",
    "request_body",
    "requested_session",
    "retrieve_model",
    "run_answer",
    "run_ended",
    "run_failure",
    "run_of_key",
    "same_input",
    "start_run",
    "waiting_calls",
]


@csrf_exempt
@require_POST
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    try:
        user = await authenticate(request)
        if not user.is_authenticated:
            raise OpenAIError(
                401,
                "missing API key: send 'Authorization: Bearer <token>'",
                type="authentication_error",
                code="invalid_api_key",
            )
        chat = parse_chat_request(request_body(request))
        session_header = requested_session(request)
        key = idempotency_key(request)
        manager = run_manager()

        async def replay(record: RunRecord) -> HttpResponseBase:
            return await _replay(manager, record, chat, session_header)

        started = await start_run(
            manager,
            user,
            chat,
            key=key,
            find_session=lambda: open_session(user, session_header),
            match_history=session_header is None,
            replay=replay,
            options=RunOptions(output=chat.output, client_tools=chat.client_tools, tool_choice=chat.tool_choice),
            fields=RunFields(
                tool_name=lambda i: f"tools[{i}].function.name",
                tool_result=lambda problem: _result_param(chat, problem),
            ),
        )
    except AuthenticationError as exc:
        return OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key").response()
    except OpenAIError as exc:
        return exc.response()
    if not isinstance(started, StartedRun):  # a replay, streamed or not
        return started
    remember = Remember(user=user, chat=chat, session_id=started.record.session_id, fresh=session_header is None)
    if chat.stream:
        return event_stream(_stream(manager, started.record, chat, started.events, remember), started.headers)
    done = await run_answer(manager, started, chat, remember)
    if isinstance(done, HttpResponse):
        return done
    return _completion(done.record, chat, done.text, done.headers, calls=done.calls)


async def _replay(manager: Any, record: RunRecord, chat: ChatRequest, session_header: str | None) -> HttpResponseBase:
    """Answer a request whose `Idempotency-Key` already made a run with that run's result."""
    done = await replayed_run(manager, record, chat, session_header, input_name="last message")
    if isinstance(done, HttpResponse):
        return done
    if chat.stream:
        return event_stream(_stream_done(done.record, chat, done.text, done.calls), done.headers)
    return _completion(done.record, chat, done.text, done.headers, calls=done.calls)


def _result_param(chat: ChatRequest, problem: str) -> str | None:
    """The field of the tool result the runner refused (it names the call id)."""
    for index, result in zip(chat.tool_result_indexes, chat.tool_results, strict=True):
        if repr(result.tool_call_id) in problem:
            return f"messages[{index}].tool_call_id"
    return None


def _model_data(agent: Any) -> dict[str, Any]:
    return {
        "id": agent.name,
        "object": "model",
        "created": 0,
        "owned_by": "agentsite",
        "description": agent.description,
        "backing_model": agent.model_name,
    }


@require_GET
async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        await api_user(request)
    except OpenAIError as exc:
        return exc.response()
    runner = run_manager().runner
    return JsonResponse({"object": "list", "data": [_model_data(agent) for agent in runner.agents.values()]})


@require_GET
async def retrieve_model(request: HttpRequest, model_id: str) -> HttpResponse:
    """`GET /v1/models/<id>`: the agent of that name as a model, 404 in OpenAI's format."""
    try:
        await api_user(request)
        agent = run_manager().runner.agents.get(model_id)
        if agent is None:
            raise OpenAIError(
                404,
                f"the model {model_id!r} does not exist (models are agent names; see /v1/models)",
                param="model",
                code="model_not_found",
            )
    except OpenAIError as exc:
        return exc.response()
    return JsonResponse(_model_data(agent))
