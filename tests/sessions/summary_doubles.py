"""The summarizer and summary-model doubles and ledger helpers of the rolling-summary tests
(tests/sessions/test_summary*.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessions_app.core.events import Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, Summary
from sessions_app.core.summary import SummaryRequest, SummaryResult
from tests.sessions.ledger_builders import APP, Ledger


@dataclass
class RecordingSummarizer:
    """Answers from a script (text, an exception, or a SummaryResult) and records requests."""

    answers: list[Any] = field(default_factory=lambda: ["summary"])
    requests: list[SummaryRequest] = field(default_factory=list)
    name: str = "recording"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, SummaryResult):
            return answer
        return SummaryResult(text=answer)


@dataclass
class FakeSummaryModel:
    """A SummaryModel with a script of answers (text or exception) that records requests."""

    answers: list[Any] = field(default_factory=lambda: ["model summary"])
    window: int = 8192
    requests: list[tuple[list[Message], tuple[Any, ...]]] = field(default_factory=list)

    @property
    def context_window(self) -> int:
        return self.window

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        self.requests.append((list(messages), tuple(tools)))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class ContextLengthError(Exception):
    code = "context_length_exceeded"


async def stored(ledger: Ledger) -> tuple[InMemorySessionService, Session]:
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await ledger.append_to(service, session)
    return service, session


def two_turns() -> Ledger:
    ledger = Ledger()
    ledger.simple_turn("Is checkout slow?", "Yes, 3 timeouts.", tool=("search_logs", '{"timeouts": 3}'))
    ledger.simple_turn("And the ticket?", "INC-7 is open.")
    return ledger


async def summary(service: InMemorySessionService, session: Session, key: str = APP) -> Summary | None:
    return await service.get_summary(session.key, filter_key=key)
