"""The summary locks across processes: one summariser per (session, filter key).

`RedisSummaryLock` when `REDIS_URL` is set: `SET key token NX PX ttl`, released by a
script that deletes the key only while it still holds our token (a lock that expired and
was taken by someone else is never released by us). `DatabaseSummaryLock` otherwise: the
Summary row (created if missing) is locked with `select_for_update` to claim a lease,
token and expiry on the row; the lease, not an open transaction, is held across the
summary, because a model call must never run inside a transaction (and the async calls
of one summary hop between threads, each with its own connection). Both leases expire
after `ttl_s`, so a worker that dies holding one blocks its session for that long at most;
the boundary guard of `advance_summary` keeps even an overlap after expiry harmless.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from sessions_app import models as orm
from sessions_app.backends import db_call
from sessions_app.core.events import new_id, utcnow
from sessions_app.core.session import SessionKey, SessionNotFoundError

DEFAULT_TTL_S = 120.0
"""Twice the job timeout (SPEC 3.2: 60 s)."""
POLL_S = 0.05

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


async def _wait_for(claim: Any, wait_s: float) -> str | None:
    deadline = time.monotonic() + wait_s
    while True:
        token = await claim()
        if token is not None:
            return token
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(POLL_S)


class RedisSummaryLock:
    """SET NX PX with a random token; a safe release (compare and delete, in one script)."""

    def __init__(self, url: str, *, ttl_s: float = DEFAULT_TTL_S, prefix: str = "agentsite:summary-lock") -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._release = self._client.register_script(_RELEASE)
        self.ttl_ms = int(ttl_s * 1000)
        self.prefix = prefix

    def name(self, key: SessionKey, filter_key: str) -> str:
        return f"{self.prefix}:{key.app}:{key.session_id}:{filter_key}"

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        name = self.name(key, filter_key)

        async def claim() -> str | None:
            token = new_id()
            taken = await asyncio.to_thread(self._client.set, name, token, nx=True, px=self.ttl_ms)
            return token if taken else None

        return await _wait_for(claim, wait_s)

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        await asyncio.to_thread(self._release, keys=[self.name(key, filter_key)], args=[token])


def _claim(session_id: str, filter_key: str, token: str, ttl_s: float) -> bool:
    now = utcnow()
    with transaction.atomic():
        row = orm.Summary.objects.select_for_update().filter(session_id=session_id, filter_key=filter_key).first()
        if row is None:
            if not orm.Session.objects.filter(id=session_id).exists():
                raise SessionNotFoundError(f"session {session_id!r} not found")
            try:
                with transaction.atomic():
                    # A summary row without text: only the lease holder until a summary lands.
                    orm.Summary.objects.create(
                        session_id=session_id,
                        filter_key=filter_key,
                        text="",
                        updated_at=now,
                        version=0,
                        lease_token=token,
                        lease_until=now + timedelta(seconds=ttl_s),
                    )
            except IntegrityError:
                return False  # created by a concurrent claimer: it holds the lease
            return True
        if row.lease_token and row.lease_until is not None and row.lease_until > now:
            return False
        orm.Summary.objects.filter(pk=row.pk).update(lease_token=token, lease_until=now + timedelta(seconds=ttl_s))
        return True


def _release(session_id: str, filter_key: str, token: str) -> None:
    orm.Summary.objects.filter(session_id=session_id, filter_key=filter_key, lease_token=token).update(
        lease_token="", lease_until=None
    )


class DatabaseSummaryLock:
    """A lease on the Summary row, claimed under `select_for_update` (see the module docstring)."""

    def __init__(self, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.ttl_s = ttl_s

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        async def claim() -> str | None:
            token = new_id()
            taken = await db_call(_claim)(key.session_id, filter_key, token, self.ttl_s)
            return token if taken else None

        return await _wait_for(claim, wait_s)

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        await db_call(_release)(key.session_id, filter_key, token)
