"""Builders for ledgers in governance tests: turns of user messages, tool rounds and answers.

`Ledger` assigns seqs itself (for pure projection tests); `Ledger.append_to` replays the
same events through a SessionService (which assigns its own, equal, seqs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sessions_app.core.events import (
    OBJECT_RUNNER_COMPLETION,
    OBJECT_TOOL_RESPONSE,
    Event,
    Message,
    ToolCall,
    new_id,
)
from sessions_app.core.session import Session, SessionService, Summary, SummaryBoundary

APP = "app"


def user(text: str) -> Event:
    return Event(author="user", message=Message(role="user", content=text))


def assistant(text: str) -> Event:
    return Event(author="agent", message=Message(role="assistant", content=text))


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> Event:
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))
    return Event(author="agent", message=Message(role="assistant", tool_calls=(call,)))


def tool_result(call_id: str, name: str, content: str) -> Event:
    return Event(
        author="agent",
        object=OBJECT_TOOL_RESPONSE,
        message=Message(role="tool", content=content, tool_call_id=call_id, tool_name=name),
    )


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(kw_only=True)
class Turn:
    ledger: Ledger
    invocation_id: str
    request_id: str

    def _add(self, event: Event) -> Event:
        return self.ledger.add(event.replace(invocation_id=self.invocation_id, request_id=self.request_id))

    def user(self, text: str) -> Event:
        return self._add(Event(author="user", message=Message(role="user", content=text)))

    def calls(self, *calls: tuple[str, dict[str, Any] | str, str]) -> Event:
        built = tuple(
            ToolCall(id=call_id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))
            for name, args, call_id in calls
        )
        return self._add(
            Event(
                author=self.ledger.agent,
                message=Message(role="assistant", tool_calls=built),
                finish_reason="tool_calls",
            )
        )

    def result(self, call_id: str, content: str, *, tool: str = "lookup", failed: bool = False) -> Event:
        return self._add(
            Event(
                author=self.ledger.agent,
                object=OBJECT_TOOL_RESPONSE,
                message=Message(role="tool", content=content, tool_call_id=call_id, tool_name=tool),
                extensions={"tool_error": True} if failed else {},
            )
        )

    def answer(self, text: str) -> Event:
        return self._add(
            Event(
                author=self.ledger.agent,
                message=Message(role="assistant", content=text),
                done=True,
                finish_reason="stop",
            )
        )

    def completion(self) -> Event:
        return self._add(Event(author=APP, object=OBJECT_RUNNER_COMPLETION, done=True))

    def tool_round(
        self, name: str, content: str, *, call_id: str | None = None, args: dict[str, Any] | None = None
    ) -> str:
        call_id = call_id or f"call_{new_id()[:8]}"
        self.calls((name, args or {}, call_id))
        self.result(call_id, content, tool=name)
        return call_id


@dataclass(kw_only=True)
class Ledger:
    filter_key: str = APP
    agent: str = "support"
    events: list[Event] = field(default_factory=list)

    def add(self, event: Event) -> Event:
        seq = len(self.events) + 1
        stamped = event.replace(
            seq=seq, filter_key=event.filter_key or self.filter_key, created_at=T0 + timedelta(seconds=seq)
        )
        self.events.append(stamped)
        return stamped

    def turn(self, *, invocation_id: str | None = None, request_id: str | None = None) -> Turn:
        invocation_id = invocation_id or f"inv-{new_id()[:8]}"
        return Turn(ledger=self, invocation_id=invocation_id, request_id=request_id or f"req-{invocation_id}")

    def simple_turn(self, question: str, answer: str, *, tool: tuple[str, str] | None = None) -> Turn:
        turn = self.turn()
        turn.user(question)
        if tool is not None:
            turn.tool_round(tool[0], tool[1])
        turn.answer(answer)
        turn.completion()
        return turn

    def session(self, *, summaries: Iterable[Summary] = ()) -> Session:
        return Session(
            app=APP,
            user_id="alice",
            id="s-1",
            events=list(self.events),
            summaries={s.filter_key: s for s in summaries},
            last_seq=len(self.events),
        )

    def summary(self, text: str, *, through: int, filter_key: str | None = None, version: int = 1) -> Summary:
        last = self.events[through - 1]
        return Summary(
            filter_key=self.filter_key if filter_key is None else filter_key,
            text=text,
            boundary=SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=through),
            version=version,
        )

    async def append_to(self, service: SessionService, session: Session) -> list[Event]:
        saved = []
        for event in self.events:
            saved.append(await service.append_event(session, event.replace(seq=None)))
        return saved


def roles(messages: Iterable[Message]) -> list[str]:
    return [m.role for m in messages]


def assert_tool_calls_paired(messages: list[Message]) -> None:
    """Every call is directly followed by its results, and every result follows its call."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.role != "tool", f"tool result without its call at {i}: {message!r}"
        if message.tool_calls:
            wanted = [c.id for c in message.tool_calls]
            got = [m.tool_call_id for m in messages[i + 1 : i + 1 + len(wanted)]]
            assert all(m.role == "tool" for m in messages[i + 1 : i + 1 + len(wanted)]), messages[
                i : i + 1 + len(wanted)
            ]
            assert sorted(got) == sorted(wanted), (wanted, got)
            i += 1 + len(wanted)
            continue
        i += 1
