"""REST API to redo a turn of a chat (issue 21): regenerate the last answer, resend an
edited message. Views only translate; `runs.turns` does the work (see its docstring for
what the ledger records)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.api.fields import StrictCharField
from agentsite.errors import ApplicationError
from runs import turns
from runs.surfaces.apis import RunOutput, run_data, within_message_limit
from sessions_app.apis import get_owned_session

_STATUS = {
    turns.NothingToRegenerateError: 400,
    turns.NotEditableError: 400,
    turns.TurnNotFoundError: 404,
    turns.TurnConflictError: 409,
}


class RedoOutput(RunOutput):
    turn_event_id = serializers.CharField(allow_null=True, help_text="the new user message's ledger event")
    regenerates = serializers.CharField(required=False, help_text="regenerate: the user message answered again")
    edit_of = serializers.CharField(required=False, help_text="edit: the user message whose text was replaced")


def _answer(done: turns.RedoneTurn) -> Response:
    data: dict[str, Any] = {**run_data(done.record), "turn_event_id": done.event_id, done.kind: done.of_event_id}
    return Response(data, status=status.HTTP_201_CREATED)


def _refused(exc: turns.TurnError) -> ApplicationError:
    return ApplicationError(exc.code, exc.message, status_code=_STATUS.get(type(exc), 400), field=exc.field)


class SessionRegenerateApi(APIView):
    """Answer the chat's last user message again, in a new run (201, the run). The new
    user event records `regenerates: <the earlier message's event id>`; nothing earlier
    changes. 400 `nothing_to_regenerate` for a chat without a message, 409 `run_active`
    while a run of the chat is queued or running, 404 for another user's chat."""

    @extend_schema(request=None, responses={201: RedoOutput})
    def post(self, request: Request, session_id: str) -> Response:
        session = get_owned_session(request, session_id)
        try:
            return _answer(turns.session_regenerate(user=request.user, session=session))
        except turns.TurnError as exc:
            raise _refused(exc) from None


class MessageEditInputSerializer(serializers.Serializer):
    # Named for the schema: every API's nested `InputSerializer` would be one "Input" component.
    message = StrictCharField(trim_whitespace=False, help_text="the edited text")

    def validate_message(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError(_("must not be empty"))
        return within_message_limit(value)


class SessionMessageEditApi(APIView):
    """Resend a user message of the chat with new text, as a new turn (201, the run). The
    new user event records `edit_of: <event id>` and keeps the message's files; the
    original stays in the ledger. 404 for an event not in the chat (or another user's
    chat), 400 `not_editable` for an event that is not a message you sent, 409
    `run_active` while a run of the chat is queued or running."""

    InputSerializer = MessageEditInputSerializer

    @extend_schema(request=InputSerializer, responses={201: RedoOutput})
    def post(self, request: Request, session_id: str, event_id: str) -> Response:
        session = get_owned_session(request, session_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            done = turns.session_message_edit(
                user=request.user,
                session=session,
                event_id=event_id,
                text=body.validated_data["message"],
            )
        except turns.TurnError as exc:
            raise _refused(exc) from None
        return _answer(done)
