"""A real Daphne server over the pytest-django test database, for integration tests.

The server runs `agentsite.asgi:application` in a subprocess on a free loopback port,
pointed at the very database the test sees (SQLite file or PostgreSQL test database), so
HTTP, websocket and protocol clients exercise the whole stack as deployed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import stop

ROOT = Path(__file__).resolve().parents[2]
DAPHNE = Path(sys.executable).with_name("daphne")


@dataclass(frozen=True)
class LiveServer:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url_for_tests() -> str:
    """The URL of the database the current test sees (its test database)."""
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(settings['NAME']).resolve()}"
    if connection.vendor == "postgresql":
        auth = settings["USER"] + (f":{settings['PASSWORD']}" if settings["PASSWORD"] else "")
        return f"postgres://{auth}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
    raise RuntimeError(f"no live-server support for {connection.vendor!r}")


@contextmanager
def live_daphne(
    tmp_path: Path, *, env: Mapping[str, str] | None = None, startup_s: float = 30.0, module: str | None = None
) -> Iterator[LiveServer]:
    """Start Daphne against the test database (through `python -m module` for a patched
    one); stop it (and show its log on failure) after, also when the test killed it."""
    port = free_port()
    log = tmp_path / f"daphne-{port}.log"
    child_env: dict[str, Any] = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentsite.settings",
        "DATABASE_URL": database_url_for_tests(),
        "AGENTSITE_MODEL": "offline",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            # A loaded CI machine can take longer than Daphne's 5 s to accept a handshake
            # (a cold process authenticating its first socket); the tests are not about that.
            [
                *([sys.executable, "-m", module] if module else [str(DAPHNE)]),
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "--websocket_connect_timeout",
                "30",
                "agentsite.asgi:application",
            ],
            cwd=ROOT,
            env=child_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(host="127.0.0.1", port=port, process=process, log=log)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited with {process.returncode}:\n{server.output()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daphne did not listen within {startup_s}s:\n{server.output()}") from None
                time.sleep(0.1)
        yield server
    finally:
        stop(process, grace_s=10)
