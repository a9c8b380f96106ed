"""`make stack`: the production topology of docs/operations.md on this machine, in one command.

HAProxy (Debian's `haproxy`) in front of two Daphne processes, two Celery workers, on the
PostgreSQL and Redis of `DATABASE_URL` / `REDIS_URL` (default: the local services,
database `agentsite`, Redis database 0), run by honcho from the repository's `Procfile`.
The balancer's configuration is `deploy/haproxy.cfg` with the ports filled in, written
under `var/stack/<port>/`.

Before it says READY it migrates the database, then waits until every web process answers
`/healthz` directly, the balancer answers it too, HAProxy's checks see every web process
up and every worker logged that it is ready. Ctrl-C (SIGINT) or SIGTERM stops everything:
honcho terminates each process group and kills what is left after 5 s. When any process
exits, honcho stops the others and this command exits with a non-zero status.

    python deploy/stack.py [--host 127.0.0.1] [--port 8000] [--web 2] [--web-ports 8001,8002]
                           [--stats-port 8003] [--no-migrate] [--demo] [--ready-timeout 120]

The CI smoke test (tests/integration/test_stack_smoke.py) and the benches' `--stack`
option start it the same way on free ports.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from string import Template
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/agentsite"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# The Procfile's web and worker entries: `--web 1` starts web1 only.
MAX_WEB = 2
WORKERS = 2
READY_LINE = "READY"
# Celery logs "<nodename> ready." at INFO once it consumes (nodename from the Procfile's -n).
WORKER_READY = re.compile(r"\b(worker\d+)\.\d+@\S+ ready\.")

sys.path.insert(0, str(ROOT))
from agentsite.portcheck import port_problem  # noqa: E402  (the checkout's own module, no Django)


class StackError(Exception):
    """The stack cannot start; the message says why and what to do."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"), help="where the balancer listens")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")), help="the balancer's port")
    parser.add_argument(
        "--web", type=int, default=MAX_WEB, choices=range(1, MAX_WEB + 1), help="web processes behind the balancer"
    )
    parser.add_argument(
        "--web-ports",
        default="",
        help="comma-separated ports of the web processes (default: the balancer's port + 1, + 2)",
    )
    parser.add_argument("--stats-port", type=int, default=0, help="HAProxy's stats page (default: port + 3)")
    parser.add_argument("--no-migrate", action="store_true", help="skip `manage.py migrate`")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="create the demo user and print how to log in (`manage.py bootstrap_demo`, as `make run` does)",
    )
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="seconds to wait for every process")
    return parser.parse_args(argv)


def stack_env(args: argparse.Namespace, web_ports: list[int], state_dir: Path) -> dict[str, str]:
    """The environment of every process: the caller's, the services' URLs defaulted, the ports."""
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    env.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    env["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env["AGENTSITE_STACK_PORT"] = str(args.port)
    env["AGENTSITE_STACK_DIR"] = str(state_dir)
    for index, port in enumerate(web_ports, start=1):
        env[f"AGENTSITE_WEB{index}_PORT"] = str(port)
    return env


def write_haproxy_config(*, state_dir: Path, host: str, port: int, web_ports: list[int], stats_port: int) -> Path:
    """deploy/haproxy.cfg with the balancer's address, one checked server line per web process
    and the same process again as an unchecked backup (`open-webN`, used only while every
    checked one is down: the balancer fails open)."""
    template = Template((ROOT / "deploy" / "haproxy.cfg").read_text())
    nodes = list(enumerate(web_ports, start=1))
    servers = "\n".join(
        [f"    server web{i} 127.0.0.1:{p}" for i, p in nodes]
        + [f"    server open-web{i} 127.0.0.1:{p} backup no-check" for i, p in nodes]
    )
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    path = state_dir / "haproxy.cfg"
    path.write_text(
        template.substitute(
            bind=bind, servers=servers, stats_bind=f"127.0.0.1:{stats_port}", errors=ROOT / "deploy" / "errors"
        )
    )
    return path


def ensure_database(database_url: str) -> None:
    """Create the PostgreSQL database of `database_url` when it is missing (a fresh machine)."""
    if not database_url.startswith(("postgres://", "postgresql://", "pgsql://")):
        raise StackError(
            f"DATABASE_URL must be PostgreSQL for the stack (several processes share it), got {database_url!r}"
        )
    import psycopg
    from psycopg import sql

    url = database_url.replace("pgsql://", "postgresql://", 1).replace("postgres://", "postgresql://", 1)
    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"stack: created database {name!r}", flush=True)
    except psycopg.OperationalError as exc:
        raise StackError(f"PostgreSQL at DATABASE_URL does not answer: {exc}".strip()) from None


def check_redis(redis_url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(redis_url, socket_timeout=3).ping()
    except redis.RedisError as exc:
        raise StackError(f"Redis at REDIS_URL={redis_url!r} does not answer: {exc}") from None


def local_url(host: str, port: int) -> str:
    """Where this machine reaches a server listening on host:port."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # listening everywhere, reachable on loopback
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


def servers_up(stats_port: int) -> dict[str, str]:
    """HAProxy's view of each web process (its stats page as CSV): server name -> status."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stats_port}/;csv", timeout=3) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    return {
        row["svname"]: row["status"] for row in rows if row.get("pxname") == "web" and row["svname"].startswith("web")
    }


class Stack:
    """honcho running the Procfile's chosen entries; its output echoed and watched for readiness."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        ports = [int(p) for p in args.web_ports.split(",") if p] or [args.port + i for i in range(1, MAX_WEB + 1)]
        if len(ports) < args.web:
            raise StackError(f"--web {args.web} needs {args.web} --web-ports, got {args.web_ports!r}")
        self.web_ports = ports[: args.web]
        self.stats_port = args.stats_port or args.port + MAX_WEB + 1
        self.state_dir = ROOT / "var" / "stack" / str(args.port)
        self.ready_workers: set[str] = set()
        self.process: subprocess.Popen[str] | None = None
        self.env: dict[str, str] = {}

    def preflight(self) -> dict[str, str]:
        if shutil.which("haproxy") is None:
            raise StackError("haproxy is not installed: `apt-get install -y haproxy` (Debian's package)")
        for host, port in [
            (self.args.host, self.args.port),
            *(("127.0.0.1", p) for p in (*self.web_ports, self.stats_port)),
        ]:
            problem = port_problem(host, port)
            if problem is not None:
                raise StackError(
                    f"{problem} (stack ports: balancer {self.args.port}, web {self.web_ports}, "
                    f"stats {self.stats_port}; choose others with --port / --web-ports / --stats-port)"
                )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = self.env = stack_env(self.args, self.web_ports, self.state_dir)
        ensure_database(env["DATABASE_URL"])
        check_redis(env["REDIS_URL"])
        write_haproxy_config(
            state_dir=self.state_dir,
            host=self.args.host,
            port=self.args.port,
            web_ports=self.web_ports,
            stats_port=self.stats_port,
        )
        if not self.args.no_migrate:
            out = subprocess.run(
                [str(BIN / "python"), "manage.py", "migrate", "--noinput"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise StackError(f"manage.py migrate failed:\n{out.stdout}{out.stderr}")
        return env

    def start(self, env: dict[str, str]) -> None:
        names = [f"web{i}" for i in range(1, len(self.web_ports) + 1)] + [f"worker{i}" for i in range(1, WORKERS + 1)]
        # honcho puts each process in a session of its own and, on SIGINT/SIGTERM, terminates
        # every one of them (SIGKILL after 5 s); it stays in our process group, so Ctrl-C in
        # a terminal reaches it directly.
        self.process = subprocess.Popen(
            [
                str(BIN / "honcho"),
                "start",
                "--no-colour",
                "-f",
                str(ROOT / "Procfile"),
                "-d",
                str(ROOT),
                *names,
                "balancer",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if match := WORKER_READY.search(line):
                self.ready_workers.add(match.group(1))

    def wait_ready(self) -> None:
        """Return when every process serves; StackError when one exits or time runs out."""
        assert self.process is not None
        deadline = time.monotonic() + self.args.ready_timeout
        balancer = f"{local_url(self.args.host, self.args.port)}/healthz"
        missing = "everything"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StackError(
                    f"a process exited before the stack was ready (honcho exited {self.process.returncode})"
                )
            webs = [p for p in self.web_ports if http_status(f"http://127.0.0.1:{p}/healthz") != 200]
            checks = servers_up(self.stats_port)
            down = (
                sorted(name for name, status in checks.items() if not status.startswith("UP")) if checks else ["stats"]
            )
            workers = sorted({f"worker{i}" for i in range(1, WORKERS + 1)} - self.ready_workers)
            front = http_status(balancer) == 200
            if not (webs or down or workers) and front:
                return
            missing = (
                (f"web /healthz on {webs}" if webs else "")
                + (f" haproxy checks not up: {down}" if down else "")
                + (f" workers not ready: {workers}" if workers else "")
                + ("" if front else " balancer /healthz")
            )
            time.sleep(0.5)
        raise StackError(f"not ready after {self.args.ready_timeout:.0f} s: {missing.strip()}")

    def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    stack = Stack(args)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if stack.process is not None and stack.process.poll() is None:
            stack.process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        env = stack.preflight()
        stack.start(env)
        stack.wait_ready()
    except StackError as exc:
        if not stopping.is_set():
            print(f"stack: {exc}", file=sys.stderr, flush=True)
        stack.stop()
        return 0 if stopping.is_set() else 2
    base = local_url(args.host, args.port)
    print(
        f"{READY_LINE} {base} (balancer: HAProxy; web: {', '.join(str(p) for p in stack.web_ports)}; "
        f"workers: {WORKERS}; HAProxy stats http://127.0.0.1:{stack.stats_port}/). Ctrl-C stops everything.",
        flush=True,
    )
    if args.demo:
        # After READY, so its "Agentsite is ready" line is true; it only writes the demo user.
        subprocess.run(
            [str(BIN / "python"), "manage.py", "bootstrap_demo", "--host", args.host, "--port", str(args.port)],
            cwd=ROOT,
            env=stack.env,
            check=False,
        )
    assert stack.process is not None
    while stack.process.poll() is None:
        time.sleep(0.5)
    return 0 if stopping.is_set() else (stack.process.returncode or 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
