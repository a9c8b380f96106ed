"""What the live-stack benchmarks (`stream.py`, `load.py`) share: a bench database on the
local PostgreSQL, its own Redis database, `manage.py` and Daphne as child processes, or the
whole production topology (`balanced`: what `make stack` runs, HAProxy in front of the web
processes), and the machine, date and targets every result file records."""

from __future__ import annotations

import datetime
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True, kw_only=True)
class Stack:
    """A bench's PostgreSQL database (dropped and recreated) and Redis database (flushed)."""

    db_name: str
    redis_db: int
    extra_env: tuple[tuple[str, str], ...] = ()

    @property
    def database_url(self) -> str:
        return f"postgres://postgres@127.0.0.1:5432/{self.db_name}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:6379/{self.redis_db}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "AGENTSITE_MODEL": "offline",
            "PYTHONUNBUFFERED": "1",
            # The API rate counts live in the shared cache database (1): a prefix of the bench's
            # own keeps its users (pk 1, 2, ...) apart from other databases' users of those pks.
            "AGENTSITE_CACHE_KEY_PREFIX": f"bench-{self.db_name}",
            **dict(self.extra_env),
        }

    def reset(self) -> str | None:
        """Recreate the database and flush the Redis database; what is wrong when a service
        does not answer (the bench then skips), else None."""
        try:
            with socket.create_connection(("127.0.0.1", 6379), timeout=2) as s:
                s.sendall(b"PING\r\n")
                if not s.recv(16).startswith(b"+PONG"):
                    return "Redis did not answer PING on 127.0.0.1:6379"
        except OSError as exc:
            return f"Redis did not answer on 127.0.0.1:6379: {exc}"
        try:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {self.db_name} WITH (FORCE)")
                conn.execute(f"CREATE DATABASE {self.db_name}")
        except Exception as exc:
            return f"PostgreSQL did not answer: {exc}"
        import redis

        redis.Redis.from_url(self.redis_url).flushdb()  # the bench's own database number
        return None

    def manage(self, *args: str, timeout_s: float = 600) -> str:
        out = subprocess.run(
            [str(PYTHON), "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
        return out.stdout

    def daphne(self, port: int, log: Path) -> subprocess.Popen[bytes]:
        """Daphne on `port` in its own process group (kill it with `os.killpg`)."""
        with log.open("wb") as out:
            return subprocess.Popen(
                # As docs/operations.md advises: under load a handshake can wait longer than
                # Daphne's default of 5 s for a database thread, and is then dropped unanswered.
                [
                    str(BIN / "daphne"),
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "--websocket_connect_timeout",
                    "30",
                    "agentsite.asgi:application",
                ],
                cwd=ROOT,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Wait until Daphne answers `/healthz`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                resp.read()
                return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError("daphne did not answer /healthz")


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) by nearest rank, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def process_cpu_s(pid: int, *, reaped_children: bool = False) -> float | None:
    """CPU seconds (user + system) process `pid` has used so far, with its reaped children's
    when asked; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the name: state is field 3, utime 14, stime 15, cutime 16, cstime 17 (1-based).
    end = 15 if reaped_children else 13
    return round(sum(int(f) for f in fields[11:end]) / os.sysconf("SC_CLK_TCK"), 2)


def _stat_fields(pid: str) -> list[str] | None:
    try:
        return (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def services_cpu_s() -> dict[str, float]:
    """CPU seconds PostgreSQL and Redis have used so far, every process of each: a server's
    own (utime + stime) and its reaped children's (cutime + cstime: PostgreSQL's backends
    that have exited), plus its live children's own. Read before and after a run and take
    the difference: a backend that exits in between moves from one term to the other."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {"postgres": "PostgreSQL", "redis-server": "Redis"}
    rows: dict[str, tuple[str, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in names and (fields := _stat_fields(entry.name)) is not None:
            rows[entry.name] = (names[comm], fields)
    used = dict.fromkeys(names.values(), 0.0)
    for name, fields in rows.values():
        # After the name: ppid is field 4; utime 14, stime 15, cutime 16, cstime 17 (1-based).
        served_by_parent = fields[1] in rows
        end = 13 if served_by_parent else 15  # a server's children are counted by themselves
        used[name] += sum(int(f) for f in fields[11:end]) / tick
    return {name: round(seconds, 2) for name, seconds in used.items()}


def machine_cpu_s() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far, all cores (/proc/stat): busy is
    user, nice, system, irq, softirq and steal; idle is idle and iowait."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / tick, (idle + iowait) / tick


@dataclass(frozen=True, kw_only=True)
class MachineCpu:
    """Where the whole machine's CPU went during a run, per turn: each named process (the
    stack's and the bench client's), PostgreSQL, Redis, and the rest of the machine; and
    what that cost allows: at most `cores` x 1,000 / (busy ms per turn) turns per second."""

    wall_s: float
    busy_s: float
    idle_s: float
    by_part_s: dict[str, float]
    turns: int

    @property
    def busy_ms_per_turn(self) -> float:
        return 1000 * self.busy_s / self.turns if self.turns else 0.0

    @property
    def busy_share(self) -> float:
        total = self.busy_s + self.idle_s
        return self.busy_s / total if total else 0.0

    def capacity_turns_per_s(self, cores: int | None = None) -> float:
        """Turns per second the machine could do at this CPU per turn with every core busy."""
        n = cores or os.cpu_count() or 1
        return n * 1000 / self.busy_ms_per_turn if self.busy_ms_per_turn else 0.0

    def to_dict(self) -> dict[str, Any]:
        parts = {name: round(1000 * s / self.turns, 1) for name, s in self.by_part_s.items()} if self.turns else {}
        parts["rest of the machine"] = round(self.busy_ms_per_turn - sum(parts.values()), 1)
        return {
            "busy_core_s": round(self.busy_s, 1),
            "idle_core_s": round(self.idle_s, 1),
            "busy_share": round(self.busy_share, 3),
            "busy_ms_per_turn": round(self.busy_ms_per_turn, 1),
            "ms_per_turn_by_part": parts,
            "capacity_turns_per_s": round(self.capacity_turns_per_s(), 1),
        }

    def line(self) -> str:
        parts = ", ".join(f"{name} {ms}" for name, ms in self.to_dict()["ms_per_turn_by_part"].items())
        return (
            f"machine CPU per turn {self.busy_ms_per_turn:.1f} ms ({parts}); the {os.cpu_count()} cores were "
            f"{100 * self.busy_share:.0f}% busy; at this cost they do at most {self.capacity_turns_per_s():.1f} turns/s"
        )


@dataclass(frozen=True)
class RunningStack:
    """A started `make stack`: the balancer's URL and where honcho logs."""

    url: str
    log: Path

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds (user + system) each process of the stack has used so far, by honcho's
        name for it (`web1`, `worker1`, `balancer`, ...); a worker's pool children included
        once they are reaped, so read before and after and take the difference."""
        pids = dict(re.findall(r"\| (\w+)\.1 started \(pid=(\d+)\)", self.log.read_text()))
        used: dict[str, float] = {}
        for name, pid in pids.items():
            seconds = process_cpu_s(int(pid), reaped_children=True)
            if seconds is not None:
                used[name] = seconds
        for child in _children_cpu(pids):
            used[child[0]] = round(used.get(child[0], 0.0) + child[1], 2)
        return used


def _children_cpu(pids: dict[str, str]) -> list[tuple[str, float]]:
    """The CPU seconds of live children of the named processes (Celery's pool processes)."""
    parents = {pid: name for name, pid in pids.items()}
    tick = os.sysconf("SC_CLK_TCK")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] in parents:  # field 4, the parent pid
            found.append((parents[fields[1]], sum(int(f) for f in fields[11:13]) / tick))
    return found


@contextmanager
def balanced(stack: Stack, *, web: int, log: Path, ready_timeout_s: float = 180.0) -> Iterator[RunningStack]:
    """The production topology on this bench's database and Redis database, on free ports:
    `deploy/stack.py` (what `make stack` runs: HAProxy in front of `web` Daphne processes,
    two Celery workers, under honcho). Yields it running; stops every process after. The
    database must be migrated already."""
    ports = [free_port() for _ in range(4)]
    env = {
        **stack.env(),
        "AGENTSITE_STACK_ACCESS_LOG": "/dev/null",  # a log line per request costs CPU
        # Each thread keeps a PostgreSQL connection: 2 x (8 + 16) with the defaults, beside
        # other test runs, overran the shared server's max_connections of 100 here. A REST
        # wait no longer holds a view thread (runs/surfaces/rest_wait.py), so 8 are plenty.
        "AGENTSITE_VIEW_THREADS": os.environ.get("AGENTSITE_VIEW_THREADS", "8"),
    }
    with log.open("w") as out:
        launcher = subprocess.Popen(
            [
                str(PYTHON),
                "deploy/stack.py",
                "--port",
                str(ports[0]),
                "--web",
                str(web),
                "--web-ports",
                f"{ports[1]},{ports[2]}",
                "--stats-port",
                str(ports[3]),
                "--no-migrate",
                "--ready-timeout",
                str(ready_timeout_s),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + ready_timeout_s + 30
        while "READY http://" not in log.read_text():
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stack did not come up; see {log}")
            time.sleep(0.3)
        yield RunningStack(url=f"http://127.0.0.1:{ports[0]}", log=log)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(45)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)


def topology(*, web: int, balancer: bool) -> str:
    """How the bench's server side was deployed, for the result file."""
    front = f"HAProxy in front of {web} Daphne process{'es' if web > 1 else ''}" if balancer else "1 Daphne process"
    return f"{front}, 2 Celery workers, PostgreSQL and Redis on loopback, offline model"


def machine() -> dict[str, Any]:
    """The machine and the moment a result was measured (the load of a shared machine included)."""
    load = os.getloadavg()
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_at_start": [round(x, 2) for x in load],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


@dataclass(frozen=True, kw_only=True)
class Target:
    """One row of issue 23's targets table, as measured."""

    measure: str
    target: str
    value: str
    met: bool | None  # None: not measured in this run
    note: str = ""

    @property
    def verdict(self) -> Literal["MET", "MISSED", "NOT MEASURED"]:
        return "NOT MEASURED" if self.met is None else "MET" if self.met else "MISSED"

    def line(self) -> str:
        return f"  {self.verdict:<6} {self.measure}: {self.value} (target {self.target}){f'; {self.note}' if self.note else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "measure": self.measure,
            "target": self.target,
            "value": self.value,
            "verdict": self.verdict,
            "note": self.note,
        }
