"""Load benchmark: N concurrent users in multi-turn sessions over REST and websockets.

Starts PostgreSQL-backed Daphne (`agentsite_load_bench`, dropped and recreated), the Redis
channel layer and broker (db 14) and two Celery workers (summary and memory jobs), all on
loopback with the offline model. Each of `--users` users (default 200) runs sessions of
`--turns` turns (default 3) for `--seconds` (default 120), alternating the two ways in: a
REST turn (`POST /api/runs/` with `wait`) and a websocket turn (a `run` frame on the
session's socket, read up to RUN_FINISHED / RUN_ERROR). A turn's latency is from sending
it to its answer (the REST reply, or the socket's end-of-run frame).

The final audit reads every session's ledger and every run from the database:
- lost: a ledger seq gap, a run without its completion event, a run that did not end
  `completed`, or (websocket turns) a ledger seq of the turn's run that never reached the
  socket;
- duplicated: an event id twice in a ledger, a completion event twice for a run, or the
  same frame (type, seq, tool call or message id) twice on a socket.
Both must be 0: the exit status is 1 otherwise. Requests answered with an error (or that
raised) are counted as failed and reported beside them in the targets' row.

Users are a closed loop without think time: each sends its next turn when the last is
answered, so by Little's law the mean turn takes users / turns per second; the run prints
that figure beside the targets (a 1 s turn at 200 users needs 200 turns per second). Prints a report and writes
`bench/results/load.json`. Skips (exit 0) when PostgreSQL or Redis do not answer.

`--stack` runs against the production topology instead (`make stack`, bench/stack.py
`balanced`: HAProxy in front of `--web` Daphne processes, two Celery workers) and writes
`load-stack.json`; `--stack --compare-web` runs on one web process, then on two (same
users and seconds, each on a fresh database) and writes `load-stack-compare.json`. Every
result records the machine (its load average at the start), the date and the topology,
and the run prints MET / MISSED for each load row of issue 23's targets table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from stack import (
    PYTHON,
    RESULTS,
    ROOT,
    MachineCpu,
    Stack,
    Target,
    balanced,
    free_port,
    machine,
    machine_cpu_s,
    percentile,
    process_cpu_s,
    services_cpu_s,
    topology,
)

STACK = Stack(db_name="agentsite_load_bench", redis_db=14)
PROMPTS = (
    "Search the logs of payments for errors",
    "What time is it in Tokyo?",
    "Inspect the certificate of checkout.example.com",
    "Summarise what we found so far",
)
TURN_TIMEOUT_S = 120.0
END_FRAMES = ("RUN_FINISHED", "RUN_ERROR")

MAKE_USERS = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
User = get_user_model()
for i in range({n}):
    user, _ = User.objects.get_or_create(username=f"load{{i}}")
    print(Token.objects.get_or_create(user=user)[0].key)
"""


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"rest": [], "ws": []})
    errors: Counter[str] = field(default_factory=Counter)
    sessions: set[str] = field(default_factory=set)
    # websocket turns: run id -> the (type, seq) of every frame that named a seq
    socket_seqs: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)


async def _rest_turn(http: Any, session_id: str, prompt: str, stats: Stats) -> None:
    started = time.monotonic()
    reply = await http.post("/api/runs/", json={"message": prompt, "session_id": session_id, "wait": True})
    if reply.status_code != 201:
        stats.errors[f"rest {reply.status_code}"] += 1
        return
    if reply.json().get("status") != "completed":
        stats.errors[f"rest run {reply.json().get('status')}"] += 1
        return
    stats.latencies["rest"].append(time.monotonic() - started)


async def _ws_turn(base: str, token: str, session_id: str, after_seq: int, prompt: str, stats: Stats) -> None:
    from websockets.asyncio.client import connect

    url = f"{base.replace('http', 'ws', 1)}/ws/sessions/{session_id}/?after_seq={after_seq}"
    async with connect(
        url,
        origin=base,
        additional_headers={"Authorization": f"Bearer {token}"},  # type: ignore[arg-type]  # Origin is a str
        open_timeout=60,
        max_size=None,
    ) as ws:
        started = time.monotonic()
        await ws.send(json.dumps({"type": "run", "message": prompt}))
        run_id = None
        seen: list[tuple[str, int, str]] = []
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), TURN_TIMEOUT_S))
            if frame["type"] == "run.accepted":
                run_id = frame["run_id"]
                continue
            if frame["type"] == "error":
                stats.errors[f"ws {frame['error']['code']}"] += 1
                return
            seq = (frame.get("metadata") or {}).get("seq")
            if seq is not None:
                # One ledger event can give several frames of a type (parallel tool calls).
                seen.append((frame["type"], int(seq), frame.get("toolCallId") or frame.get("messageId") or ""))
            if frame["type"] in END_FRAMES and frame.get("runId") == run_id:
                break
        stats.latencies["ws"].append(time.monotonic() - started)
        if frame["type"] == "RUN_ERROR":
            stats.errors["ws RUN_ERROR"] += 1
        assert run_id is not None
        stats.socket_seqs[run_id] = seen


async def _user(index: int, base: str, token: str, deadline: float, turns: int, stats: Stats) -> None:
    import httpx

    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=TURN_TIMEOUT_S
    ) as http:
        while time.monotonic() < deadline:
            try:
                created = await http.post("/api/sessions/", json={"title": f"load {index}"})
                if created.status_code != 201:
                    stats.errors[f"session {created.status_code}"] += 1
                    await asyncio.sleep(1)
                    continue
                session_id = created.json()["id"]
                stats.sessions.add(session_id)
                for turn in range(turns):
                    if time.monotonic() >= deadline:
                        break
                    prompt = PROMPTS[(index + turn) % len(PROMPTS)]
                    if (index + turn) % 2:
                        await _rest_turn(http, session_id, prompt, stats)
                    else:
                        ledger = await http.get(f"/api/sessions/{session_id}/events/", params={"limit": 200})
                        after = max((e["seq"] for e in ledger.json()["results"]), default=0)
                        await _ws_turn(base, token, session_id, after, prompt, stats)
            except Exception as exc:  # counted, and the user goes on: the audit tells what it cost
                stats.errors[f"{type(exc).__name__}"] += 1
                await asyncio.sleep(0.5)


def _audit(stats: Stats) -> dict[str, Any]:
    import psycopg

    lost: Counter[str] = Counter()
    duplicated: Counter[str] = Counter()
    with psycopg.connect(STACK.database_url.replace("postgres://", "postgresql://")) as conn:
        events = conn.execute(
            "SELECT session_id, seq, event_id, payload->>'object', payload->'extensions'->>'run_id' "
            "FROM sessions_app_event ORDER BY session_id, seq"
        ).fetchall()
        runs = conn.execute("SELECT id, session_id, status FROM runs_run").fetchall()
    by_session: dict[str, list[tuple[int, str, str | None, str | None]]] = {}
    for session_id, seq, event_id, obj, run_id in events:
        by_session.setdefault(session_id, []).append((seq, event_id, obj, run_id))
    completions: Counter[str] = Counter()
    run_seqs: dict[str, set[int]] = {}
    for rows in by_session.values():
        if [r[0] for r in rows] != list(range(1, len(rows) + 1)):
            lost["ledger seq gap"] += 1
        ids = Counter(r[1] for r in rows)
        duplicated["event id"] += sum(c - 1 for c in ids.values() if c > 1)
        for _seq, _, obj, run_id in rows:
            if obj == "runner.completion" and run_id:
                completions[run_id] += 1
    # Each run's ledger seqs: those of its request (joined through the events' request id).
    with psycopg.connect(STACK.database_url.replace("postgres://", "postgresql://")) as conn:
        for run_id, seq in conn.execute(
            "SELECT r.id, e.seq FROM runs_run r JOIN sessions_app_event e "
            "ON e.session_id = r.session_id AND e.request_id = r.request_id"
        ):
            run_seqs.setdefault(run_id, set()).add(seq)
    for run_id, _, status in runs:
        if completions[run_id] == 0:
            lost["run without completion event"] += 1
        duplicated["completion event"] += max(0, completions[run_id] - 1)
        if status != "completed":
            lost[f"run ended {status}"] += 1
    for run_id, seen in stats.socket_seqs.items():
        missing = run_seqs.get(run_id, set()) - {seq for _, seq, _ in seen}
        lost["ledger seq never reached its socket"] += len(missing)
        for (kind, *_), count in Counter(seen).items():
            duplicated[f"socket frame {kind}"] += count - 1
    return {
        "sessions": len(by_session),
        "runs": len(runs),
        "events": len(events),
        "lost": {k: v for k, v in lost.items() if v},
        "duplicated": {k: v for k, v in duplicated.items() if v},
    }


async def _drive(base: str, tokens: list[str], seconds: float, turns: int, stats: Stats) -> float:
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    await asyncio.gather(*(_user(i, base, tokens[i], deadline, turns, stats) for i in range(len(tokens))))
    return time.monotonic() - started


@dataclass
class _Processes:
    """The one-Daphne topology's address and its processes' CPU, named as the stack names them."""

    url: str
    named: dict[str, int]

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds (user + system) each process has used so far."""
        used = {name: process_cpu_s(pid) for name, pid in self.named.items()}
        return {name: seconds for name, seconds in used.items() if seconds is not None}


@contextmanager
def _one_daphne() -> Iterator[_Processes]:
    """One Daphne and two Celery workers (`--pool=solo`), as before the stack existed."""
    port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for index in range(2):
            log = open(RESULTS / f"load-worker-{index}.log", "wb")
            logs.append(log)
            processes.append(
                subprocess.Popen(
                    [
                        str(PYTHON),
                        "-m",
                        "celery",
                        "-A",
                        "agentsite",
                        "worker",
                        "--pool=solo",
                        "-n",
                        f"load{index}@%h",
                        "--without-gossip",
                        "--without-mingle",
                        "--loglevel=WARNING",
                    ],
                    cwd=ROOT,
                    env=STACK.env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        processes.append(STACK.daphne(port, RESULTS / "load-daphne.log"))
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or processes[-1].poll() is not None:
                    raise RuntimeError("daphne did not start; see bench/results/load-daphne.log") from None
                time.sleep(0.2)
        named = {"web1": processes[-1].pid, "worker1": processes[0].pid, "worker2": processes[1].pid}
        yield _Processes(f"http://127.0.0.1:{port}", named)
    finally:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        for log in logs:
            log.close()


def measure(args: argparse.Namespace, *, web: int | None) -> dict[str, Any]:
    """One load run on a fresh database: `web` Daphne processes behind HAProxy (the stack),
    or None for one Daphne without a balancer. The report, with the machine and topology."""
    problem = STACK.reset()
    if problem:
        raise SkipBench(problem)
    print(f"database {STACK.db_name} recreated; migrating...", flush=True)
    STACK.manage("migrate", "--noinput")
    # The shell may print a banner first; the tokens are the last lines.
    tokens = STACK.manage("shell", "-c", MAKE_USERS.format(n=args.users)).split()[-args.users :]
    where = topology(web=web or 1, balancer=web is not None)
    started_on = machine()  # the load average before this run's own processes start
    server = balanced(STACK, web=web, log=RESULTS / f"load-stack-web{web}.log") if web else _one_daphne()
    with server as running:
        base = running if isinstance(running, str) else running.url
        print(f"{args.users} users x {args.seconds:.0f}s, {args.turns} turns a session; {where}; {base}", flush=True)
        stats = Stats()
        cpu_before = {} if isinstance(running, str) else running.cpu_s()
        services_before, machine_before = services_cpu_s(), machine_cpu_s()
        client_before = time.process_time()
        wall = asyncio.run(_drive(base, tokens, args.seconds, args.turns, stats))
        client_cpu = time.process_time() - client_before
        cpu_after = {} if isinstance(running, str) else running.cpu_s()
        services_after, machine_after = services_cpu_s(), machine_cpu_s()
        time.sleep(2)  # let the last runs' completion records land before the audit
        audit = _audit(stats)
    cpu = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 1) for name in cpu_after}
    all_turns = stats.latencies["rest"] + stats.latencies["ws"]
    whole = _machine_cpu(
        cpu,
        client_cpu,
        {name: services_after[name] - services_before[name] for name in services_after},
        (machine_after[0] - machine_before[0], machine_after[1] - machine_before[1]),
        wall=wall,
        turns=len(all_turns),
    )
    report: dict[str, Any] = {
        "machine": started_on,
        "topology": where,
        "web_processes": web or 1,
        "balancer": web is not None,
        "users": args.users,
        "seconds": args.seconds,
        "wall_s": round(wall, 1),
        "turns": len(all_turns),
        "turns_per_s": round(len(all_turns) / wall, 2),
        "errors": dict(stats.errors),
        "audit": audit,
        # CPU seconds during the drive: each stack process (with --stack) and this client.
        "cpu_s": {**cpu, "load client": round(client_cpu, 1)},
        "web_cpu_ms_per_turn": round(1000 * sum(v for k, v in cpu.items() if k.startswith("web")) / len(all_turns), 1)
        if cpu and all_turns
        else None,
        # The whole machine: what bounds turns per second on it (see `MachineCpu`).
        "machine_cpu": whole.to_dict(),
        "latency_s": {
            kind: {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99)}
            for kind, values in (("all", all_turns), ("rest", stats.latencies["rest"]), ("ws", stats.latencies["ws"]))
        },
    }
    print(
        f"\nturns: {len(all_turns)} in {wall:.1f}s = {report['turns_per_s']} turns/s "
        f"({len(stats.latencies['rest'])} REST, {len(stats.latencies['ws'])} websocket)"
    )
    for kind, row in report["latency_s"].items():
        if row["n"]:
            print(f"  {kind:>4} turn latency p50 {row['p50']:.2f}s  p99 {row['p99']:.2f}s  (n={row['n']})")
    print(f"errors: {sum(stats.errors.values())} {dict(stats.errors) or ''}")
    print(
        f"CPU seconds in {wall:.0f} s of wall time (2 cores = {2 * wall:.0f}): {report['cpu_s']}; "
        f"web CPU per turn {report['web_cpu_ms_per_turn']} ms; machine load average at start "
        f"{started_on['loadavg_at_start']}"
    )
    print(whole.line())
    print(
        f"audit: {audit['sessions']} sessions, {audit['runs']} runs, {audit['events']} ledger events; "
        f"lost {sum(audit['lost'].values())} {audit['lost'] or ''}, "
        f"duplicated {sum(audit['duplicated'].values())} {audit['duplicated'] or ''}",
        flush=True,
    )
    return report


def _machine_cpu(
    stack_cpu: dict[str, float],
    client_cpu: float,
    services: dict[str, float],
    machine_delta: tuple[float, float],
    *,
    wall: float,
    turns: int,
) -> MachineCpu:
    """The run's whole-machine CPU account: the web processes, the workers (each group
    summed), the other stack processes, the bench client, PostgreSQL and Redis."""
    parts: dict[str, float] = {}
    for name, seconds in stack_cpu.items():
        group = "web" if name.startswith("web") else "workers" if name.startswith("worker") else name
        parts[group] = parts.get(group, 0.0) + seconds
    parts["load client"] = client_cpu
    parts.update(services)
    return MachineCpu(wall_s=wall, busy_s=machine_delta[0], idle_s=machine_delta[1], by_part_s=parts, turns=turns)


class SkipBench(Exception):
    """PostgreSQL or Redis does not answer: the bench is skipped, not failed."""


def targets(report: dict[str, Any], *, one_web: dict[str, Any] | None = None) -> list[Target]:
    """Issue 23's load rows, from a run (and, for the scaling row, the run on one web process)."""
    latency, audit = report["latency_s"], report["audit"]
    shape = f"{report['users']} users x {report['seconds']:.0f} s"
    note = "" if (report["users"], report["seconds"]) == (200, 120) else "the target is for 200 users x 120 s"
    lost, duplicated = sum(audit["lost"].values()), sum(audit["duplicated"].values())
    errors: dict[str, int] = report.get("errors", {})
    failed = sum(errors.values())

    def p50(kind: str) -> float | None:
        return latency[kind]["p50"]

    ws, rest = p50("ws"), p50("rest")
    whole = report.get("machine_cpu") or {}
    if whole.get("busy_ms_per_turn"):
        # Closed loop: a turn's mean latency is users / turns per second (Little's law), so
        # a latency target is a throughput target, and the machine's CPU per turn bounds that.
        cores_needed = report["users"] * whole["busy_ms_per_turn"] / 1000
        bound = (
            f"{report['users']} users in a closed loop with a 1 s turn need {report['users']} turns/s: at "
            f"{whole['busy_ms_per_turn']} ms of machine CPU per turn, {cores_needed:.1f} cores; this machine has "
            f"{os.cpu_count()} and does at most {whole['capacity_turns_per_s']} turns/s at that cost"
        )
        note = f"{note}; {bound}" if note else bound
    rows = [
        Target(
            measure=f"load, {shape}: websocket turn p50",
            target="<= 1 s",
            value="n/a" if ws is None else f"{ws:.2f} s",
            met=None if ws is None else ws <= 1.0,
            note=note,
        ),
        Target(
            measure=f"load, {shape}: REST wait turn p50",
            target="<= 1.5 s",
            value="n/a" if rest is None else f"{rest:.2f} s",
            met=None if rest is None else rest <= 1.5,
            note=note,
        ),
        Target(
            measure=f"load, {shape}: lost / duplicated / failed requests",
            target="0 / 0 / 0",
            value=f"{lost} / {duplicated} / {failed}",
            met=lost == 0 and duplicated == 0 and failed == 0,
            note="failed: a turn or session request answered with an error, or that raised"
            + (f" ({', '.join(f'{k} {v}' for k, v in sorted(errors.items()))})" if errors else ""),
        ),
    ]
    if one_web is not None:
        ratio = report["turns_per_s"] / one_web["turns_per_s"] if one_web["turns_per_s"] else 0.0
        scaling = f"{shape} each, both behind HAProxy"
        if whole.get("capacity_turns_per_s") and one_web["turns_per_s"]:
            # The second web process shares the cores with everything else: at the two-web
            # run's CPU per turn the machine allows at most this ratio, however the web scales.
            most = whole["capacity_turns_per_s"] / one_web["turns_per_s"]
            scaling += (
                f"; with two webs the cores were {100 * whole['busy_share']:.0f}% busy (one web: "
                f"{100 * one_web['machine_cpu']['busy_share']:.0f}%), and at two webs' {whole['busy_ms_per_turn']} ms "
                f"of machine CPU per turn the machine allows at most {most:.2f}x the one-web run"
            )
        rows.append(
            Target(
                measure="two web processes against one, runs per second",
                target=">= 1.6x",
                value=f"{ratio:.2f}x ({report['turns_per_s']} vs {one_web['turns_per_s']} turns/s)",
                met=ratio >= 1.6,
                note=scaling,
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--turns", type=int, default=3, help="turns per session before a user opens the next")
    parser.add_argument(
        "--stack",
        action="store_true",
        help="against the production topology (`make stack`: HAProxy, two Daphne processes)",
    )
    parser.add_argument("--web", type=int, default=2, choices=(1, 2), help="with --stack: web processes behind HAProxy")
    parser.add_argument(
        "--compare-web",
        action="store_true",
        help="with --stack: run on one web process, then on two, and compare runs per second",
    )
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    try:
        if args.stack and args.compare_web:
            one = measure(args, web=1)
            two = measure(args, web=2)
            rows = targets(two, one_web=one)
            result: dict[str, Any] = {"runs": [one, two], "targets": [r.to_dict() for r in rows]}
            name = "load-stack-compare.json"
        else:
            report = measure(args, web=args.web if args.stack else None)
            rows = targets(report)
            result = {**report, "targets": [r.to_dict() for r in rows]}
            name = "load-stack.json" if args.stack else "load.json"
    except SkipBench as exc:
        print(f"SKIP: {exc}; load benchmark not run.")
        return 0
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nTargets (issue 23; bench/results/{name}):")
    for row in rows:
        print(row.line())
    runs = result.get("runs", [result])
    last = runs[-1]
    if last["turns_per_s"]:
        # Users send their next turn as soon as the last is answered (no think time): by
        # Little's law a turn takes about users / throughput, whatever the server does.
        print(
            f"Closed loop, no think time: {last['users']} users / {last['turns_per_s']} turns/s = "
            f"{last['users'] / last['turns_per_s']:.1f} s per turn on average; a 1 s turn at "
            f"{last['users']} users needs {last['users']} turns/s"
        )
    return 1 if any(r["audit"]["lost"] or r["audit"]["duplicated"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
