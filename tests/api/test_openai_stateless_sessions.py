"""Issue 25, item 5: a stateless /v1 client (LangChain, the Agents SDK) resends its whole chat
without `X-Session-Id`; the session whose ledger already holds that chat is continued (one
session, each turn stored once), found by a fingerprint in one indexed query. Another user's
session, an edited history or a session that grew since never match."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.core.context.fingerprint import conversation_after, history_fingerprint
from runs.core.llm.base import Model
from sessions_app import fingerprints
from sessions_app.core.events import Message
from tests.support.openai_asgi import agents_on, client_for, sessions_of, stored_events
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = {"role": "system", "content": "Be brief."}


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


async def _chat(client: Any, messages: list[dict[str, Any]], *, stream: bool = False) -> tuple[str, Any]:
    """One call as a stateless client makes it; the answer's text and the response headers."""
    if stream:
        async with client.chat.completions.with_streaming_response.create(
            model="support", messages=messages, stream=True
        ) as raw:
            text = "".join([c.choices[0].delta.content or "" async for c in await raw.parse() if c.choices])
            return text, raw.headers
    raw = await client.chat.completions.with_raw_response.create(model="support", messages=messages)
    return raw.parse().choices[0].message.content, raw.headers


def _texts(events: list[Any], role: str) -> list[str]:
    return [e.text for e in events if e.role == role and not e.partial]


async def test_three_calls_resending_a_growing_history_make_one_session_holding_each_turn_once(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.", "Behind pgbouncer.", "Yes, both.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    chat: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Which port does staging use?"}]
    answer, first = await _chat(client, chat)
    assert "X-Session-Match" not in first
    chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And what sits in front?"}]
    answer, second = await _chat(client, chat, stream=True)  # a streamed answer is remembered too
    chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Did I get both right?"}]
    _, third = await _chat(client, chat)
    openai_server.assert_consumed()

    session = first["X-Session-Id"]
    assert second["X-Session-Id"] == third["X-Session-Id"] == session
    assert second["X-Session-Match"] == third["X-Session-Match"] == "history"
    assert await sessions_of(alice) == [session]
    stored = await stored_events(session)
    # Only the first call's system message was seeded; nothing was seeded again.
    assert [e.text for e in stored if e.extensions.get("seed")] == ["Be brief."]
    assert _texts(stored, "user") == [
        "Which port does staging use?",
        "And what sits in front?",
        "Did I get both right?",
    ]
    assert _texts(stored, "assistant") == ["Port 6432.", "Behind pgbouncer.", "Yes, both."]
    # The upstream's last request holds the chat once, from the ledger.
    sent = [(m["role"], m["content"]) for m in openai_server.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == [(m["role"], m["content"]) for m in chat if m["role"] != "system"]


async def test_another_user_resending_the_same_history_gets_a_session_of_their_own(
    alice: Any, bob: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.", "Behind pgbouncer.")
    agents_on(openai_server, use_model)
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Which port does staging use?"}]
    answer, first = await _chat(await client_for(alice), chat)

    chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And what sits in front?"}]
    _, theirs = await _chat(await client_for(bob), chat)
    openai_server.assert_consumed()

    assert "X-Session-Match" not in theirs
    assert await sessions_of(bob) == [theirs["X-Session-Id"]] != [first["X-Session-Id"]]
    assert _texts(await stored_events(first["X-Session-Id"]), "user") == ["Which port does staging use?"]
    seeded = [e for e in await stored_events(theirs["X-Session-Id"]) if e.extensions.get("seed")]
    assert [e.text for e in seeded] == ["Which port does staging use?", "Port 6432."]


async def test_a_history_with_an_edited_earlier_message_starts_a_new_session(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.", "Port 5432 then.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Which port does staging use?"}]
    answer, first = await _chat(client, chat)

    edited = [
        {"role": "user", "content": "Which port does production use?"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Sure?"},
    ]
    _, diverged = await _chat(client, edited)
    openai_server.assert_consumed()

    assert "X-Session-Match" not in diverged
    assert diverged["X-Session-Id"] != first["X-Session-Id"]
    assert sorted(await sessions_of(alice)) == sorted([first["X-Session-Id"], diverged["X-Session-Id"]])
    assert _texts(await stored_events(first["X-Session-Id"]), "user") == ["Which port does staging use?"]


async def test_a_session_continued_by_x_session_id_works_as_before_and_is_not_matched_by_a_stale_history(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.", "Behind pgbouncer.", "Fresh start.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Which port does staging use?"}]
    answer, first = await _chat(client, chat)
    session = first["X-Session-Id"]

    named = await client_for(alice, **{"X-Session-Id": session})
    _, continued = await _chat(named, [{"role": "user", "content": "And what sits in front?"}])
    assert continued["X-Session-Id"] == session and "X-Session-Match" not in continued
    assert _texts(await stored_events(session), "user") == ["Which port does staging use?", "And what sits in front?"]

    # The session grew past the chat the stateless client holds: that chat no longer matches.
    stale = [*chat, {"role": "assistant", "content": answer}, {"role": "user", "content": "Again?"}]
    _, fresh = await _chat(client, stale)
    openai_server.assert_consumed()
    assert fresh["X-Session-Id"] != session and "X-Session-Match" not in fresh


async def test_the_lookup_is_one_statement(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.")
    agents_on(openai_server, use_model)
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Which port does staging use?"}]
    answer, first = await _chat(await client_for(alice), chat)
    held = conversation_after([Message(role="user", content=chat[0]["content"])], answer)

    @sync_to_async
    def look_up() -> tuple[Any, int]:
        with CaptureQueriesContext(connection) as queries:
            match = fingerprints.session_of_history(user=alice, fingerprint=history_fingerprint("support", held))
        return match, len(queries)

    match, statements = await look_up()
    assert match is not None and match.session_id == first["X-Session-Id"] and not match.ambiguous
    assert statements == 1


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, from the client's own service.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


async def test_a_stateless_client_answering_its_tool_call_continues_the_session_waiting_on_it(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        ServerStep.calls(("get_weather", {"city": "Paris"}, "call_p1"), text="Checking."), "Sunny, 18C."
    )
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    question = {"role": "user", "content": "What is the weather in Paris?"}

    raw = await client.chat.completions.with_raw_response.create(
        model="support", messages=[question], tools=[WEATHER_TOOL]
    )  # type: ignore[list-item]
    message = raw.parse().choices[0].message
    assert message.tool_calls is not None
    resent = [
        question,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_p1", "content": "sunny, 18C"},
    ]
    answered = await client.chat.completions.with_raw_response.create(
        model="support", messages=resent, tools=[WEATHER_TOOL]
    )  # type: ignore[arg-type]
    assert answered.parse().choices[0].message.content == "Sunny, 18C."
    openai_server.assert_consumed()

    session = raw.headers["X-Session-Id"]
    assert answered.headers["X-Session-Id"] == session and answered.headers["X-Session-Match"] == "history"
    stored = await stored_events(session)
    assert not any(e.extensions.get("seed") for e in stored)
    assert [e.text for e in stored if e.is_tool_result] == ["sunny, 18C"]  # the waiting call's result, once
    assert sum(len(e.message.tool_calls) for e in stored if e.is_tool_call and e.message is not None) == 1


async def test_when_two_sessions_hold_the_history_the_most_recent_is_continued_and_the_header_says_so(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Port 6432.", "Port 6432.", "Behind pgbouncer.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    chat: list[dict[str, Any]] = [{"role": "user", "content": "Which port does staging use?"}]
    _, older = await _chat(client, chat)
    answer, newer = await _chat(client, chat)  # the same question again: a second session, same chat

    chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And what sits in front?"}]
    _, continued = await _chat(client, chat)
    openai_server.assert_consumed()
    assert older["X-Session-Id"] != newer["X-Session-Id"]
    assert continued["X-Session-Id"] == newer["X-Session-Id"]
    assert continued["X-Session-Match"] == "history-ambiguous"
