"""Private PostgreSQL clusters and Redis servers that a fault test may stop and restart.

The shared PostgreSQL and Redis servers serve other test runs at the same time, so a test
that takes a server down takes down one of its own: a throw-away cluster (`initdb` in a
temporary folder, run as the `postgres` user because PostgreSQL refuses to run as root) or
a `redis-server` without persistence, each on a free loopback port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.daphne import LiveServer, free_port, live_daphne

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("AGENTSITE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def skip(reason: str) -> None:
    """Skip with the reason printed too (pytest's -q summary is easy to miss)."""
    print(f"SKIPPED: {reason}")
    pytest.skip(reason)


def require_services(*, postgres: bool = False, redis: bool = False) -> None:
    """Skip unless this pass runs on the shared PostgreSQL and/or Redis (the services pass)."""
    from django.conf import settings
    from django.db import connection

    if postgres and connection.vendor != "postgresql":
        skip(f"needs PostgreSQL: set DATABASE_URL=postgres://... (this pass runs on {connection.vendor})")
    if redis and not settings.REDIS_URL:
        skip("needs Redis and Celery workers: set REDIS_URL=redis://... (this pass has no broker)")


# -- PostgreSQL ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivatePostgres:
    data: Path
    port: int
    run_as: tuple[str, ...]

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [
                *self.run_as,
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.data.parent / "pg.log"),
                "-o",
                options,
                "-w",
                "-t",
                "30",
                *args,
            ],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        """A fast restart: every client connection is cut, as in a failover or an upgrade."""
        self._ctl("-m", "fast", "restart")

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop")


def _run_as_postgres() -> tuple[str, ...]:
    if os.geteuid() != 0:
        return ()
    runuser = shutil.which("runuser")
    if runuser is None:
        skip("PostgreSQL refuses to run as root and `runuser` is missing to drop to the postgres user")
    return (runuser, "-u", "postgres", "--")


@contextmanager
def private_postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    """A fresh PostgreSQL cluster on a free port, removed afterwards."""
    if not (PG_BIN / "initdb").exists():
        skip(f"no PostgreSQL server binaries under {PG_BIN} (set AGENTSITE_TEST_PG_BIN)")
    run_as = _run_as_postgres()
    if run_as:
        # Its own folder in the temp dir, not under pytest's: pytest sets its root back to
        # 0700 whenever another pytest process starts, and the postgres user then cannot
        # reach a cluster inside it (initdb failed so in CI while other suites ran).
        home = Path(tempfile.mkdtemp(prefix="agentsite-pg-"))
        home.chmod(0o700)
        shutil.chown(home, "postgres")
    else:
        home = tmp_path / "pg"
        home.mkdir()
    data = home / "data"
    done = subprocess.run(
        [*run_as, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # say why (a CalledProcessError alone hides initdb's reason)
        raise RuntimeError(f"initdb failed ({done.returncode}) in {data}: {done.stderr.strip() or done.stdout.strip()}")
    cluster = PrivatePostgres(data=data, port=free_port(), run_as=run_as)
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped (or never started)
        if run_as:
            shutil.rmtree(home, ignore_errors=True)


def createdb(cluster: PrivatePostgres, database: str) -> None:
    subprocess.run(
        [str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", database],
        check=True,
        capture_output=True,
    )


def manage(*args: str, env: Mapping[str, str]) -> str:
    """Run `manage.py` in a child process with these variables; its stdout."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


# -- web processes -------------------------------------------------------------------------------


def web_process(
    tmp_path: Path, *, env: Mapping[str, str], module: str | None = None, startup_s: float = 30.0
) -> AbstractContextManager[LiveServer]:
    """A web process for fault tests: `live_daphne`, optionally a patched Daphne module."""
    return live_daphne(tmp_path, env=env, module=module, startup_s=startup_s)


# -- Redis ----------------------------------------------------------------------------------------


@dataclass
class PrivateRedis:
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def kill(self) -> None:
        """SIGKILL: no goodbye to the clients, as when the host dies."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        skip("redis-server is not installed")
    server = PrivateRedis(port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.kill()
