"""Issue 12, C3: session_load by seq, the way back for events a request announces as not
loaded, on both recall indexes (in memory and the ORM, SQLite or PostgreSQL)."""

from __future__ import annotations

import pytest

from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.recall import AnchorNotFoundError, session_load
from tests.sessions.test_recall_django import Backend, backend  # noqa: F401  (the parametrised fixture)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_session_load_by_seq_anchors_at_the_first_recallable_event_from_there(backend: Backend) -> None:  # noqa: F811
    calls = (ToolCall(id="c1", name="read", arguments="{}"),)
    session = await backend.session(
        "alice",
        [
            Event(author="user", message=Message(role="user", content="read the file")),
            Event(author="agent", message=Message(role="assistant", tool_calls=calls)),
            Event(
                author="agent", message=Message(role="tool", content="file body", tool_call_id="c1", tool_name="read")
            ),
            Event(author="agent", message=Message(role="assistant", content="done")),
        ],
    )
    loaded = await session_load(backend.index, session=session, seq=1, before=0, after=1)
    assert [m["content"] for m in loaded["messages"]] == ["read the file", "read: file body"]
    # seq 2 is the call message, which recall never returns: its result answers for it.
    loaded = await session_load(backend.index, session=session, seq=2, before=0, after=1)
    assert loaded["messages"][0]["tool_call_id"] == "c1"
    with pytest.raises(AnchorNotFoundError, match="seq 9"):
        await session_load(backend.index, session=session, seq=9)
    other = await backend.session("bob", [Event(author="user", message=Message(role="user", content="mine"))])
    with pytest.raises(AnchorNotFoundError):  # bob's session is not alice's to read
        await session_load(backend.index, session=session, session_id=other.id, seq=1)
