"""Redo a turn (issue 21, chat features): regenerate the last answer, or resend an edited
user message.

Both start a new run on the session whose user turn is a *new* ledger event: the ledger
stays append-only and nothing earlier is changed. The new user event says what
it redoes in its extensions, so a transcript can show the newest version of a turn and
offer the earlier ones:

- `regenerates: <event id>`: the user message it answers again (its text and files are
  copied from that message);
- `edit_of: <event id>`: the user message whose text it replaces (that message's files
  are kept).

Each names the event it was made from directly; a chain (an edit of a regeneration, a
regeneration of an edit) is followed back by the reader.

A session takes one redo at a time and none while one of its runs is queued or running
(`TurnConflictError`): a second answer to the same message racing the first would make
the transcript's "newest version" depend on which one ends last. Within a process the
check and the start are one claim; across processes a redo and a run started in another
process in the same instant can both pass (the check reads the runs' rows, which the
start inserts), as with the active-run limit (`runs.backends.active_runs_admission`).

The redo runs on the agent that answered the message it redoes (the chat's agent picker
may have changed since), else on the session's.

What the model sees: the projection leaves the redone turn out (the message named and its
answer, up to the next user message; `runs.core.context.projection`), so the model gets the
history the chat shows, with the new message as the turn it answers, and needs no note
saying what to ignore: a note about an answer it cannot see would only invite it to guess
at one. A summary written before the redo may still tell of the earlier answer
(docs/context.md, section 11).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final, Literal

from django.utils.translation import gettext as _

from agentsite.runtime import run_manager
from runs import selectors as run_selectors
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app import selectors as session_selectors
from sessions_app.core.events import Event, Message
from sessions_app.selectors import SessionRow

REGENERATES: Final = "regenerates"
EDIT_OF: Final = "edit_of"
RedoKind = Literal["regenerates", "edit_of"]

_LIVE = ("queued", "running")
# Sessions whose redo is between its active-run check and its run's row: a second redo of
# the same session in this process is refused meanwhile (the row makes it visible to the
# others).
_claimed: set[str] = set()
_claimed_lock = threading.Lock()


class TurnError(Exception):
    """A redo refused before anything was written; `code` and `field` for the API."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class NothingToRegenerateError(TurnError):
    """The session has no user message to answer again."""


class NotEditableError(TurnError):
    """The event named is not a user message of the session."""


class TurnNotFoundError(TurnError):
    """No event of the session has the id named."""


class TurnConflictError(TurnError):
    """A run of the session is queued or running."""


@dataclass(frozen=True, kw_only=True)
class RedoneTurn:
    """A started redo: its run, the user event it wrote and the one it redoes."""

    record: RunRecord
    kind: RedoKind
    of_event_id: str
    event_id: str | None


def last_user_message(*, session: SessionRow) -> Event | None:
    """The session's newest message from its user with text or files, if any."""
    for event in session_selectors.user_messages_newest_first(session=session):
        if event.message is not None and (event.message.content.strip() or event.message.parts):
            return event
    return None


def user_message(*, session: SessionRow, event_id: str) -> Event:
    """The session's user message `event_id` (`TurnNotFoundError`, `NotEditableError`)."""
    event = session_selectors.session_event(session=session, event_id=event_id)
    if event is None:
        raise TurnNotFoundError(
            "not_found",
            _("event %(event)s not found in this session") % {"event": repr(event_id)},
            field="event_id",
        )
    if event.author != "user" or event.message is None or event.message.role != "user":
        raise NotEditableError(
            "not_editable",
            _("event %(event)s is not a message you sent (%(author)s/%(role)s)")
            % {"event": repr(event_id), "author": event.author, "role": event.role},
            field="event_id",
        )
    return event


def session_regenerate(*, user: Any, session: SessionRow) -> RedoneTurn:
    """Answer the session's last user message again, in a new run."""
    target = last_user_message(session=session)
    if target is None or target.message is None:
        raise NothingToRegenerateError(
            "nothing_to_regenerate",
            _("session %(session)s has no message to answer again") % {"session": repr(session.id)},
        )
    message = Message(role="user", content=target.message.content, parts=target.message.parts)
    return _redo(user=user, session=session, message=message, kind=REGENERATES, of_event=target)


def session_message_edit(*, user: Any, session: SessionRow, event_id: str, text: str) -> RedoneTurn:
    """Send the edited text of the session's user message `event_id` as a new turn (the
    message's files go with it)."""
    target = user_message(session=session, event_id=event_id)
    assert target.message is not None  # user_message checked it
    message = Message(role="user", content=text, parts=target.message.parts)
    return _redo(user=user, session=session, message=message, kind=EDIT_OF, of_event=target)


def _redo(*, user: Any, session: SessionRow, message: Message, kind: RedoKind, of_event: Event) -> RedoneTurn:
    with _claimed_lock:
        if session.id in _claimed:
            raise _busy(session.id)
        _claimed.add(session.id)
    try:
        if run_selectors.session_has_run_in(session_id=session.id, statuses=_LIVE):
            raise _busy(session.id)

        agent = _agent_of(session=session, event=of_event)

        async def start(runner: Runner) -> RunRecord:
            handle = await runner.start(
                user_id=str(user.pk),
                message=message,
                session_id=session.id,
                agent=agent if agent in runner.agents else None,
                turn_extensions={kind: of_event.id},
            )
            return handle.record

        record = run_manager().call(start)
    finally:
        with _claimed_lock:
            _claimed.discard(session.id)
    # The user message is in the ledger once start returns: its id, for the client to follow.
    written = session_selectors.request_user_event_id(session_id=session.id, request_id=record.request_id)
    return RedoneTurn(record=record, kind=kind, of_event_id=of_event.id, event_id=written)


def _agent_of(*, session: SessionRow, event: Event) -> str | None:
    """The agent of the run whose turn `event` opened, if that run is known."""
    if not event.request_id:
        return None
    return run_selectors.request_agent(session_id=session.id, request_id=event.request_id)


def _busy(session_id: str) -> TurnConflictError:
    return TurnConflictError(
        "run_active",
        _("session %(session)s has a reply in progress: wait for it to end, or cancel it")
        % {"session": repr(session_id)},
        field=None,
    )
