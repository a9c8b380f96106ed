"""`make stack` through its balancer (issue 23, item 1): the CI smoke test.

`deploy/stack.py` (what `make stack` runs) starts HAProxy, two Daphne processes and two
Celery workers on free ports, on a database of its own on the PostgreSQL of DATABASE_URL
(`<name>_stack_smoke`, recreated) and on a private `redis-server`. Through the balancer: a
REST run with `wait`, a websocket stream of a run to its end, a Celery job (auto memory,
the offline extractor's rules) that lands; directly on the nodes: a run started on one web
process and cancelled through the other. Then SIGTERM stops every process.

The chat model is the local scripted OpenAI-compatible server (the cancelled run streams
slowly); summaries and memory extraction use the offline model, so the Celery job takes no
scripted answer. Skipped, with the reason, without haproxy or without DATABASE_URL and
REDIS_URL (the services pass).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from tests.resilience.services import private_redis, skip
from tests.support.daphne import free_port
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
READY_S = 90
TIMEOUT_S = 30
T = TypeVar("T")

REST_ANSWER = "The certificate of payments expired yesterday."
WS_ANSWER = "Renew it with the internal CA, then reload the proxy."


def wait_until(check: Callable[[], T | None], what: str, timeout_s: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def _database_url(name: str) -> str:
    base = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    return f"{base.rsplit('/', 1)[0]}/{name}"


def _recreate(database_url: str, *, create: bool = True) -> None:
    """Drop the database of `database_url` (a run before may have left it) and create it anew."""
    import psycopg
    from psycopg import sql

    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextmanager
def running_stack(env: dict[str, str], log: Path) -> Iterator[dict[str, int]]:
    """deploy/stack.py on free ports until READY; SIGTERM afterwards, every process gone."""
    ports = {"balancer": free_port(), "web1": free_port(), "web2": free_port(), "stats": free_port()}
    with log.open("w") as out:
        launcher = subprocess.Popen(
            [
                str(PYTHON),
                "deploy/stack.py",
                "--port",
                str(ports["balancer"]),
                "--web-ports",
                f"{ports['web1']},{ports['web2']}",
                "--stats-port",
                str(ports["stats"]),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            assert launcher.poll() is None, f"the stack exited {launcher.returncode}:\n{log.read_text()[-4000:]}"
            return "READY http://" in log.read_text()

        wait_until(ready, "the stack's READY line", READY_S)
        yield ports
    finally:
        launcher.send_signal(signal.SIGTERM)
        try:
            code = launcher.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            raise AssertionError(f"the stack did not stop on SIGTERM:\n{log.read_text()[-4000:]}") from None
        finally:
            # deploy/stack.py keeps its HAProxy configuration in var/stack/<port>/ (it has no
            # option for another folder); the port was this test's, so is the folder.
            shutil.rmtree(ROOT / "var" / "stack" / str(ports["balancer"]), ignore_errors=True)
            with suppress(OSError):
                (ROOT / "var" / "stack").rmdir()  # only when empty: a `make stack` of this checkout keeps its own
    assert code == 0, log.read_text()[-4000:]
    stopped = re.findall(r"system\s+\| (\w+)\.1 stopped", log.read_text())
    assert sorted(stopped) == ["balancer", "web1", "web2", "worker1", "worker2"], log.read_text()[-3000:]


def _ws_run(base: str, token: str, session_id: str, after_seq: int, message: str) -> tuple[str, str]:
    """A `run` frame on the session's socket through the balancer; (the answer streamed, the last frame's type)."""
    from websockets.sync.client import connect

    url = f"{base.replace('http', 'ws', 1)}/ws/sessions/{session_id}/?after_seq={after_seq}"
    with connect(
        url,
        origin=base,
        additional_headers={"Authorization": f"Bearer {token}"},  # type: ignore[arg-type]  # Origin is a str
        open_timeout=TIMEOUT_S,
    ) as ws:
        ws.send(json.dumps({"type": "run", "message": message}))
        text, run_id, answers = [], None, set()
        while True:
            frame = json.loads(ws.recv(timeout=TIMEOUT_S))
            if frame["type"] == "run.accepted":
                run_id = frame["run_id"]
            elif frame["type"] == "error":
                raise AssertionError(f"error frame {frame}")
            elif frame["type"] == "TEXT_MESSAGE_START" and frame.get("role") == "assistant":
                answers.add(frame["messageId"])
            elif frame["type"] == "TEXT_MESSAGE_CONTENT" and frame["messageId"] in answers:
                text.append(frame["delta"])
            elif frame["type"] in ("RUN_FINISHED", "RUN_ERROR") and frame.get("runId") == run_id:
                return "".join(text), frame["type"]


def test_the_stack_serves_runs_streams_cancels_and_jobs_through_its_balancer(tmp_path: Path) -> None:
    if shutil.which("haproxy") is None:
        skip("haproxy is not installed (`apt-get install -y haproxy`; .ci/run installs it)")
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")) or not os.environ.get(
        "REDIS_URL"
    ):
        skip(
            "needs PostgreSQL and Redis: set DATABASE_URL=postgres://... and REDIS_URL=redis://... (the services pass)"
        )
    database_url = _database_url(os.environ["DATABASE_URL"].rsplit("/", 1)[1].split("?")[0] + "_stack_smoke")
    _recreate(database_url)
    try:
        _smoke(tmp_path, database_url)
    finally:
        _recreate(database_url, create=False)


def _smoke(tmp_path: Path, database_url: str) -> None:
    slow = ServerStep.answer("word " * 400, chunk_size=5, chunk_delay_s=0.05)  # about 20 s unless cancelled
    with (
        ScriptedOpenAIServer(REST_ANSWER, ServerStep.answer(WS_ANSWER, chunk_size=6), slow) as model,
        private_redis() as redis_server,
    ):
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_server.url,
            "AGENTSITE_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-test",
            "AGENTSITE_MODEL_MAX_RETRIES": "0",
            "AGENTSITE_SUMMARY_MODEL": "offline",
            "AGENTSITE_MEMORY_AUTO": "1",
        }
        with running_stack(env, tmp_path / "stack.log") as ports:
            token = subprocess.run(
                [str(PYTHON), "manage.py", "create_api_token", "--create-user", "smoke"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()[-1]
            base = f"http://127.0.0.1:{ports['balancer']}"
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT_S) as http:
                # Both web processes answer through the balancer (HAProxy names the node).
                nodes = {http.get("/healthz").headers["X-Agentsite-Node"] for _ in range(6)}
                assert nodes == {"web1", "web2"}

                # A REST run with wait; its user message states a preference the memory job keeps.
                session_id = http.post("/api/sessions/", json={"title": "smoke"}).json()["id"]
                reply = http.post(
                    "/api/runs/",
                    json={
                        "session_id": session_id,
                        "message": "I prefer Go for backend services. Why does TLS fail?",
                        "wait": True,
                    },
                )
                assert reply.status_code == 201, reply.text
                assert (reply.json()["status"], reply.json()["answer"]) == ("completed", REST_ANSWER)

                # A websocket stream of the next run, to its end.
                last_seq = max(e["seq"] for e in http.get(f"/api/sessions/{session_id}/events/").json()["results"])
                streamed, end = _ws_run(base, token, session_id, last_seq, "How do I fix it?")
                assert (streamed, end) == (WS_ANSWER, "RUN_FINISHED")

                # A Celery job: auto memory extraction after the runs, by a worker.
                memories = wait_until(
                    lambda: [m for m in http.get("/api/memories/").json()["results"] if "Go" in m["memory"]],
                    "the memory job's memory",
                )
                assert len(memories) == 1

            # A run on web1, cancelled through web2: the cancel reaches its node by broadcast.
            web1 = httpx.Client(base_url=f"http://127.0.0.1:{ports['web1']}", headers=headers, timeout=TIMEOUT_S)
            web2 = httpx.Client(base_url=f"http://127.0.0.1:{ports['web2']}", headers=headers, timeout=TIMEOUT_S)
            with web1, web2:
                run = web1.post("/api/runs/", json={"message": "Talk for a long while"}).json()
                wait_until(lambda: len(model.requests) == 3, "the slow run's model call")
                cancelled = web2.post(f"/api/runs/{run['id']}/cancel/")
                assert cancelled.status_code in (200, 202), cancelled.text
                ended = wait_until(
                    lambda: (r := web2.get(f"/api/runs/{run['id']}/").json())["status"] != "running" and r,
                    "the cancelled run's end",
                )
                assert ended["status"] == "cancelled"
                model.assert_consumed()
