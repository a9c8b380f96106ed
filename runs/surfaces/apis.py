"""REST API for runs and agents (DESIGN 5). Views only translate; the Runner does the work."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.api.fields import StrictBooleanField, StrictCharField
from agentsite.errors import ApplicationError, not_found
from agentsite.runtime import run_manager
from runs import selectors
from runs.attachment_input import rest_parts
from runs.backends import pending_interrupts
from runs.core.agents.graph import NotWaitingError, RunNotFoundError, resume_graph_run
from runs.core.agents.graph.diagram import agent_graph_shape
from runs.core.attachments import AttachmentError
from runs.core.errors import UsageError
from runs.core.invocation import RunOptions
from runs.core.output import OutputSpec, SchemaError
from runs.core.records import RunRecord
from runs.core.runner import Runner
from runs.core.steering import QueueFullError, RunNotActiveError
from runs.error_texts import translated_error
from runs.fanout import RunUnreachableError, request_cancel, request_enqueue, request_queued, request_withdraw
from runs.graph_progress import earlier_node_states, graph_progress
from runs.surfaces.rest_wait import start_then
from sessions_app import selectors as session_selectors
from sessions_app.artifact_backends import DjangoArtifactService
from sessions_app.core.artifacts import ArtifactScope, ArtifactVersion, InvalidArtifactNameError
from sessions_app.core.events import ContentPart, Message

# The completion event lands within a second of a cancel (SPEC 1.9); the reply waits a
# little longer for the run's record, so a loaded database still answers with the outcome.
CANCEL_WAIT_S = 5.0


def within_message_limit(value: str) -> str:
    """`value`, or a 413 naming `message` when it is longer than AGENTSITE_MAX_MESSAGE_CHARS."""
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(value) > limit:
        raise ApplicationError(
            "message_too_large",
            _("message is %(length)s characters; the limit is %(limit)s") % {"length": len(value), "limit": limit},
            status_code=413,
            field="message",
        )
    return value


class RunOutput(serializers.Serializer):
    id = serializers.CharField()
    session_id = serializers.CharField()
    agent = serializers.CharField()
    request_id = serializers.CharField()
    status = serializers.CharField(
        help_text="queued, running, requires_action (paused for the client's tool "
        "results, issue 20), completed, failed, cancelled or interrupted"
    )
    answer = serializers.CharField(required=False)
    error = serializers.DictField(required=False, allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    event_count = serializers.IntegerField(
        help_text="the ledger events this run wrote: its user turn, each stored step and its completion "
        "marker; streamed deltas are not counted (issue 21)",
    )
    model_calls = serializers.IntegerField()
    tool_calls = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    output = serializers.JSONField(
        required=False,
        help_text="a run with an output_schema: its validated structured answer (issue 20)",
    )
    interrupt = serializers.DictField(
        required=False,
        help_text="a paused graph run: what it waits for (id, node, payload); answer with resume/",
    )


def run_data(record: RunRecord, *, interrupt: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": record.id,
        "session_id": record.session_id,
        "agent": record.agent,
        "request_id": record.request_id,
        "status": record.status,
        "error": translated_error(record.error),  # its message in the request's language (issue 21)
        "created_at": record.created_at.isoformat(),
        "started_at": record.started_at.isoformat() if record.started_at else None,
        "ended_at": record.ended_at.isoformat() if record.ended_at else None,
        "event_count": record.event_count,
        "model_calls": record.model_calls,
        "tool_calls": record.tool_calls,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
    }
    if record.answer:
        data["answer"] = record.answer
    if record.output is not None:
        data["output"] = record.output
    if interrupt is not None:
        data["interrupt"] = interrupt
    return data


def runs_data(records: list[RunRecord]) -> list[dict[str, Any]]:
    """Run data with the pending interrupts of paused graph runs (one query for all)."""
    waiting = pending_interrupts([r.id for r in records if r.finished])
    return [run_data(r, interrupt=waiting.get(r.id)) for r in records]


def _live(record: RunRecord) -> RunRecord:
    """Prefer the in-process view of a run that is still going (its counters move)."""
    if record.finished:
        return record
    manager = run_manager()
    handle = manager.runner.handle(record.id)
    return handle.record if handle is not None else record


class RunCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        message = StrictCharField(trim_whitespace=False, allow_blank=True, help_text="may be empty with attachments")
        session_id = StrictCharField(required=False, max_length=64)
        agent = StrictCharField(required=False, max_length=128)
        request_id = StrictCharField(required=False, max_length=64)
        wait = StrictBooleanField(required=False, default=False)
        output_schema = serializers.JSONField(
            required=False,
            help_text="a JSON Schema the final answer must match: validated, retried with feedback (2 times), "
            "then the run fails with output_invalid; the value is the run's `output`",
        )

        def validate_output_schema(self, value: object) -> OutputSpec:
            try:
                return OutputSpec.of(value)  # type: ignore[arg-type]  # OutputSpec.of refuses a non-object itself
            except SchemaError as exc:  # refused before anything is stored
                raise ApplicationError("invalid_output_schema", str(exc), field="output_schema") from None

        attachments = serializers.JSONField(
            required=False,
            help_text="images and files (issue 20): [{type: image|file, data: base64 or data URL, name?, mime?}], "
            "[{type: image, url}] or [{type: file, artifact: a stored file's name, version?}]; the type is "
            "sniffed from the bytes (png, jpeg, gif, webp, pdf, text, csv, json: else 415), "
            "AGENTSITE_UPLOAD_MAX_BYTES each (413), AGENTSITE_UPLOAD_MAX_COUNT per message (413)",
        )

        def validate_message(self, value: str) -> str:
            if not value.strip() and not self.initial_data.get("attachments"):
                raise serializers.ValidationError(_("must not be empty"))
            return within_message_limit(value)

    class ListQuery(serializers.Serializer):
        session_id = serializers.CharField(required=False, max_length=64)
        status = serializers.ChoiceField(
            required=False,
            choices=["queued", "running", "requires_action", "completed", "failed", "cancelled", "interrupted"],
        )
        limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)

    @extend_schema(parameters=[ListQuery], responses=RunOutput(many=True))
    def get(self, request: Request) -> Response:
        """Your runs, newest first (`?session_id=`, `?status=running` to find the active one)."""
        query = self.ListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        records = selectors.run_list(user=request.user, **query.validated_data)
        return Response({"results": runs_data([_live(r) for r in records])})

    @extend_schema(request=InputSerializer, responses={201: RunOutput})
    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        session_id = data.get("session_id")
        if session_id and session_selectors.session_get(user=request.user, session_id=session_id) is None:
            raise not_found("session", session_id, field="session_id")
        manager = run_manager()
        manager.runner.agent(data.get("agent"))  # unknown agent: 400 before anything is written
        message = Message(role="user", content=data["message"], parts=_attachments(request, data, session_id))

        async def start(runner: Runner) -> RunRecord:
            handle = await runner.start(
                user_id=str(request.user.pk),
                message=message,
                session_id=session_id,
                agent=data.get("agent"),
                request_id=data.get("request_id"),
                options=RunOptions(output=data.get("output_schema")),
            )
            return handle.record

        # Started (and, with `wait`, waited for) on the event loop once this thread is free
        # (runs/surfaces/rest_wait.py): the start may queue for a setup place.
        return start_then(Response(None, status=status.HTTP_201_CREATED), start, run_data, wait=data["wait"])


def _attachments(request: Request, data: dict[str, Any], session_id: str | None) -> tuple[ContentPart, ...]:
    """The run message's images and files, each checked before anything is stored."""
    if "attachments" not in data:
        return ()
    lookup = None
    if session_id:
        scope = ArtifactScope(app=settings.AGENTSITE_APP, user_id=str(request.user.pk), session_id=session_id)
        service = DjangoArtifactService()

        def lookup(name: str, version: int | None) -> ArtifactVersion | None:
            try:
                versions = service.versions_sync(scope, name)
            except InvalidArtifactNameError:
                return None
            return next((v for v in reversed(versions) if version is None or v.version == version), None)

    try:
        return rest_parts(data["attachments"], field="attachments", lookup=lookup)
    except AttachmentError as exc:
        raise ApplicationError(exc.code, exc.message, status_code=exc.status, field=exc.field) from None


class RunDetailApi(APIView):
    @extend_schema(responses=RunOutput)
    def get(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        return Response(runs_data([_live(record)])[0])


class RunTraceApi(APIView):
    """The run's execution trace (SPEC 1.9.3, issue 21): spans for the agents, model calls,
    tool calls, graph nodes, pre-call summaries and compactions, with start, duration,
    status and parent. Written when the run ends: `trace` is null while it runs (and for
    runs that ended before traces were kept). `graph`: the run's agent's graph when it is a
    graph agent (nodes, edges and layers from its definition, `runs.core.agents.graph.diagram`),
    else null; `progress`, while such a run goes on, the nodes done and running by its
    checkpoints, else null; `earlier`, for a graph run that resumed a paused one, the node
    span statuses of the runs before it (`runs.graph_progress`). 404 for another user's run."""

    @extend_schema(responses={200: dict})
    def get(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        graph = agent_graph_shape(run_manager().runner.agents.get(record.agent))
        return Response(
            {
                "run_id": record.id,
                "status": record.status,
                "session_id": record.session_id,
                "trace": record.trace,
                "graph": graph,
                "progress": graph_progress(record=record) if graph is not None else None,
                "earlier": earlier_node_states(record=record) if graph is not None else {},
            }
        )


class RunResumeApi(APIView):
    """Answer a paused graph run: a new run on the same session continues the graph from
    its checkpoint, with `value` as the answer (`message`, if given, is the user turn the
    conversation shows; else the value itself). 201 with the new run; 409 when the run
    waits for nothing (never paused, already resumed, still running)."""

    class InputSerializer(serializers.Serializer):
        value = serializers.JSONField(help_text="the answer the paused node receives (any JSON but null)")
        message = StrictCharField(required=False, max_length=4000, trim_whitespace=False)

        def validate_value(self, value: Any) -> Any:
            if value is None:
                raise serializers.ValidationError(_("must not be null"))
            return value

    @extend_schema(request=InputSerializer, responses={201: RunOutput})
    def post(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data

        async def resume(runner: Runner) -> RunRecord:
            handle = await resume_graph_run(
                runner,
                user_id=str(request.user.pk),
                run_id=run_id,
                value=data["value"],
                message=data.get("message"),
            )
            return handle.record

        try:
            resumed = run_manager().call(resume)
        except RunNotFoundError:
            raise not_found("run", run_id) from None
        except NotWaitingError as exc:
            raise ApplicationError("run_not_waiting", str(exc), status_code=409) from None
        return Response(run_data(resumed), status=status.HTTP_201_CREATED)


class RunCancelApi(APIView):
    @extend_schema(request=None, responses={202: RunOutput})
    def post(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        if record.finished:
            raise ApplicationError(
                "run_not_active",
                _("run %(run)s already ended (%(status)s)") % {"run": repr(run_id), "status": record.status},
                status_code=409,
            )
        manager = run_manager()
        if manager.call(lambda runner: request_cancel(runner, run_id)):
            # The completion event lands within a second of the cancel (SPEC 1.9).
            final = manager.wait(run_id, timeout=CANCEL_WAIT_S) or record
        else:
            # Another process owns the run: the cancel went out on the channel layer.
            final = _poll_until_finished(request.user, run_id, timeout_s=CANCEL_WAIT_S) or record
        return Response(run_data(final), status=status.HTTP_202_ACCEPTED)


class QueuedMessageOutput(serializers.Serializer):
    id = serializers.CharField(help_text="the queued message's id; its ledger event carries it as extensions.queued_id")
    status = serializers.CharField(help_text="queued")
    run_id = serializers.CharField()
    message = serializers.CharField()
    queued_at = serializers.DateTimeField()


class WithdrawnOutput(serializers.Serializer):
    run_id = serializers.CharField()
    withdrawn = QueuedMessageOutput(many=True)


class QueuedListOutput(serializers.Serializer):
    run_id = serializers.CharField()
    queued = QueuedMessageOutput(many=True)


class RunMessagesApi(APIView):
    """Steer a run while it goes (SPEC 1.5): queue a message for its next model step, or
    withdraw the messages still queued.

    A queued message is taken before the run's next model step (never inside a tool round)
    and becomes a user message of the run (`extensions.queued == "consumed"`); one still
    queued when the run ends opens the next run of the session (`"carried"`); a cancel drops
    the queued ones and lists them on the run's completion event (`queued_dropped`)."""

    class InputSerializer(serializers.Serializer):
        message = StrictCharField(trim_whitespace=False)

        def validate_message(self, value: str) -> str:
            if not value.strip():
                raise serializers.ValidationError(_("must not be empty"))
            return within_message_limit(value)

    @staticmethod
    def _live_run(request: Request, run_id: str) -> RunRecord:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        if record.finished:
            raise _ended(run_id, record.status)
        return record

    @extend_schema(responses={200: QueuedListOutput}, summary="The messages queued for a run and not yet taken")
    def get(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        queued: list[Any] = []
        if not record.finished:
            try:
                queued = run_manager().call(lambda runner: request_queued(runner, run_id))
            except RunNotActiveError:
                queued = []  # ending: what it held is carried or dropped (see its completion event)
            except RunUnreachableError as exc:
                raise ApplicationError("run_unreachable", str(exc), status_code=503) from None
        return Response(
            {
                "run_id": run_id,
                "queued": [{**item.to_dict(), "status": "queued", "run_id": run_id} for item in queued],
            }
        )

    @extend_schema(
        request=InputSerializer, responses={202: QueuedMessageOutput}, summary="Queue a message into a running run"
    )
    def post(self, request: Request, run_id: str) -> Response:
        record = selectors.run_get(user=request.user, run_id=run_id)
        if record is None:
            raise not_found("run", run_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self._live_run(request, run_id)
        text = body.validated_data["message"]
        try:
            queued = run_manager().call(lambda runner: request_enqueue(runner, run_id, text))
        except QueueFullError as exc:
            raise ApplicationError(
                "queue_full",
                f"{exc}: wait for the run to take them, or withdraw them",
                status_code=429,
            ) from None
        except RunUnreachableError as exc:
            self._live_run(request, run_id)  # it ended meanwhile: 409 says how
            raise ApplicationError("run_unreachable", str(exc), status_code=503) from None
        except RunNotActiveError:
            # Ending here, or ended on another node since the read above.
            ended = selectors.run_get(user=request.user, run_id=run_id)
            raise _ended(run_id, ended.status if ended is not None and ended.finished else "ending") from None
        except UsageError as exc:
            raise ApplicationError("invalid", str(exc), field="message") from None
        data = {**queued.to_dict(), "status": "queued", "run_id": run_id}
        return Response(data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: WithdrawnOutput}, summary="Withdraw the messages queued for a run")
    def delete(self, request: Request, run_id: str) -> Response:
        self._live_run(request, run_id)
        try:
            withdrawn = run_manager().call(lambda runner: request_withdraw(runner, run_id))
        except RunUnreachableError as exc:
            self._live_run(request, run_id)
            raise ApplicationError("run_unreachable", str(exc), status_code=503) from None
        except RunNotActiveError:
            ended = selectors.run_get(user=request.user, run_id=run_id)
            raise _ended(run_id, ended.status if ended is not None and ended.finished else "ending") from None
        return Response(
            {
                "run_id": run_id,
                "withdrawn": [{**item.to_dict(), "status": "withdrawn", "run_id": run_id} for item in withdrawn],
            }
        )


def _ended(run_id: str, state: str) -> ApplicationError:
    return ApplicationError(
        "run_not_active",
        _("run %(run)s already ended (%(status)s); start a new run with the message instead")
        % {"run": repr(run_id), "status": state},
        status_code=409,
    )


def _poll_until_finished(user: Any, run_id: str, *, timeout_s: float) -> RunRecord | None:
    deadline = time.monotonic() + timeout_s
    record = selectors.run_get(user=user, run_id=run_id)
    while record is not None and not record.finished and time.monotonic() < deadline:
        time.sleep(0.05)
        record = selectors.run_get(user=user, run_id=run_id)
    return record


def agent_model_fields(agent: Any) -> dict[str, str | None]:
    """Who serves an agent's model, and what it is (the offline planner says it is no LLM)."""
    model = getattr(agent, "model", None)
    info = model.info() if model is not None and hasattr(model, "info") else None
    return {
        "model_provider": info.provider if info is not None else None,
        "model_description": info.description if info is not None else None,
    }


class AgentListApi(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        runner = run_manager().runner
        return Response(
            {
                "results": [
                    {
                        "name": agent.name,
                        "description": agent.description,
                        "kind": agent.kind,
                        "model": agent.model_name,
                        "default": agent.name == runner.default_agent,
                        **agent_model_fields(agent),
                    }
                    for agent in runner.agents.values()
                ]
            }
        )


class SessionPinsApi(APIView):
    """The user's pins (issue 24): list the pinned records, pin or unpin a message."""

    class InputSerializer(serializers.Serializer):
        event_id = serializers.CharField(help_text="a user message of this session")

    @staticmethod
    def _owned(request: Request, session_id: str) -> Any:
        session = session_selectors.session_get(user=request.user, session_id=session_id)
        if session is None:
            raise not_found("session", session_id)
        return session

    @staticmethod
    def _answer(state: Any, status_code: int = 200) -> Response:
        return Response({"pins": [r.to_dict() for r in state.records]}, status=status_code)

    @extend_schema(summary="The session's pinned records, active and superseded, each with its source")
    def get(self, request: Request, session_id: str) -> Response:
        from runs.core.context.pinned import PinnedState

        return self._answer(PinnedState.of_session_state(self._owned(request, session_id).state or {}))

    @extend_schema(summary="Pin a user message of the session", request=InputSerializer)
    def post(self, request: Request, session_id: str) -> Response:
        return self._change(request, session_id, pin=True)

    @extend_schema(summary="Unpin every active pin from a user message of the session", request=InputSerializer)
    def delete(self, request: Request, session_id: str) -> Response:
        return self._change(request, session_id, pin=False)

    def _change(self, request: Request, session_id: str, *, pin: bool) -> Response:
        from runs.core.context.pinned import PinRefused
        from runs.pins import session_pin, session_unpin

        session = self._owned(request, session_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            state = (session_pin if pin else session_unpin)(session=session, event_id=data.validated_data["event_id"])
        except PinRefused as exc:
            raise ApplicationError("invalid", str(exc), status_code=400, field="event_id") from None
        return self._answer(state, 201 if pin else 200)
