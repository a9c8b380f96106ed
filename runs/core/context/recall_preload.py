"""Preload session recall for an agent (SPEC 5.4): the user's other sessions, searched once per
run for the new message, as an untrusted-context block in the request.

The search and the block's format live in `sessions_app.core.recall.preload_session_recall`;
this module holds the agent's setting and the two injections (system or user). Plain Python.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sessions_app.core.events import Message
from sessions_app.core.recall import MAX_TOP_K, preload_session_recall
from sessions_app.core.session import Session

logger = logging.getLogger(__name__)

RECALL_SERVICE = "recall"
"""The services key of the `RecallIndex` (the composition root puts one there)."""


@dataclass(frozen=True, kw_only=True)
class SessionRecallPreload:
    """An agent's preload-recall setting (SPEC 4.2 `PreloadSessionRecall`, 5.4).

    `max_results` 0 is off (the SPEC's default); N > 0 puts up to N matching events of the
    user's other sessions (at most `MAX_TOP_K`) into every request of a run. `min_score`
    defaults to the SPEC's 0: any event that shares a term with the message qualifies.
    """

    max_results: int = 0
    injection: Literal["system", "user"] = "system"
    min_score: float = 0.0

    def __post_init__(self) -> None:
        if self.max_results < 0:
            raise ValueError(f"max_results must be 0 (off) or more, got {self.max_results!r}")
        if self.injection not in ("system", "user"):
            raise ValueError(f"injection must be 'system' or 'user', got {self.injection!r}")
        if self.min_score < 0:
            raise ValueError(f"min_score must be 0 or more, got {self.min_score!r}")


async def recall_preload_block(
    setting: SessionRecallPreload | None, services: Mapping[str, Any], *, session: Session, message: str
) -> str | None:
    """The recall block for a run, or None: off, no recall service, empty message, no match,
    or a failed search (SPEC 5.4: errors are logged and the run goes on without the block)."""
    if setting is None or setting.max_results <= 0:
        return None
    index = services.get(RECALL_SERVICE)
    if index is None:
        return None
    try:
        return await preload_session_recall(
            index,
            session=session,
            message=message,
            max_results=min(setting.max_results, MAX_TOP_K),
            min_score=setting.min_score,
        )
    except Exception:  # a recall outage must not fail the user's run
        logger.warning("preload session recall failed for session %s", session.id, exc_info=True)
        return None


def with_user_block(messages: Sequence[Message], block: str, invocation_text: str) -> tuple[Message, ...]:
    """`messages` with `block` as a user message just before the invocation's message (the
    last user message with its text, else the last user message); unchanged when none."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        return tuple(messages)
    matching = [i for i in users if messages[i].content == invocation_text]
    at = (matching or users)[-1]
    return (*messages[:at], Message(role="user", content=block), *messages[at:])
