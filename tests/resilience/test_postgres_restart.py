"""PostgreSQL restarts between two turns: the next turn works without restarting the web
process.

A private PostgreSQL cluster (never the shared server) is migrated and served by a real
Daphne process; a first REST run completes, the cluster is restarted with `pg_ctl -m fast`
(every connection the web process held is cut), and the next runs on the same session
complete, from the same process, with the ledger intact and contiguous.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.resilience.services import createdb, manage, private_postgres, require_services
from tests.support.daphne import live_daphne

pytestmark = [pytest.mark.integration]

TIMEOUT = 30


def test_the_next_turn_works_after_postgres_restarts(tmp_path: Path, django_db_setup: Any) -> None:
    # The cluster is private, but this is the PostgreSQL story: it runs in the services pass.
    require_services(postgres=True)
    with private_postgres(tmp_path) as cluster:
        createdb(cluster, "agentsite")
        env = {"DATABASE_URL": cluster.url("agentsite"), "AGENTSITE_MODEL": "offline"}
        if os.environ.get("REDIS_URL"):
            env["REDIS_URL"] = os.environ["REDIS_URL"]
        manage("migrate", "--noinput", env=env)
        token = manage("create_api_token", "--create-user", "alice", env=env).strip().splitlines()[-1]

        with live_daphne(tmp_path, env=env) as server:
            api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
            first = api.post("/api/runs/", json={"message": "What time is it in Tokyo?", "wait": True})
            assert first.status_code == 201 and first.json()["status"] == "completed", first.text
            session_id = first.json()["session_id"]

            cluster.restart()

            # Several turns: the web process holds a pool of database threads, each with a
            # connection the restart cut; every one of them must recover, not fail once.
            for turn in range(4):
                reply = api.post(
                    "/api/runs/", json={"message": f"And in Paris? ({turn})", "session_id": session_id, "wait": True}
                )
                assert reply.status_code == 201, f"turn {turn}: {reply.text}\n{server.output()[-3000:]}"
                assert reply.json()["status"] == "completed", f"turn {turn}: {reply.text}\n{server.output()[-3000:]}"
            assert server.process.poll() is None, "the web process must not have been restarted"

            events = api.get(f"/api/sessions/{session_id}/events/", params={"limit": 500}).json()["results"]
            seqs = [e["seq"] for e in events]
            assert seqs == list(range(1, len(events) + 1))
            assert len({e["id"] for e in events}) == len(events)
            assert sum(1 for e in events if e["role"] == "user") == 5
