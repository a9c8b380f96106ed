"""Turn benchmark: does the cost of one turn grow with the length of the session?

A session of N turns (default 200), played --repeats times (default 3) one session after
the other. Each turn is one `Runner.start` + `handle.wait()`: the user sends a message, the
scripted model asks for three tool calls in one response (`search_logs`, `lookup_ticket`,
`inspect_host`), then answers with text: seven ledger events per turn. The same sessions
run on three backends in one invocation:

- `memory`: InMemorySessionService + InMemoryRunStore, the peer baseline;
- `sqlite`: DjangoSessionService + DjangoRunStore on a fresh temporary SQLite file;
- `postgres`: the same on `agentsite_bench` (dropped and recreated at every run; skipped
  with a message when PostgreSQL does not answer).

Django settings are per process, so each backend runs in a child process of this script
(`turns.py --backend NAME`) that prints its raw measurements as one JSON line; the parent
compares turns 1-10 with the last ten turns (the samples of every session pooled), prints
a table and a verdict per backend and writes `bench/results/turns.json`. See
bench/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/turns.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

# The benchmark's parts (bench/turns_*.py): the agent, the SQL counter, the child and the
# comparison. bench/peers drives Agentsite with this benchmark's set-up through `bench.turns`.
from bench.turns_agent import AGENT, APP, USERNAME  # noqa: E402
from bench.turns_child import GOVERNANCE_ENV, Backend, _governed, _warm_executor, child_main  # noqa: E402
from bench.turns_report import TARGET, TARGET_RATIO, WINDOW, percentile, report, summarize  # noqa: E402

__all__ = ["AGENT", "APP", "USERNAME", "Backend", "_governed", "_warm_executor", "main", "percentile"]

BACKENDS = ("memory", "sqlite", "postgres")
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/agentsite_bench"
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "turns.json"
DEFAULT_REPEATS = 3
CHILD_TIMEOUT_S = 900


def _prepare_postgres(url: str) -> str | None:
    """Drop and recreate the bench database; the reason it cannot be used, or None."""
    import psycopg

    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        return f"{url!r} names no database"
    maintenance = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    where = f"PostgreSQL at {parts.hostname or 'localhost'}:{parts.port or 5432}"
    try:
        conn = psycopg.connect(maintenance, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        return f"{where} did not answer ({_first_line(exc)})"
    quoted = '"' + database.replace('"', '""') + '"'
    try:
        with conn:
            conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {quoted}")
    except psycopg.Error as exc:
        return f"{where} answered but {database!r} could not be recreated ({_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _child_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "DJANGO_DEBUG": "0",  # DEBUG would keep every query in memory and slow each one
            "DJANGO_SECRET_KEY": env.get("DJANGO_SECRET_KEY") or "bench-only-not-a-secret",
            "AGENTSITE_LOG_LEVEL": "WARNING",
        }
    )
    return env


def _spawn(name: str, turns: int, repeats: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one backend in a child process; its last stdout line is the JSON result."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--backend",
        name,
        "--turns",
        str(turns),
        "--repeats",
        str(repeats),
    ]
    try:
        done = subprocess.run(
            command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"the child did not finish within {CHILD_TIMEOUT_S}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"status": "failed", "reason": f"the child exited with status {done.returncode} (its stderr is above)"}
    return {"status": "ok", **json.loads(lines[-1])}


def run_backend(name: str, turns: int, repeats: int, postgres_url: str) -> dict[str, Any]:
    print(f"{name}: {repeats} session(s) of {turns} turns ...", file=sys.stderr, flush=True)
    if name == "memory":
        return _spawn(name, turns, repeats, _child_env(""))
    if name == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as folder:
            url = "sqlite:///" + str(Path(folder) / "bench.sqlite3")  # absolute path: sqlite:////...
            return _spawn(name, turns, repeats, _child_env(url))
    reason = _prepare_postgres(postgres_url)
    if reason is not None:
        return {"status": "skipped", "reason": reason}
    return _spawn(name, turns, repeats, _child_env(postgres_url))


def parent_main(turns: int, repeats: int, backends: list[str], postgres_url: str, output: Path) -> int:
    started = time.perf_counter()
    summaries: dict[str, dict[str, Any]] = {}
    for name in backends:
        result = run_backend(name, turns, repeats, postgres_url)
        summaries[name] = summarize(name, result) if result["status"] == "ok" else result
    peer = summaries.get("memory")
    for name, s in summaries.items():
        if name != "memory" and s["status"] == "ok" and peer is not None and peer["status"] == "ok":
            s["early_p50_vs_memory"] = round(s["early"]["p50_ms"] / peer["early"]["p50_ms"], 3)
    print()
    for line in report(summaries, turns, repeats):
        print(line)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "turns",
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "turns": turns,
                "repeats": repeats,
                "window": min(WINDOW, turns // 2),
                "target": {"text": TARGET, "max_late_early_ratio": TARGET_RATIO},
                "elapsed_s": round(time.perf_counter() - started, 1),
                "backends": summaries,
            },
            indent=2,
        )
        + "\n"
    )
    shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
    print(f"\nResults written to {shown} ({time.perf_counter() - started:.0f}s in all)")
    return 1 if any(s["status"] == "failed" for s in summaries.values()) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200, help="turns in the measured session (default 200)")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help=f"comma-separated, from {','.join(BACKENDS)} (default: all)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"sessions per backend, one after the other; windows pool their turns (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL, help="dropped and recreated at every run")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON results go")
    parser.add_argument(
        "--governance",
        choices=("on", "off"),
        default=os.environ.get(GOVERNANCE_ENV, "on"),
        help="context governance as deployed (on, default) or the raw ledger window (off)",
    )
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args(argv)
    os.environ[GOVERNANCE_ENV] = args.governance  # children inherit it
    if args.turns < 2:
        parser.error(f"--turns must be at least 2, got {args.turns!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats!r}")
    if args.backend:
        return child_main(args.backend, args.turns, args.repeats)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        parser.error(f"--backends takes names from {list(BACKENDS)!r}, got {args.backends!r}")
    return parent_main(args.turns, args.repeats, backends, args.postgres_url, args.output.resolve())


if __name__ == "__main__":
    sys.exit(main())
