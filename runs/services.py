"""Writes on runs outside a request's own run (the Runner starts and ends them)."""

from __future__ import annotations

import time

from agentsite.runtime import run_manager
from runs import models as orm
from runs.fanout import request_cancel

_LIVE = ("queued", "running")
STOP_WAIT_S = 5.0
"""How long stopping a session's runs waits for their ends (a cancel ends a run within a
second, SPEC 1.9; a run of a dead process stays live until a reaper takes it)."""


def session_runs_stop(*, session_id: str, timeout_s: float = STOP_WAIT_S) -> list[str]:
    """Cancel the session's live runs, in whichever process runs each, and wait until they
    have ended (at most `timeout_s`); the ids of the runs it cancelled."""
    live = list(orm.Run.objects.filter(session_id=session_id, status__in=_LIVE).values_list("id", flat=True))
    if not live:
        return []
    manager = run_manager()
    deadline = time.monotonic() + timeout_s
    for run_id in live:
        manager.call(lambda runner, run_id=run_id: request_cancel(runner, run_id))
    for run_id in live:
        # A run of this process: until its task ends; another's: its stored record at once.
        manager.wait(run_id, timeout=max(0.0, deadline - time.monotonic()))
    while orm.Run.objects.filter(pk__in=live, status__in=_LIVE).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return live
