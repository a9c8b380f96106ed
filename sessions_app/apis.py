"""REST API for sessions and their ledgers (DESIGN 5)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.api.fields import StrictCharField
from agentsite.errors import ApplicationError, not_found
from agentsite.runtime import run_manager
from sessions_app import models as orm
from sessions_app import selectors, services
from sessions_app.backends import session_state_view_sync, update_session_state_sync
from sessions_app.core.artifact_tools import artifact_url
from sessions_app.core.session import SessionKey, StateKeyError, session_scope_keys

MAX_EVENT_PAGE = 500


def get_owned_session(request: Request, session_id: str) -> orm.Session:
    session = selectors.session_get(user=request.user, session_id=session_id)
    if session is None:
        raise not_found("session", session_id)
    return session


class SessionOutput(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    title = serializers.CharField()
    state = serializers.JSONField()
    last_seq = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class EventOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    id = serializers.CharField()
    author = serializers.CharField()
    role = serializers.CharField()
    object = serializers.CharField()
    text = serializers.CharField(required=False)
    tool_calls = serializers.ListField(child=serializers.DictField(), required=False)
    tool_call_id = serializers.CharField(required=False)
    tool_name = serializers.CharField(required=False)
    state_delta = serializers.DictField(required=False)
    error = serializers.DictField(required=False)
    run_id = serializers.CharField(required=False, help_text="runner.completion events: the run")
    status = serializers.CharField(required=False, help_text="runner.completion events: how the run ended")
    final_state_delta = serializers.DictField(
        required=False,
        help_text="runner.completion events: the state the run changed, all its deltas merged (SPEC 1.9.2)",
    )
    final_choices = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="runner.completion events: the run's final answer as OpenAI-style choices "
        "({index, message, finish_reason, event_id}); absent when it ended without one (SPEC 1.9.2)",
    )
    artifact = serializers.DictField(required=False, help_text="a tool result that saved an artifact")
    queued = serializers.CharField(
        required=False, help_text="a user message sent into a running run: consumed or carried"
    )
    queued_id = serializers.CharField(required=False, help_text="the id POST /api/runs/<id>/messages/ answered")
    queued_dropped = serializers.ListField(
        required=False, help_text="runner.completion of a cancel: the queued messages it dropped"
    )
    regenerates = serializers.CharField(
        required=False, help_text="a user message that answers an earlier one again: its event id"
    )
    edit_of = serializers.CharField(
        required=False, help_text="a user message resent with edited text: the original's event id"
    )
    invocation_id = serializers.CharField()
    created_at = serializers.DateTimeField()


def attachment_data(session_id: str, part: dict[str, Any]) -> dict[str, Any]:
    """A stored message part as the APIs and pages show it (never its bytes: it has none)."""
    artifact = part.get("artifact") or {}
    data = {key: part[key] for key in ("type", "name", "mime", "size", "url") if part.get(key) is not None}
    if artifact:
        data["artifact"] = artifact
        data["download_url"] = artifact_url(session_id, artifact["filename"], artifact["version"])
    return data


def event_data(row: orm.Event) -> dict[str, Any]:
    payload = row.payload
    message = payload.get("message") or {}
    data: dict[str, Any] = {
        "seq": row.seq,
        "id": row.event_id,
        "author": row.author,
        "role": row.role,
        "object": row.object,
        "invocation_id": row.invocation_id,
        "created_at": row.created_at.isoformat(),
    }
    if message.get("content"):
        data["text"] = message["content"]
    if message.get("tool_calls"):
        data["tool_calls"] = message["tool_calls"]
    if message.get("tool_call_id"):
        data["tool_call_id"] = message["tool_call_id"]
    if message.get("tool_name"):
        data["tool_name"] = message["tool_name"]
    if message.get("parts"):
        # Images and files (issue 20): name, type, size and where to download them.
        data["attachments"] = [attachment_data(row.session_id, p) for p in message["parts"] if p.get("type") != "text"]
    if payload.get("state_delta"):
        data["state_delta"] = payload["state_delta"]
    if payload.get("error"):
        data["error"] = payload["error"]
    extensions = payload.get("extensions") or {}
    if row.object == "runner.completion":
        # How the run ended, so a reader of the ledger alone can tell a cancel from a failure.
        data["run_id"] = extensions.get("run_id")
        data["status"] = extensions.get("status")
        # SPEC 1.9.2 (runs.core.trace.CompletionCapture): what the run left behind, carried
        # on the marker only, never applied again as its own state_delta.
        for key in ("final_state_delta", "final_choices"):
            if extensions.get(key):
                data[key] = extensions[key]
    if extensions.get("artifact"):
        data["artifact"] = extensions["artifact"]
    # Steering (SPEC 1.5, runs.core.steering): how a queued message entered its run, and
    # the queued messages a cancel dropped.
    for key in ("queued", "queued_id", "queued_dropped"):
        if extensions.get(key):
            data[key] = extensions[key]
    # Redone turns (issue 21, runs.turns): which earlier user message this one regenerates or edits.
    for key in ("regenerates", "edit_of"):
        if extensions.get(key):
            data[key] = extensions[key]
    return data


class SessionListCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        agent = StrictCharField(required=False, max_length=128)
        title = StrictCharField(required=False, allow_blank=True, max_length=200)
        state = serializers.DictField(
            required=False, help_text="the session's initial state (its own keys: no `app:` or `user:` keys)"
        )

    @extend_schema(responses=SessionOutput(many=True))
    def get(self, request: Request) -> Response:
        rows = selectors.session_list(user=request.user)[:200]
        return Response({"results": SessionOutput(rows, many=True).data})

    @extend_schema(request=InputSerializer, responses={201: SessionOutput})
    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        agent = run_manager().runner.agent(body.validated_data.get("agent"))
        state = _session_state_input(body.validated_data.get("state") or {})
        row = services.session_create(
            user=request.user, agent=agent.name, title=body.validated_data.get("title", ""), state=state
        )
        return Response(SessionOutput(row).data, status=status.HTTP_201_CREATED)


class SessionDetailApi(APIView):
    class UpdateSerializer(serializers.Serializer):
        title = StrictCharField(
            min_length=1, max_length=200, trim_whitespace=True, help_text="the chat's new name, 1 to 200 characters"
        )

    @extend_schema(responses=SessionOutput)
    def get(self, request: Request, session_id: str) -> Response:
        return Response(SessionOutput(get_owned_session(request, session_id)).data)

    @extend_schema(request=UpdateSerializer, responses=SessionOutput)
    def patch(self, request: Request, session_id: str) -> Response:
        """Rename the chat (issue 21): only the title can change here."""
        session = get_owned_session(request, session_id)
        body = self.UpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.session_rename(session=session, title=body.validated_data["title"])
        return Response(SessionOutput(row).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, session_id: str) -> Response:
        services.session_delete(session=get_owned_session(request, session_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class StateOutput(serializers.Serializer):
    state = serializers.DictField(
        help_text="the state view: the session's keys, the app's as `app:<key>`, the user's as `user:<key>`"
    )


class SessionStateApi(APIView):
    """The session's state view, and `UpdateSessionState` outside a run (SPEC 2.1, 2.5)."""

    class InputSerializer(serializers.Serializer):
        state = serializers.DictField(
            help_text="keys to set in the session's own state (no `app:` or `user:` keys); no event is written"
        )

    @extend_schema(responses=StateOutput)
    def get(self, request: Request, session_id: str) -> Response:
        view = session_state_view_sync(_key_of(get_owned_session(request, session_id)))
        if view is None:
            raise not_found("session", session_id)
        return Response({"state": view})

    @extend_schema(request=InputSerializer, responses=StateOutput)
    def patch(self, request: Request, session_id: str) -> Response:
        session = get_owned_session(request, session_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        view = update_session_state_sync(_key_of(session), _session_state_input(body.validated_data["state"]))
        return Response({"state": view})


def _session_state_input(state: dict[str, Any]) -> dict[str, Any]:
    """A client's session state: its own keys only (SPEC 2.1). App state is every user's and
    user state has its own operations, so `app:` and `user:` keys are refused with a 400."""
    try:
        return session_scope_keys(state)
    except StateKeyError as exc:
        raise ApplicationError("invalid_state_key", str(exc), field=f"state.{exc.key}") from None


def _key_of(session: orm.Session) -> SessionKey:
    return SessionKey(app=session.app, user_id=str(session.user_id), session_id=session.id)


class SessionEventsApi(APIView):
    class QuerySerializer(serializers.Serializer):
        after_seq = serializers.IntegerField(required=False, min_value=0, max_value=2**63 - 1, default=0)  # the column
        limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_EVENT_PAGE, default=100)

    @extend_schema(
        parameters=[
            OpenApiParameter("after_seq", int, description="only events with a larger seq"),
            OpenApiParameter("limit", int, description=f"page size, at most {MAX_EVENT_PAGE}"),
        ],
        responses=EventOutput(many=True),
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = get_owned_session(request, session_id)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after_seq, limit = query.validated_data["after_seq"], query.validated_data["limit"]
        rows, more = selectors.event_page(session=session, after_seq=after_seq, limit=limit)
        next_url = None
        if more:
            next_url = request.build_absolute_uri(
                f"{request.path}?{urlencode({'after_seq': rows[-1].seq, 'limit': limit})}"
            )
        return Response({"results": [event_data(r) for r in rows], "next": next_url})


class ContextBlockOutput(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=[
            "instruction",
            "pinned",
            "summary",
            "gap",
            "event",
            "anchor",
            "restored_call",
            "context",
            "placeholder",
            "truncated",
        ],
        help_text="what the block is: a ledger event as sent, or what governance put in its place",
    )
    role = serializers.CharField()
    tokens = serializers.IntegerField()
    preview = serializers.CharField(help_text="the first 280 characters")
    seq = serializers.IntegerField(required=False, allow_null=True)
    event_id = serializers.CharField(required=False, allow_null=True)
    author = serializers.CharField(required=False, allow_null=True)
    active = serializers.BooleanField(required=False)
    tool_calls = serializers.ListField(child=serializers.DictField(), required=False)
    tool_call_id = serializers.CharField(required=False)
    tool_name = serializers.CharField(required=False, allow_null=True)
    compaction = serializers.CharField(required=False, help_text="pass0, pass1 or pass2")
    original_tokens = serializers.IntegerField(required=False, allow_null=True)
    version = serializers.IntegerField(required=False)
    last_seq = serializers.IntegerField(required=False)
    covered_events = serializers.IntegerField(required=False)
    covered_tokens = serializers.IntegerField(required=False)
    pins = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="pinned block: the active pinned records shown (kind, text, source_event_id, source_seq)",
    )
    omitted = serializers.ListField(child=serializers.DictField(), required=False, help_text="pins over the budget")


class ContextManifestOutput(serializers.Serializer):
    last_seq = serializers.IntegerField()
    coverage = serializers.FloatField(help_text="share of ledger events with a disposition (1.0: none lost silently)")
    counts = serializers.DictField(child=serializers.IntegerField())
    ranges = serializers.ListField(
        child=serializers.ListField(), help_text="[disposition, first_seq, last_seq] runs, oldest first"
    )
    truncated = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="[seq, head characters, tail characters, original characters] of each truncated result",
    )
    summary = serializers.DictField(allow_null=True, help_text="version and last_seq of the summary in the request")
    gaps = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))


class ContextBoundaryOutput(serializers.Serializer):
    last_seq = serializers.IntegerField()
    last_event_id = serializers.CharField()
    cutoff_at = serializers.DateTimeField()


class ContextTotalsOutput(serializers.Serializer):
    sent_tokens = serializers.IntegerField(help_text="the messages the next call would send")
    raw_tokens = serializers.IntegerField(help_text="the same without governance: the whole ledger, uncompacted")
    saved_tokens = serializers.IntegerField()
    tools_tokens = serializers.IntegerField()
    messages = serializers.IntegerField()
    history_events = serializers.IntegerField()
    hidden_events = serializers.IntegerField(help_text="loaded events hidden by the summary boundary")
    ledger_events = serializers.IntegerField()
    compaction = serializers.DictField(child=serializers.IntegerField())


class ContextCallOutput(serializers.Serializer):
    seq = serializers.IntegerField(help_text="the assistant event the call produced")
    event_id = serializers.CharField()
    invocation_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    window = serializers.IntegerField()
    sent_tokens = serializers.IntegerField()
    raw_tokens = serializers.IntegerField()
    tools_tokens = serializers.IntegerField()
    messages = serializers.IntegerField()
    history_events = serializers.IntegerField()
    hidden_events = serializers.IntegerField()
    summary = serializers.DictField(allow_null=True, help_text="version, last_seq, tokens, covered_events")
    compaction = serializers.DictField(child=serializers.IntegerField(), help_text="pass0, pass1, pass2, tokens_saved")
    precall = serializers.DictField(allow_null=True, required=False, help_text="pre-call compaction, when it ran")
    manifest = ContextManifestOutput(
        allow_null=True, required=False, help_text="how the call carried every ledger event"
    )
    pinned = serializers.DictField(allow_null=True, required=False, help_text="pinned block: tokens, shown, omitted")


class ContextOutput(serializers.Serializer):
    session_id = serializers.CharField()
    agent = serializers.CharField()
    model = serializers.CharField(allow_null=True)
    context_window = serializers.IntegerField(allow_null=True)
    filter_key = serializers.CharField()
    boundary = ContextBoundaryOutput(allow_null=True)
    blocks = ContextBlockOutput(many=True)
    totals = ContextTotalsOutput(allow_null=True)
    manifest = ContextManifestOutput(allow_null=True, help_text="how the next request carries every ledger event")
    calls = ContextCallOutput(many=True)


class SessionContextApi(APIView):
    @extend_schema(
        summary="The context the next model call would see",
        description=(
            "The projection of the session for its agent's next model call: instruction, summary "
            "block, the events after the summary boundary and the placeholders compaction put in "
            "place of old tool results, each with its token count; the boundary; totals against "
            "the raw ledger; the pinned block of the user's standing instructions; `manifest`, how the "
            "request carries every ledger event (verbatim, truncated, placeholder, summarized, ...); and "
            "`calls`, the context stats (manifest included) of every past model call, oldest first."
        ),
        responses=ContextOutput,
    )
    def get(self, request: Request, session_id: str) -> Response:
        from sessions_app.summaries import context_report

        return Response(context_report(session=get_owned_session(request, session_id)))
