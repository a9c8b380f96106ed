"""Waiting for a condition instead of sleeping a fixed time: polls with a deadline, and
fails naming what did not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.01


async def until(condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """Return as soon as `condition()` is true; fail with `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(POLL_S)  # the poll interval of this wait


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """`until` for synchronous tests (the run then goes on in the run manager's thread)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(POLL_S)  # the poll interval of this wait


async def polled(
    fetch: Callable[[], Awaitable[T]], done: Callable[[T], object], what: str, timeout_s: float = 10.0
) -> T:
    """The first answer of `fetch()` (a request to the system under test) that `done` accepts;
    fail with `what` and the last answer after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done(answer := await fetch()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last answer: {answer!r:.300})")
        await asyncio.sleep(POLL_S)  # the poll interval of this wait
    return answer
