"""The API rate on Redis in one atomic call (issue 23: DRF's throttle read the whole log of
request times and wrote it back per request, pickled, in two round trips): the same rule as
DRF's (at most N requests in a sliding window, refused ones not counted, `Retry-After` from
the oldest), checked on a clock the test moves."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.core.cache import caches
from rest_framework.throttling import SimpleRateThrottle

from agentsite.api.throttling import UserRateThrottle

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="the cache is Redis only with REDIS_URL")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class User:
    is_authenticated = True

    def __init__(self, pk: int) -> None:
        self.pk = pk


class Request:
    META: dict[str, Any] = {}

    def __init__(self, pk: int) -> None:
        self.user = User(pk)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(UserRateThrottle, "timer", clock)
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "user", "3/min")
    caches["default"].clear()
    return clock


def ask(pk: int) -> tuple[bool, float | None]:
    throttle = UserRateThrottle()
    allowed = throttle.allow_request(Request(pk), None)
    return allowed, None if allowed else throttle.wait()


def test_the_window_slides_refusals_are_not_counted_and_the_wait_is_drfs(clock: Clock) -> None:
    answers = []
    for at in (0, 10, 20):
        clock.now = 1_000_000.0 + at
        answers.append(ask(7))
    assert answers == [(True, None)] * 3

    clock.now = 1_000_030.0
    allowed, wait = ask(7)
    assert not allowed and wait == pytest.approx(30.0)  # the oldest (t=0) leaves the window at t=60
    assert ask(8) == (True, None)  # another user's log is another

    clock.now = 1_000_060.5  # t=0 has left; the refusal at t=30 was never logged
    assert ask(7) == (True, None)
    allowed, wait = ask(7)
    assert not allowed and wait == pytest.approx(10.0 - 0.5)  # now t=10 is the oldest


def test_the_log_is_one_list_in_redis_and_expires_with_the_window(clock: Clock) -> None:
    ask(9)
    backend = caches["default"]
    key = backend.make_and_validate_key(f"ratelog:{UserRateThrottle().cache_format % {'scope': 'user', 'ident': 9}}")
    client = backend._cache.get_client(key)
    assert client.llen(key) == 1
    assert 0 < client.pttl(key) <= 60_000
    assert backend.get(f"throttle_user_{9}") is None  # DRF's pickled log is not kept


def test_an_unreachable_redis_lets_the_request_through_with_a_warning(
    clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agentsite.cache import SharedRedisCache

    def down(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(SharedRedisCache, "log_request", down)
    assert ask(7) == (True, None)
    assert "API rate limit not applied" in caplog.text
