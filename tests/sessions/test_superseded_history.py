"""Superseded turns (issue 21, `sessions_app.core.redo`) stay out of session recall and auto
memory: a turn the user regenerated or edited away is history they replaced. Recall runs on
the in-memory index and on DjangoRecallIndex (the configured database)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.memory import InMemoryMemoryService, UserKey
from sessions_app.core.memory_extract import AutoMemory, ExtractedCall, ExtractionRequest, PatternMemoryExtractor
from sessions_app.core.recall import InMemoryRecallIndex, RecallIndex, session_search
from sessions_app.core.session import Session, SessionService

APP = "redo"
T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)

# The Django index reads from worker threads, so its tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)


def user(text: str, **extensions: str) -> Event:
    return Event(author="user", message=Message(role="user", content=text), extensions=dict(extensions))


def assistant(text: str) -> Event:
    return Event(author="agent", message=Message(role="assistant", content=text))


class Backend:
    def __init__(self, service: SessionService, index: RecallIndex, users: Callable[[str], str]) -> None:
        self.service, self.index, self.user = service, index, users
        self._clock = T0

    async def open(self, persona: str = "alice") -> Session:
        return await self.service.create_session(app=APP, user_id=self.user(persona))

    async def add(self, session: Session, event: Event) -> Event:
        """Append `event` and answer it as stored (with its id and seq)."""
        self._clock += timedelta(seconds=1)
        await self.service.append_event(session, event.replace(created_at=self._clock))
        return (await self.service.list_events(session.key, limit=10_000))[-1]

    async def reload(self, session: Session) -> Session:
        loaded = await self.service.get_session(session.key)
        assert loaded is not None
        return loaded


@pytest.fixture(params=["memory", "django"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        service = InMemorySessionService()
        return Backend(service, InMemoryRecallIndex(service), lambda name: name)
    from django.contrib.auth import get_user_model

    from sessions_app.backends import DjangoSessionService
    from sessions_app.recall_backends import DjangoRecallIndex

    users = {name: str(get_user_model().objects.create_user(username=name).pk) for name in ("alice", "bob")}
    return Backend(DjangoSessionService(), DjangoRecallIndex(), users.__getitem__)


async def regenerated_chat(backend: Backend) -> tuple[Session, dict[str, Event]]:
    """A question answered wrongly, regenerated, answered again; then a later turn."""
    session = await backend.open()
    asked = await backend.add(session, user("Which port does the gizmo relay listen on?"))
    wrong = await backend.add(session, assistant("The gizmo relay listens on port 8080."))
    again = await backend.add(session, user("Which port does the gizmo relay listen on?", regenerates=asked.id))
    right = await backend.add(session, assistant("The gizmo relay listens on port 9090."))
    later = await backend.add(session, user("And the gizmo relay's owner is the platform team."))
    return await backend.reload(session), {
        "asked": asked,
        "wrong": wrong,
        "again": again,
        "right": right,
        "later": later,
    }


def found(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["event_id"]: r for r in answer["results"]}


async def test_session_search_leaves_out_a_regenerated_turn(backend: Backend) -> None:
    session, events = await regenerated_chat(backend)
    answer = await session_search(
        backend.index, session=session, query="gizmo relay port", scope="current_session", min_confidence=0
    )
    hits = found(answer)
    assert events["right"].id in hits and events["again"].id in hits
    assert events["wrong"].id not in hits and events["asked"].id not in hits
    assert not any(r.get("superseded") for r in answer["results"])


async def test_include_superseded_returns_the_replaced_turn_marked(backend: Backend) -> None:
    session, events = await regenerated_chat(backend)
    answer = await session_search(
        backend.index,
        session=session,
        query="gizmo relay port",
        scope="current_session",
        min_confidence=0,
        include_superseded=True,
    )
    hits = found(answer)
    for name in ("asked", "wrong"):
        assert hits[events[name].id]["superseded"] is True
        assert hits[events[name].id]["hidden"] == "superseded"
    for name in ("again", "right"):
        assert "superseded" not in hits[events[name].id]
        assert hits[events[name].id]["hidden"] != "superseded"


async def test_an_edit_of_an_older_message_hides_only_that_turn_in_other_sessions_too(backend: Backend) -> None:
    old = await backend.open()
    first = await backend.add(old, user("The sprocket cache lives in Frankfurt."))
    first_answer = await backend.add(old, assistant("Noted: the sprocket cache is in Frankfurt."))
    second = await backend.add(old, user("The sprocket queue lives in Dublin."))
    second_answer = await backend.add(old, assistant("Noted: the sprocket queue is in Dublin."))
    edited = await backend.add(old, user("The sprocket cache lives in Madrid.", edit_of=first.id))
    current = await backend.reload(await backend.open())
    answer = await session_search(
        backend.index, session=current, query="sprocket", scope="other_sessions", top_k=10, min_confidence=0
    )
    hits = found(answer)
    assert first.id not in hits and first_answer.id not in hits
    assert {second.id, second_answer.id, edited.id} <= set(hits)


# -- auto memory ----------------------------------------------------------------------------------------


class Recording(PatternMemoryExtractor):
    """The pattern extractor, keeping the texts it was given (a test double)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    async def extract(self, request: ExtractionRequest) -> list[ExtractedCall]:
        self.seen.extend(m.text for m in request.messages)
        return await super().extract(request)


async def test_auto_memory_skips_an_edited_away_turn_and_moves_its_cursor_past_it() -> None:
    sessions, memory, extractor = InMemorySessionService(), InMemoryMemoryService(), Recording()
    backend = Backend(sessions, InMemoryRecallIndex(sessions), lambda name: name)
    session = await backend.open()
    typo = await backend.add(session, user("My name is Alcie."))
    await backend.add(session, assistant("Nice to meet you, Alcie."))
    await backend.add(session, user("My name is Alice.", edit_of=typo.id))
    last = await backend.add(session, assistant("Nice to meet you, Alice."))
    outcome = await AutoMemory(sessions=sessions, memory=memory, extractor=extractor).process(session.key)
    assert outcome.status == "extracted" and outcome.last_seq == last.seq
    assert extractor.seen == ["My name is Alice.", "Nice to meet you, Alice."]
    remembered = [m.text for m in await memory.load(UserKey(app=APP, user_id="alice"), limit=10)]
    assert remembered == ["Name is Alice"]


async def test_auto_memory_learns_from_a_regenerated_question_once_its_new_turn_exists() -> None:
    sessions, memory, extractor = InMemorySessionService(), InMemoryMemoryService(), Recording()
    backend = Backend(sessions, InMemoryRecallIndex(sessions), lambda name: name)
    session = await backend.open()
    asked = await backend.add(session, user("We run Go in production."))
    await backend.add(session, assistant("Go in production: noted, and Rust too."))
    await backend.add(session, user("We run Go in production.", regenerates=asked.id))
    await backend.add(session, assistant("Go in production: noted."))
    await AutoMemory(sessions=sessions, memory=memory, extractor=extractor).process(session.key)
    assert extractor.seen == ["We run Go in production.", "Go in production: noted."]
