"""Peers benchmark: Agentsite against Google ADK, LangGraph and the OpenAI Agents SDK, side by side.

One workload (bench/peers/workload.py: per user turn, three sequential `lookup` calls then an
answer; a deterministic fake model recording each request's size), one session of N turns
per runtime configuration, for each N of --turns (default 50 and 200).

Fairness: every configuration runs in its own child process (Agentsite in the project's
venv, the peers in bench/.venv-peers: their dependencies never meet), all started and warmed
up before measuring. The parent then plays the sessions in chunks of --chunk turns, one
configuration at a time, round-robin (A B C D ... A B C D ...), rotating the order every
round; a process waiting for its next chunk is blocked on stdin, so it takes no CPU from the
one being measured. A ratio Agentsite/peer is computed chunk by chunk (median turn of one
over median turn of the other, played minutes apart at most) and the median of those is
reported, so a drift of the machine's load cancels out.

Run with the project's venv: `.venv/bin/python bench/peers/run.py` (or `make bench-peers`,
which also builds the peers' venv). Writes bench/results/peers/peers.json, turns.csv and the
PNG charts (drawn by charts.py in the peers' venv, where matplotlib lives).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import turns  # noqa: E402  (needs ROOT on sys.path)

PEERS = ROOT / "bench" / "peers"
PROJECT_PYTHON = Path(sys.executable)
DEFAULT_PEERS_PYTHON = ROOT / "bench" / ".venv-peers" / "bin" / "python"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/bench_peers"
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "peers"
WINDOW = 10
TARGET_RATIO = 1.3
TARGET_SPEED = 0.5
TARGET_SPEED_POSTGRES = 1.0
TARGET_STATEMENTS = 20
DEFAULT_BUDGET_S = 60.0
READY_TIMEOUT_S = 300
CHUNK_TIMEOUT_S = 300


@dataclass(frozen=True, kw_only=True)
class Runtime:
    name: str
    driver: str
    config: str
    agentsite: bool = False
    postgres: bool = False


RUNTIMES = (
    Runtime(name="agentsite-sqlite-off", driver="agentsite_driver.py", config="sqlite-off", agentsite=True),
    Runtime(name="agentsite-sqlite-on", driver="agentsite_driver.py", config="sqlite-on", agentsite=True),
    Runtime(
        name="agentsite-pg-off", driver="agentsite_driver.py", config="postgres-off", agentsite=True, postgres=True
    ),
    Runtime(name="agentsite-pg-on", driver="agentsite_driver.py", config="postgres-on", agentsite=True, postgres=True),
    Runtime(name="adk-memory", driver="adk_driver.py", config="memory"),
    Runtime(name="adk-db", driver="adk_driver.py", config="db"),
    Runtime(name="adk-db-compaction", driver="adk_driver.py", config="db-compaction"),
    Runtime(name="langgraph-memory", driver="langgraph_driver.py", config="memory"),
    Runtime(name="langgraph-sqlite", driver="langgraph_driver.py", config="sqlite"),
    Runtime(name="openai-sqlite", driver="openai_driver.py", config="sqlite"),
)


@dataclass(kw_only=True)
class Child:
    """One runtime configuration's process, fed commands on stdin, read line by line."""

    runtime: Runtime
    process: subprocess.Popen[str]
    log: Path
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    info: dict[str, Any] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[list[float]] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)
    spent_s: float = 0.0
    stopped: str = ""

    def start_reader(self) -> None:
        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def read(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.runtime.name}: no answer within {timeout:.0f}s (log: {self.log})") from None
        if line is None:
            raise RuntimeError(f"{self.runtime.name}: the process ended early; its log:\n{_tail(self.log)}")
        message = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"{self.runtime.name}: {message['error']}; its log:\n{_tail(self.log)}")
        return message

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(runtime: Runtime, python: Path, workdir: Path, env: dict[str, str]) -> Child:
    log = workdir / f"{runtime.name}.log"
    process = subprocess.Popen(
        [str(python), str(PEERS / runtime.driver), runtime.config, str(workdir)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    child = Child(runtime=runtime, process=process, log=log)
    child.start_reader()
    return child


def play(
    runtimes: Sequence[Runtime],
    n: int,
    chunk: int,
    budget_s: float,
    peers_python: Path,
    postgres_url: str,
    workdir: Path,
) -> tuple[dict[str, Child], dict[str, str]]:
    """Start every configuration (one at a time, so set-ups do not overlap), then play N
    turns each in round-robin chunks. A configuration whose turns have taken budget_s in all
    stops there (a session whose turns grow quadratically would otherwise take the whole
    run); its numbers are then those of the turns it played. Returns the children and the
    skipped runtimes."""
    skipped: dict[str, str] = {}
    if any(r.postgres for r in runtimes):
        reason = turns._prepare_postgres(postgres_url)
        if reason is not None:
            skipped.update({r.name: reason for r in runtimes if r.postgres})
    peer_env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    children: dict[str, Child] = {}
    try:
        for runtime in runtimes:
            if runtime.name in skipped:
                continue
            if runtime.agentsite:
                url = postgres_url if runtime.postgres else "sqlite:///" + str(workdir / f"{runtime.name}.sqlite3")
                child = _start(runtime, PROJECT_PYTHON, workdir, turns._child_env(url))
            else:
                child = _start(runtime, peers_python, workdir, peer_env)
            child.info = child.read(READY_TIMEOUT_S)
            children[runtime.name] = child
            print(f"  ready: {runtime.name} ({child.info['storage']})", file=sys.stderr, flush=True)
        order = list(children.values())
        played = 0
        round_number = 0
        while played < n:
            size = min(chunk, n - played)
            shift = round_number % len(order)
            for child in order[shift:] + order[:shift]:
                if child.stopped:
                    continue
                if child.spent_s >= budget_s:
                    child.stopped = f"stopped after turn {played}: its turns had taken {child.spent_s:.0f}s (--budget {budget_s:.0f})"
                    print(f"  {child.runtime.name}: {child.stopped}", file=sys.stderr, flush=True)
                    continue
                child.send({"play": size})
                chunk_ms = []
                while True:
                    message = child.read(CHUNK_TIMEOUT_S)
                    if "chunk_done" in message:
                        break
                    child.turns.append(message)
                    chunk_ms.append(message["ms"])
                    child.spent_s += message["ms"] / 1000
                child.chunks.append(chunk_ms)
            played += size
            round_number += 1
            if played % 50 == 0 or played == n:
                progress = ", ".join(
                    f"{c.runtime.name} {statistics.median(c.chunks[-1]):.0f}" for c in order if not c.stopped
                )
                print(
                    f"  N={n}: {played}/{n} turns; median ms of the last chunk: {progress}", file=sys.stderr, flush=True
                )
        for child in order:
            child.send({"stop": True})
            child.done = child.read(CHUNK_TIMEOUT_S)
    finally:
        for child in children.values():
            if child.process.stdin is not None:
                child.process.stdin.close()
            try:
                child.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.process.kill()
    return children, skipped


# -- statistics ---------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and R² of ys against xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy) / (sxx * syy)


def summarize(child: Child) -> dict[str, Any]:
    records = child.turns
    ms = [r["ms"] for r in records]
    n = len(records)
    size = min(WINDOW, n // 2)
    early, late = ms[:size], ms[n - size :]
    counted = records[0]["statements"] is not None

    def per_turn(key: str, window: Sequence[dict[str, Any]]) -> float | None:
        return _mean([r[key] for r in window]) if counted else None

    calls = [c for r in records for c in r["chars"]]
    answer_calls = [r["chars"][-1] for r in records]  # the answering call shows the whole turn
    first_summary = next((t for t in range(1, n) if answer_calls[t] < answer_calls[t - 1]), None)
    after = answer_calls[first_summary:] if first_summary is not None else []
    half = len(after) // 2
    bounded = max(after[half:]) / max(after[:half]) if half >= 2 else None
    slope, r2 = _fit(range(1, n + 1), answer_calls)
    return {
        **child.info,
        "checks": child.done,
        "turns": n,
        "stopped": child.stopped,
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(turns.percentile(ms, 0.95), 3),
        "early_p50_ms": round(statistics.median(early), 3),
        "late_p50_ms": round(statistics.median(late), 3),
        "growth": round(statistics.median(late) / statistics.median(early), 3),
        "statements_per_turn": [per_turn("statements", records[:size]), per_turn("statements", records[n - size :])],
        "rows_read_per_turn": [per_turn("rows_read", records[:size]), per_turn("rows_read", records[n - size :])],
        "rows_written_per_turn": [
            per_turn("rows_written", records[:size]),
            per_turn("rows_written", records[n - size :]),
        ],
        "chars_first": calls[0],
        "chars_median": statistics.median(calls),
        "chars_last": calls[-1],
        "chars_max": max(calls),
        # Context shape, from the answering call of each turn: where the first drop (a
        # summary, a compaction or a window cut) happened, whether it stays bounded after
        # it (max of the second half of the rest over max of its first half), and how
        # straight a line it is over the whole session.
        "first_drop_turn": None if first_summary is None else first_summary + 1,
        "bounded_ratio": None if bounded is None else round(bounded, 3),
        "chars_slope_per_turn": round(slope, 1),
        "chars_r2": round(r2, 4),
    }


def paired_ratios(children: dict[str, Child]) -> dict[str, dict[str, float]]:
    """Agentsite/peer per chunk (median over median), then the median across chunks."""
    out: dict[str, dict[str, float]] = {}
    for a in children.values():
        if not a.runtime.agentsite:
            continue
        row = {}
        for p in children.values():
            if p.runtime.agentsite:
                continue
            # Only the chunks both played: a peer stopped by the budget pairs on its early chunks.
            ratios = [statistics.median(ca) / statistics.median(cp) for ca, cp in zip(a.chunks, p.chunks, strict=False)]
            row[p.runtime.name] = round(statistics.median(ratios), 3)
        out[a.runtime.name] = row
    return out


# -- report -------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pair(values: list[float | None]) -> str:
    return "n/a" if values[0] is None else f"{values[0]:.0f}->{values[1]:.0f}"


def report_n(
    n: int, summaries: dict[str, dict[str, Any]], ratios: dict[str, dict[str, float]], skipped: dict[str, str]
) -> list[str]:
    size = min(WINDOW, n // 2)
    lines = [
        f"N = {n} turns (one session per runtime; 4 model calls and 3 lookups per turn). Latency in ms;",
        f"growth = p50 of turns {n - size + 1}-{n} / p50 of turns 1-{size}; per-turn counts are means of turns 1-{size} -> {n - size + 1}-{n};",
        "chars = characters of content sent to the model per call (first call of turn 1, median of all calls, last call).",
        "",
        f"{'runtime':<22} {'p50':>7} {'p95':>7} {'first10':>8} {'last10':>8} {'growth':>7} {'stmts/turn':>11} "
        f"{'rows read':>10} {'rows written':>12} {'chars first':>11} {'median':>7} {'last':>7}",
    ]
    for name, s in summaries.items():
        lines.append(
            f"{name:<22} {s['p50_ms']:>7.1f} {s['p95_ms']:>7.1f} {s['early_p50_ms']:>8.1f} {s['late_p50_ms']:>8.1f} "
            f"{'x' + format(s['growth'], '.2f'):>7} {_pair(s['statements_per_turn']):>11} {_pair(s['rows_read_per_turn']):>10} "
            f"{_pair(s['rows_written_per_turn']):>12} {s['chars_first']:>11} {s['chars_median']:>7.0f} {s['chars_last']:>7}"
        )
    for name, reason in skipped.items():
        lines.append(f"{name:<22} SKIPPED: {reason}")
    for name, s in summaries.items():
        if s["stopped"]:
            lines.append(f"  {name}: {s['stopped']}; its row covers turns 1-{s['turns']}")
    lines += ["", "Storage:"]
    lines += [f"  {name:<22} {s['runtime']}: {s['storage']} ({s['version']})" for name, s in summaries.items()]
    if ratios:
        peers = list(next(iter(ratios.values())))
        lines += [
            "",
            "Agentsite / peer, per-turn latency, paired chunk by chunk (median of per-chunk ratios; < 1 = Agentsite faster):",
        ]
        lines.append(f"{'':<22} " + " ".join(f"{p:>18}" for p in peers))
        for name, row in ratios.items():
            lines.append(f"{name:<22} " + " ".join(f"{'x' + format(row[p], '.2f'):>18}" for p in peers))
    lines += [
        "",
        "Context shape (answering call of each turn): first drop, bounded after it, linear fit over the session:",
    ]
    for name, s in summaries.items():
        lines.append(
            f"  {name:<22} first drop at turn {s['first_drop_turn'] or '-':>4}, bounded ratio {_num(s['bounded_ratio'], 2):>5}, "
            f"slope {s['chars_slope_per_turn']:>7.1f} chars/turn, R² {s['chars_r2']:.3f}"
        )
    return lines


def verdicts(summaries: dict[str, dict[str, Any]], ratios: dict[str, dict[str, float]], n: int) -> list[dict[str, Any]]:
    """The issue's three targets, evaluated on this run's numbers."""
    out: list[dict[str, Any]] = []
    durable = {k: s for k, s in summaries.items() if s["durable"] and k in next(iter(ratios.values()), {})}
    if durable:
        fastest = min(durable, key=lambda k: durable[k]["p50_ms"])
        for name, storage, limit in (
            ("agentsite-sqlite-off", "SQLite", TARGET_SPEED),
            ("agentsite-sqlite-on", "SQLite", TARGET_SPEED),
            ("agentsite-pg-off", "PostgreSQL", TARGET_SPEED_POSTGRES),
            ("agentsite-pg-on", "PostgreSQL", TARGET_SPEED_POSTGRES),
        ):
            if name in ratios:
                ratio = ratios[name][fastest]
                out.append(
                    {
                        "target": f"median per-turn overhead at N={n} on {storage} <= {limit} x fastest durable peer",
                        "runtime": name,
                        "against": fastest,
                        "value": ratio,
                        "met": ratio <= limit,
                        "text": f"{name}: x{ratio:.2f} of {fastest} (p50 {summaries[name]['p50_ms']:.1f} vs "
                        f"{summaries[fastest]['p50_ms']:.1f} ms)",
                    }
                )
    for name, s in summaries.items():
        # The issue's targets on the store's work hold with governance on.
        if s["runtime"] != "Agentsite" or not name.endswith("-on") or s["statements_per_turn"][0] is None:
            continue
        first, last = s["statements_per_turn"]
        worst = max(first, last)
        out.append(
            {
                "target": f"statements per turn <= {TARGET_STATEMENTS}",
                "runtime": name,
                "value": worst,
                "met": worst <= TARGET_STATEMENTS,
                "text": f"{name}: {first:.1f} (first ten) -> {last:.1f} (last ten)",
            }
        )
        read_first, read_last = s["rows_read_per_turn"]
        growth = read_last / read_first if read_first else None
        out.append(
            {
                "target": f"rows read per turn flat (last ten / first ten <= {TARGET_RATIO})",
                "runtime": name,
                "value": growth,
                "met": growth is not None and growth <= TARGET_RATIO,
                "text": f"{name}: {read_first:.0f} -> {read_last:.0f} rows (x{_num(growth, 2)})",
            }
        )
    adk = summaries.get("adk-db")
    for name, s in summaries.items():
        if s["runtime"] == "Agentsite":
            grows = f"; adk-db x{adk['growth']:.2f}" if adk else ""
            out.append(
                {
                    "target": f"growth ratio (last ten / first ten p50) <= {TARGET_RATIO}",
                    "runtime": name,
                    "value": s["growth"],
                    "met": s["growth"] <= TARGET_RATIO,
                    "text": f"{name}: x{s['growth']:.2f} ({s['early_p50_ms']:.1f} -> {s['late_p50_ms']:.1f} ms){grows}",
                }
            )
    for name in ("agentsite-sqlite-on", "agentsite-pg-on"):
        s = summaries.get(name)
        if s is None:
            continue
        flat = s["bounded_ratio"] is not None and s["bounded_ratio"] <= TARGET_RATIO
        out.append(
            {
                "target": "governance on: chars per call flat after the first summary",
                "runtime": name,
                "value": s["bounded_ratio"],
                "met": flat,
                "text": f"{name}: first drop at turn {s['first_drop_turn']}, bounded ratio {_num(s['bounded_ratio'], 2)}, "
                f"max {s['chars_max']} chars",
            }
        )
    for name, s in summaries.items():
        if s["runtime"] != "Agentsite" and s["first_drop_turn"] is None:
            linear = s["chars_r2"] >= 0.99 and s["chars_slope_per_turn"] > 0
            out.append(
                {
                    "target": "peers without compaction grow linearly",
                    "runtime": name,
                    "value": s["chars_r2"],
                    "met": linear,
                    "text": f"{name}: {s['chars_slope_per_turn']:.0f} chars/turn, R² {s['chars_r2']:.3f}, "
                    f"{s['chars_first']} -> {s['chars_last']} chars",
                }
            )
    return out


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", default="50,200", help="comma-separated session lengths (default 50,200)")
    parser.add_argument("--chunk", type=int, default=10, help="turns per chunk of the round-robin (default 10)")
    parser.add_argument("--runtimes", default=",".join(r.name for r in RUNTIMES), help="comma-separated (default: all)")
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds of turns per runtime and N before it stops (default {DEFAULT_BUDGET_S:.0f})",
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL, help="dropped and recreated for each N")
    parser.add_argument("--peers-python", type=Path, default=DEFAULT_PEERS_PYTHON, help="python of the peers' venv")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="folder for JSON, CSV and PNG")
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.turns.split(",") if x.strip()]
    if not sizes or min(sizes) < 2 * WINDOW:
        parser.error(f"--turns takes lengths of at least {2 * WINDOW}, got {args.turns!r}")
    known = {r.name: r for r in RUNTIMES}
    chosen = [x.strip() for x in args.runtimes.split(",") if x.strip()]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        parser.error(f"unknown runtimes {unknown!r}; known: {sorted(known)!r}")
    runtimes = [known[x] for x in chosen]
    if any(not r.agentsite for r in runtimes) and not args.peers_python.exists():
        parser.error(f"{args.peers_python} is missing: run `make bench-peers` (it builds bench/.venv-peers)")

    started = time.perf_counter()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    before = machine()
    results: dict[str, Any] = {}
    csv_rows: list[list[Any]] = []
    printed: list[str] = []
    for n in sizes:
        print(f"N={n}: starting {len(runtimes)} runtimes ...", file=sys.stderr, flush=True)
        workdir = Path(tempfile.mkdtemp(prefix=f"agentsite-peers-{n}-"))
        try:
            children, skipped = play(
                runtimes, n, args.chunk, args.budget, args.peers_python, args.postgres_url, workdir
            )
        except RuntimeError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            print(f"(logs kept in {workdir})", file=sys.stderr)
            return 1
        shutil.rmtree(workdir, ignore_errors=True)
        summaries = {name: summarize(child) for name, child in children.items()}
        ratios = paired_ratios(children)
        checks = verdicts(summaries, ratios, n)
        results[str(n)] = {
            "summaries": summaries,
            "paired_ratios": ratios,
            "skipped": skipped,
            "verdicts": checks,
            "per_turn": {
                name: {"ms": [t["ms"] for t in c.turns], "chars": [t["chars"] for t in c.turns]}
                for name, c in children.items()
            },
        }
        for name, child in children.items():
            for t in child.turns:
                csv_rows.append(
                    [n, name, t["turn"], t["ms"], *t["chars"], t["statements"], t["rows_read"], t["rows_written"]]
                )
        lines = report_n(n, summaries, ratios, skipped)
        lines += ["", "Targets:"] + [
            f"  {'MET   ' if v['met'] else 'MISSED'} {v['target']}: {v['text']}" for v in checks
        ]
        printed += [*lines, ""]
        print()
        print("\n".join(lines), flush=True)

    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "peers",
        "created_at": created,
        "command": "make bench-peers  (.venv/bin/python bench/peers/run.py " + " ".join(argv or sys.argv[1:]) + ")",
        "machine": {**before, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "chunk": args.chunk,
        "budget_s": args.budget,
        "window": WINDOW,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "report": printed,
        "results": results,
    }
    (out / "peers.json").write_text(json.dumps(document, indent=1) + "\n")
    with (out / "turns.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "n",
                "runtime",
                "turn",
                "ms",
                "chars_call1",
                "chars_call2",
                "chars_call3",
                "chars_call4",
                "statements",
                "rows_read",
                "rows_written",
            ]
        )
        writer.writerows(csv_rows)
    (out / "report.txt").write_text(
        f"{created} {before['platform']}, {before['cpu_count']} CPUs\n\n" + "\n".join(printed)
    )
    if not args.no_charts:
        drawn = subprocess.run([str(args.peers_python), str(PEERS / "charts.py"), str(out / "peers.json")], check=False)
        if drawn.returncode != 0:
            print("charts: failed (see above)", file=sys.stderr)
            return 1
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(
        f"Results in {shown}/ (peers.json, turns.csv, report.txt, *.png); {time.perf_counter() - started:.0f}s in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
