"""A value computed from a text, remembered by the text (token counts, redactions).

A run sends the same texts at every model call (the instruction, the history, the tools'
schemas), and what is computed from a text never changes: the hot path should pay for a
text once, not once per call (issue 23). The memo is bounded by the characters of the
texts it keeps, the least recently used going first; a text longer than `max_text` is
computed each time rather than crowding out many shorter ones.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TextMemo(Generic[T]):
    """`compute(text)`, remembered; thread safe (`compute` runs outside the lock, so two
    threads may compute the same text once each; the first result is kept)."""

    def __init__(self, compute: Callable[[str], T], *, max_chars: int, max_text: int) -> None:
        self._compute = compute
        self.max_chars = max_chars
        self.max_text = max_text
        self._lock = threading.Lock()
        self._values: OrderedDict[str, T] = OrderedDict()
        self.chars = 0
        """Characters of the texts kept now (at most `max_chars`)."""

    def __call__(self, text: str) -> T:
        cacheable = len(text) <= self.max_text
        if cacheable:
            with self._lock:
                if text in self._values:
                    self._values.move_to_end(text)
                    return self._values[text]
        value = self._compute(text)
        if cacheable:
            with self._lock:
                if text not in self._values:
                    self._values[text] = value
                    self.chars += len(text)
                    while self.chars > self.max_chars:
                        old, _ = self._values.popitem(last=False)
                        self.chars -= len(old)
        return value

    def __len__(self) -> int:
        return len(self._values)
