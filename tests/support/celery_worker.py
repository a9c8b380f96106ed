"""Real Celery worker processes for integration tests: a solo worker on its own queue, over
the database and Redis its environment names, its output in a log file."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.processes import stop

__all__ = ["start_worker", "stop", "wait_ready"]

ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    *, queue: str, name: str, env: Mapping[str, str], log: Path, include: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """`celery -A agentsite worker` (solo pool) consuming `queue` as `name@<host>`; `include`:
    modules of tasks it would not import by itself (a test's probe task)."""
    command = [sys.executable, "-m", "celery", "-A", "agentsite", "worker", "--pool=solo", "-Q", queue]
    command += ["-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--loglevel=INFO"]
    for module in include:
        command += ["--include", module]
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=dict(env), stdout=out, stderr=subprocess.STDOUT)


def wait_ready(workers: Sequence[tuple[subprocess.Popen[bytes], Path]], timeout_s: float) -> None:
    """Until every worker logged that it is ready; RuntimeError, with the logs, when one
    exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not all("ready." in log.read_text(errors="replace") for _, log in workers):
        for process, log in workers:
            if process.poll() is not None:
                raise RuntimeError(f"a worker exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            logs = "\n".join(log.read_text(errors="replace") for _, log in workers)
            raise RuntimeError(f"workers not ready within {timeout_s} s:\n{logs}")
        time.sleep(0.2)
