"""Heartbeats and the reaper: no run stays `running` after its process died.

Each process beats for the runs it owns. The reaper marks `interrupted` every run whose
owner is gone: a process on this host that no longer exists (or an earlier incarnation of
this one), or any owner whose heartbeat is older than `stale_after_s`; and every run of its
own process that the runner neither runs nor is starting. The interrupted run's
ledger gets a completion event saying so, and the claim is a conditional update, so two
reapers never both act on one run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, Event, EventError, utcnow
from sessions_app.core.session import SessionKey

logger = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()
PROCESS_OWNER = f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str, *, me: str = PROCESS_OWNER) -> bool:
    """True when `owner` certainly no longer runs: only decidable for this host."""
    if not owner or owner == me:
        return False
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != HOSTNAME or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return True  # our pid, another boot token: an earlier incarnation of this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lifecycle:
    def __init__(
        self,
        runner: Runner,
        *,
        interval_s: float = 15.0,
        stale_after_s: float = 60.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.runner = runner
        self.interval_s = interval_s
        self.stale_after_s = stale_after_s
        self.clock = clock

    async def beat(self) -> None:
        await self.runner.run_store.heartbeat(self.runner.active_run_ids(), at=self.clock())

    async def reap(self) -> list[RunRecord]:
        """Interrupt the runs whose owner is gone; the records it interrupted."""
        now = self.clock()
        stale_before = now - timedelta(seconds=self.stale_after_s)
        reaped: list[RunRecord] = []
        for record in await self.runner.run_store.running():
            if record.id in self.runner.active_run_ids():
                continue
            last_sign = record.heartbeat_at or record.started_at or record.created_at
            # A run of ours that this runner neither runs nor is starting has no one to end it
            # (its record outlived a failure); the active list is read after the rows, so a
            # run that ended meanwhile is finished in the store and the claim below skips it.
            ours = record.owner == self.runner.owner
            dead = ours or owner_is_dead(record.owner, me=self.runner.owner)
            if not dead and last_sign >= stale_before:
                continue
            reason = (
                "this process no longer runs it"
                if ours
                else "its process ended"
                if dead
                else f"no heartbeat since {last_sign.isoformat()}"
            )
            interrupted = await self.runner.run_store.interrupt(record.id, at=now, reason=f"run interrupted: {reason}")
            if interrupted is None:
                continue  # another reaper (or the run itself) got there first
            await self._mark_ledger(interrupted)
            reaped.append(interrupted)
            logger.warning("run %s marked interrupted: %s", record.id, reason)
        return reaped

    async def _mark_ledger(self, record: RunRecord) -> None:
        key = SessionKey(app=record.app, user_id=record.user_id, session_id=record.session_id)
        session = await self.runner.session_service.get_session(key, event_limit=0)
        if session is None:
            return
        error = EventError(type="interrupted", message=(record.error or {}).get("message", "run interrupted"))
        await self.runner.session_service.append_event(
            session,
            Event(
                author=record.app,
                object=OBJECT_RUNNER_COMPLETION,
                done=True,
                request_id=record.request_id,
                error=error,
                extensions={"run_id": record.id, "status": "interrupted"},
            ),
        )

    async def run_forever(self) -> None:
        while True:
            try:
                await self.reap()
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("run heartbeat/reaper failed; trying again in %ss", self.interval_s)
            await asyncio.sleep(self.interval_s)
