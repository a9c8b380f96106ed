"""Stream benchmark: N concurrent runs streamed over the session websocket of a real Daphne.

Starts `daphne agentsite.asgi:application` as a subprocess on PostgreSQL
(`agentsite_stream_bench`, dropped and recreated) and the Redis channel layer (db 11) with the
offline model, or with `--stack` the production topology (bench/stack.py `balanced`: HAProxy
in front of `--web` Daphne processes, two Celery workers), creates a user and an API token,
then for N in (50, 200) (`--sizes`, 1000 for the issue's largest row): creates N sessions
(`POST /api/sessions/`), opens one websocket per session, sends one `run` frame on every
socket at the same time and records every frame with its arrival time. Per N it reports total
frames, wall time, frames/s, frames per run, lost and reordered events (both must be 0),
latency p50/p99 from the AG-UI `timestamp` (ms, set by the translator from the ledger event's
`created_at`, or "now" for frames made at translation time) to arrival on the socket, the turn
as each client sees it (from its `run` frame to its first frame and to its RUN_FINISHED: a
run that waits for a setup place, runs.core.pacing, waits there), and the server's CPU: the
web processes' user + system time (`/proc/<pid>/stat`) from the start frames to the last
RUN_FINISHED, per run and per frame. The start frames go once the web processes are quiet
after the sockets' handshakes (a socket's connect goes on after the handshake: its groups,
its credential checked again, its catch-up); that connect work is reported apart, per socket.
Lost is measured against the ledger (`GET /api/sessions/<id>/events/`) after the round: a
ledger seq that never reached the socket in an AG-UI frame, or an assistant text whose deltas
and whole messages on the socket do not add up to the ledger's text. (How many
TEXT_MESSAGE_CONTENT frames a run gives varies by design: deltas sent together travel merged,
and a socket that falls behind gets a message whole from the ledger and drops its late
deltas.) Reordered: a seq lower than one already received, content after its message ended,
a tool result before its call.

A warm-up round (`--warm-up`, 10 runs; 0 skips it) goes first and is not counted: a fresh
process's first runs load its tokenizer and schemas, about 0.4 s of CPU that a round's
figures per run would otherwise carry.

Then the slow-socket round (`--slow-events`, 10,000; 0 skips it): on one session, a socket
that never reads (4 KiB receive buffer, one queued frame) beside a reading one, while a
second process saves that many assistant messages to the session's ledger and publishes
them on its group (as another web process's runs would, only faster); the web processes'
resident memory before and after, and what the server says waited unsent for the slow
socket at most (its log line when the socket closes; the bound is
`AGENTSITE_WS_SEND_BUFFER_BYTES` plus the frames of one event). Then the slow socket reads:
every saved event must arrive exactly once, in order.

Prints a table and MET/MISSED for the stream rows of issue 23's targets, and writes
`bench/results/stream.json` (`stream-stack.json` with `--stack`) with the machine, the date
and the topology. The machine is shared: its load average at the start is recorded, and
figures from a loaded machine vary from run to run. Skips (exit 0) when PostgreSQL or Redis
do not answer. The server is stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stack import RESULTS, Stack, Target, balanced, free_port, machine, percentile, topology, wait_ready

STACK = Stack(db_name="agentsite_stream_bench", redis_db=11, extra_env=(("AGENTSITE_MEMORY_AUTO", "0"),))
PROMPT = "Search the logs of payments for errors"
SIZES = (50, 200)
SLOW_EVENTS = 10_000
SEND_BUFFER_BYTES = 262_144  # the server's AGENTSITE_WS_SEND_BUFFER_BYTES default (0 in the environment: no bound)
# A run that has not ended this long after its start frame counts as unfinished: each of N
# concurrent offline runs takes some tens of ms of CPU, so the allowance grows with N.
RUN_TIMEOUT_BASE_S = 30.0
RUN_TIMEOUT_PER_RUN_S = 0.25
CPU_SETTLE_S = 0.5  # after the last RUN_FINISHED: a run's completion work ends just after it
WARM_UP_RUNS = 10
"""Runs before the measured rounds, not counted: a fresh process loads its tokenizer, schemas
and connections on its first runs (about 0.4 s of CPU, 2 ms per run of a 200-run round)."""
SENT = "bench.run_sent"
"""Not a frame: when the socket sent its `run` frame (the start of its turn), kept with its frames."""


def _http(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")


class Server:
    """The web side under test: its base URL, the pids of its web processes and its log."""

    def __init__(self, url: str, pids: Callable[[], list[int]], log: Path) -> None:
        self.url = url
        self.ws = url.replace("http://", "ws://", 1)
        self.pids = pids
        self.log = log

    def cpu_s(self) -> float:
        """User + system CPU seconds the web processes have used so far (all their threads)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15)
        return total

    def rss_bytes(self) -> int:
        """Resident memory of the web processes."""
        total = 0
        for pid in self.pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
            total += int(found.group(1)) * 1024 if found else 0
        return total


@contextmanager
def _one_daphne() -> Iterator[Server]:
    port = free_port()
    log = RESULTS / "stream-daphne.log"
    proc = STACK.daphne(port, log)
    try:
        wait_ready(port, proc)
        yield Server(f"http://127.0.0.1:{port}", lambda: [proc.pid], log)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextmanager
def _stack(web: int) -> Iterator[Server]:
    log = RESULTS / f"stream-stack-web{web}.log"
    with balanced(STACK, web=web, log=log) as running:

        def pids() -> list[int]:
            return [
                int(pid)
                for name, pid in re.findall(r"\| (\w+)\.1 started \(pid=(\d+)\)", log.read_text())
                if name.startswith("web")
            ]

        yield Server(running.url, pids, log)


async def _one_socket(
    server: Server, token: str, session_id: str, start: asyncio.Event, frames: list, ready: list, timeout_s: float
) -> None:
    from websockets.asyncio.client import connect

    url = f"{server.ws}/ws/sessions/{session_id}/?token={token}"
    async with connect(url, max_size=None, open_timeout=60) as ws:
        ready.append(session_id)
        await start.wait()
        await ws.send(json.dumps({"type": "run", "message": PROMPT}))
        frames.append((time.time(), {"type": SENT}))
        async with asyncio.timeout(timeout_s):
            async for raw in ws:
                now = time.time()
                frame = json.loads(raw)
                frames.append((now, frame))
                if frame.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                    break


def _ledger_losses(frames: list[tuple[float, dict]], ledger: list[dict[str, Any]]) -> int:
    """Ledger events this socket never showed: missing seqs, plus 1 per assistant text that
    the socket's deltas and whole messages do not reproduce."""
    received = {(f.get("metadata") or {}).get("seq") for _, f in frames}
    missing = sum(1 for e in ledger if e["seq"] not in received)
    assistant_ids = {
        f.get("messageId") for _, f in frames if f.get("type") == "TEXT_MESSAGE_START" and f.get("role") == "assistant"
    }
    shown: dict[str, str] = {}
    for _, f in frames:
        if f.get("type") == "TEXT_MESSAGE_CONTENT" and f.get("messageId") in assistant_ids:
            shown[f["messageId"]] = shown.get(f["messageId"], "") + f.get("delta", "")
    texts = [e["text"] for e in ledger if e.get("role") == "assistant" and e.get("text")]
    return missing + sum(1 for text in texts if text not in shown.values())


def _analyse(per_socket: list[list[tuple[float, dict]]], ledgers: list[list[dict[str, Any]]]) -> dict[str, Any]:
    runs = []
    reordered = 0
    reorder_examples: list[str] = []
    ts_latency_ms: list[float] = []
    acc_latency_ms: list[float] = []
    first_frame_ms: list[float] = []
    turn_ms: list[float] = []
    no_ts = 0
    for frames, ledger in zip(per_socket, ledgers, strict=True):
        accepted_at = sent_at = None
        events = []
        last_seq = -1
        ended_text: set[str] = set()
        started_tool: set[str] = set()
        finished = False
        error = False
        for now, f in frames:
            t = f.get("type")
            if t == SENT:
                sent_at = now
                continue
            if t == "run.accepted":
                accepted_at = now
                continue
            if t == "error":
                error = True
                continue
            events.append(t)
            if sent_at is not None and len(events) == 1:
                first_frame_ms.append((now - sent_at) * 1000)
            if t == "RUN_FINISHED":
                finished = True
                if sent_at is not None:
                    turn_ms.append((now - sent_at) * 1000)
            if t == "RUN_ERROR":
                error = True
            ts = f.get("timestamp")
            if ts is not None:
                ts_latency_ms.append(now * 1000 - ts)
            else:
                no_ts += 1
            if accepted_at is not None:
                acc_latency_ms.append((now - accepted_at) * 1000)
            seq = (f.get("metadata") or {}).get("seq")
            problem = None
            if seq is not None:
                if seq < last_seq:
                    problem = f"seq {seq} after {last_seq}"
                last_seq = max(last_seq, seq)
            mid = f.get("messageId")
            if t == "TEXT_MESSAGE_END":
                ended_text.add(mid)
            elif t == "TEXT_MESSAGE_CONTENT" and mid in ended_text:
                problem = f"TEXT_MESSAGE_CONTENT after END of {mid}"
            tcid = f.get("toolCallId")
            if t == "TOOL_CALL_START":
                started_tool.add(tcid)
            elif t == "TOOL_CALL_RESULT" and tcid not in started_tool:
                problem = f"TOOL_CALL_RESULT before START of {tcid}"
            if problem:
                reordered += 1
                if len(reorder_examples) < 5:
                    reorder_examples.append(problem)
        runs.append(
            {
                "events": events,
                "finished": finished,
                "error": error,
                "accepted": accepted_at is not None,
                "lost": _ledger_losses(frames, ledger),
                "ledger_events": len(ledger),
            }
        )

    counts = [len(r["events"]) for r in runs]
    lost = sum(r["lost"] for r in runs)
    bad_runs = sum(1 for r in runs if r["lost"] or not r["finished"])
    return {
        "runs": len(runs),
        "runs_finished": sum(r["finished"] for r in runs),
        "runs_error": sum(r["error"] for r in runs),
        "total_events": sum(counts),
        "events_per_run": sorted(set(counts)),
        "events_per_run_equal": len(set(counts)) == 1,
        "events_per_finished_run": sorted({len(r["events"]) for r in runs if r["finished"]}),
        "ledger_events_per_run": sorted({r["ledger_events"] for r in runs}),
        "lost_events": lost,
        "runs_with_losses": bad_runs,
        "reordered_events": reordered,
        "reorder_examples": reorder_examples,
        "latency_source": "AG-UI timestamp (ms) to socket arrival",
        "latency_ms_p50": percentile(ts_latency_ms, 50),
        "latency_ms_p99": percentile(ts_latency_ms, 99),
        "latency_ms_max": max(ts_latency_ms) if ts_latency_ms else None,
        "frames_without_timestamp": no_ts,
        "since_accepted_ms_p50": percentile(acc_latency_ms, 50),
        "since_accepted_ms_p99": percentile(acc_latency_ms, 99),
        # The whole turn as its client sees it, from its `run` frame: a run that waits to set
        # up (runs.core.pacing) waits here, not in the ledger-to-socket latency.
        "first_frame_ms_p50": percentile(first_frame_ms, 50),
        "first_frame_ms_p99": percentile(first_frame_ms, 99),
        "turn_ms_p50": percentile(turn_ms, 50),
        "turn_ms_p99": percentile(turn_ms, 99),
    }


async def _bench(server: Server, token: str, n: int) -> dict[str, Any]:
    base = server.url
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(16) as pool:
        sessions = await asyncio.gather(
            *(
                loop.run_in_executor(pool, _http, "POST", f"{base}/api/sessions/", token, {"title": f"s{i}"})
                for i in range(n)
            )
        )
    ids = [s["id"] for s in sessions]
    cpu_connect = server.cpu_s()
    start = asyncio.Event()
    per_socket: list[list] = [[] for _ in ids]
    ready: list[str] = []
    timeout_s = RUN_TIMEOUT_BASE_S + RUN_TIMEOUT_PER_RUN_S * n
    tasks = [
        asyncio.create_task(_one_socket(server, token, sid, start, per_socket[i], ready, timeout_s))
        for i, sid in enumerate(ids)
    ]
    # Wait until every socket has finished its handshake (or failed), then start all runs.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(ready) + sum(t.done() for t in tasks) < n:  # noqa: ASYNC110  (readiness is a count over many sockets, not one event)
        await asyncio.sleep(0.05)
    # The connect goes on after the handshake (the groups joined, the credential checked
    # again, the ledger caught up): its CPU is the socket's, not the run's.
    cpu_before = await _quiet(server)
    cpu_connect = cpu_before - cpu_connect
    t0 = time.perf_counter()
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - t0
    await asyncio.sleep(CPU_SETTLE_S)
    cpu = server.cpu_s() - cpu_before
    failures = [repr(r) for r in results if isinstance(r, BaseException)]
    with ThreadPoolExecutor(16) as pool:
        ledgers = await asyncio.gather(
            *(
                loop.run_in_executor(pool, _http, "GET", f"{base}/api/sessions/{sid}/events/?limit=500", token)
                for sid in ids
            )
        )
    stats = _analyse(per_socket, [page["results"] for page in ledgers])
    stats.update(
        n=n,
        wall_s=round(wall, 3),
        events_per_s=round(stats["total_events"] / wall, 1) if wall else None,
        server_cpu_s=round(cpu, 2),
        cpu_ms_per_run=round(1000 * cpu / n, 1),
        cpu_ms_per_frame=round(1000 * cpu / stats["total_events"], 2) if stats["total_events"] else None,
        cpu_ms_per_connect=round(1000 * cpu_connect / n, 1),
        socket_failures=len(failures),
        socket_failure_examples=failures[:3],
    )
    return stats


QUIET_STEP_S = 0.2
QUIET_CPU_S = 0.02
"""The web processes are quiet when they use less than this much CPU in a step (10% of a core;
/proc counts in 10 ms ticks)."""
QUIET_CAP_S = 15.0


async def _quiet(server: Server) -> float:
    """Wait until the web processes are quiet (at most `QUIET_CAP_S`); their CPU seconds then."""
    before = server.cpu_s()
    deadline = time.monotonic() + QUIET_CAP_S
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_STEP_S)
        now = server.cpu_s()
        if now - before < QUIET_CPU_S:
            return now
        before = now
    return before


PUBLISH = """
import asyncio
from django.conf import settings
from channels.layers import get_channel_layer
from runs.fanout import EVENT_MESSAGE, session_group
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.session import SessionKey

async def main():
    service = DjangoSessionService()
    session = await service.get_session_head(SessionKey(app=settings.AGENTSITE_APP, user_id={user_id!r}, session_id={session_id!r}))
    layer = get_channel_layer()
    for start in range(0, {events}, 100):
        events = [Event(author="support", request_id="bench-slow", extensions={{"message_id": f"m{{n}}"}},
                        message=Message(role="assistant", content=f"{{n}} " + "x" * 200)) for n in range(start, start + 100)]
        saved = await service.append_events(session, events)
        await layer.group_send(session_group({session_id!r}), {{"type": EVENT_MESSAGE, "session_id": {session_id!r},
            "user_id": {user_id!r}, "items": [["bench-slow", e.to_dict()] for e in saved]}})

asyncio.run(main())
"""


async def _slow_socket_round(server: Server, token: str, events: int) -> dict[str, Any]:
    """A socket that never reads while `events` saved events reach its session, then reads.

    The events are 200-character assistant messages, written to the ledger and published on
    the session's group by a second process (`manage.py shell`), as another web process's
    runs would: real runs on one session get slower as its history grows, and 10,000 events
    would take minutes."""
    from websockets.asyncio.client import connect

    session_id = (await asyncio.to_thread(_http, "POST", f"{server.url}/api/sessions/", token, {"title": "slow"}))["id"]
    user_id = await asyncio.to_thread(_bench_user_id)
    url = f"{server.ws}/ws/sessions/{session_id}/?token={token}"
    host, port = server.url.removeprefix("http://").split(":")
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    raw.connect((host, int(port)))
    # No keepalive pings from this client: their pongs would wait unread behind the frames.
    slow = await connect(url, sock=raw, max_queue=1, max_size=None, open_timeout=60, ping_interval=None)
    reader = await connect(url, max_size=None, open_timeout=60)
    await asyncio.sleep(0.5)
    rss_before = server.rss_bytes()
    keepalive = asyncio.create_task(_keep_alive(slow))
    t0 = time.perf_counter()
    script = PUBLISH.format(user_id=user_id, session_id=session_id, events=events)
    publishing = asyncio.create_task(asyncio.to_thread(STACK.manage, "shell", "-c", script))
    seqs: list[int] = []
    async with asyncio.timeout(900):
        while len(seqs) < events:
            frame = json.loads(await reader.recv())
            if frame.get("type") == "TEXT_MESSAGE_END":
                seqs.append(frame["metadata"]["seq"])
    await publishing
    driven_s = time.perf_counter() - t0
    await asyncio.sleep(1.0)
    rss_after = server.rss_bytes()
    keepalive.cancel()
    # Now it reads: every saved event must come, once.
    slow_seqs: list[int] = []
    async with asyncio.timeout(900):
        while len(slow_seqs) < events:
            frame = json.loads(await slow.recv())
            if frame.get("type") == "TEXT_MESSAGE_END":
                slow_seqs.append(frame["metadata"]["seq"])
    await slow.close()
    await reader.close()
    peak = await _logged_peak(server, session_id)
    return {
        "events": events,
        "published_and_relayed_s": round(driven_s, 1),
        "reader_in_order": seqs == sorted(seqs),
        "rss_before_bytes": rss_before,
        "rss_after_bytes": rss_after,
        "rss_growth_bytes": rss_after - rss_before,
        # None: the socket never fell behind (the kernel's buffers took everything).
        "peak_unsent_bytes": peak,
        "bound_bytes": int(os.environ.get("AGENTSITE_WS_SEND_BUFFER_BYTES", SEND_BUFFER_BYTES)),
        "missing_seqs": len(set(seqs) - set(slow_seqs)),
        "duplicated_frames": len(slow_seqs) - len(set(slow_seqs)),
        "slow_in_order": slow_seqs == sorted(slow_seqs),
    }


def _bench_user_id() -> str:
    return STACK.manage(
        "shell", "-c", "from django.contrib.auth.models import User; print(User.objects.get(username='bench').pk)"
    ).split()[-1]


async def _keep_alive(ws: Any) -> None:
    """A frame every 5 s from the client that does not read: Daphne pings a socket silent for
    20 s and drops it when no pong comes, and this client would never read the ping. (Each
    frame is answered with an error frame, which waits with the rest.)"""
    while True:
        await ws.send(json.dumps({"type": "keepalive"}))
        await asyncio.sleep(5)


async def _logged_peak(server: Server, session_id: str, timeout_s: float = 15) -> int | None:
    """What the server logged as the most that waited unsent for the session's socket."""
    pattern = re.compile(rf"socket of session {re.escape(session_id)}: .* at most (\d+) bytes waited unsent")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pattern.findall(server.log.read_text(errors="replace"))
        if found:
            return max(int(value) for value in found)
        await asyncio.sleep(0.2)
    return None


def _targets(results: list[dict[str, Any]], slow: dict[str, Any] | None, *, balancer: bool) -> list[Target]:
    """Issue 23's stream rows, as measured."""
    by_n = {r["n"]: r for r in results}
    note = "" if balancer else "one Daphne, no balancer (the targets are through the balancer: --stack)"
    rows: list[Target] = []
    cpu_round = by_n.get(200) or (results[-1] if results else None)
    if cpu_round is not None:
        rows.append(
            Target(
                measure="server CPU per offline run",
                target="<= 20 ms",
                value=f"{cpu_round['cpu_ms_per_run']} ms",
                met=cpu_round["cpu_ms_per_run"] <= 20,
                note=f"N={cpu_round['n']}, {cpu_round['cpu_ms_per_frame']} ms per frame",
            )
        )
    for n, p99_limit in ((200, 250.0), (1000, 1000.0)):
        r = by_n.get(n)
        if r is None:
            rows.append(
                Target(
                    measure=f"stream, {n} sockets: lost / p99 ledger-to-socket",
                    target=f"0 / <= {p99_limit:.0f} ms",
                    value="not run",
                    met=None,
                    note=f"--sizes {n}",
                )
            )
            continue
        p99 = r["latency_ms_p99"]
        rows.append(
            Target(
                measure=f"stream, {n} sockets: lost / p99 ledger-to-socket",
                target=f"0 / <= {p99_limit:.0f} ms",
                value=f"{r['lost_events']} / {p99:.0f} ms" if p99 is not None else f"{r['lost_events']} / n/a",
                met=r["lost_events"] == 0 and r["runs_finished"] == n and p99 is not None and p99 <= p99_limit,
                note=note,
            )
        )
    if slow is None:
        rows.append(
            Target(
                measure="memory of one socket that never reads, after 10,000 events",
                target="bounded",
                value="not run",
                met=None,
            )
        )
    else:
        peak = slow["peak_unsent_bytes"] or 0
        # The frames that finish the event during which the bound was crossed follow it.
        met = (
            bool(slow["bound_bytes"])
            and peak <= slow["bound_bytes"] + 4096
            and not slow["missing_seqs"]
            and not slow["duplicated_frames"]
        )
        rows.append(
            Target(
                measure=f"memory of one socket that never reads, after {slow['events']:,} events",
                target="bounded",
                value=f"at most {peak:,} bytes unsent in the process (bound {slow['bound_bytes']:,} + one event's frames); "
                f"web RSS {slow['rss_growth_bytes'] / 2**20:+.1f} MiB",
                met=met,
                note=f"then read: {slow['missing_seqs']} missing, {slow['duplicated_frames']} duplicated",
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="concurrent sessions per round")
    parser.add_argument(
        "--slow-events",
        type=int,
        default=SLOW_EVENTS,
        help="frames a socket that never reads gets in the slow-socket round (0: skip it)",
    )
    parser.add_argument(
        "--stack",
        action="store_true",
        help="against the production topology (`make stack`: HAProxy, --web Daphne processes)",
    )
    parser.add_argument("--web", type=int, default=2, choices=(1, 2), help="with --stack: web processes behind HAProxy")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=WARM_UP_RUNS,
        help="runs before the measured rounds, not counted (a fresh process loads its tokenizer on its first)",
    )
    args = parser.parse_args()
    problem = STACK.reset()
    if problem:
        print(f"SKIP: {problem}; stream benchmark not run.")
        return 0
    print(f"database {STACK.db_name} recreated; migrating...", flush=True)
    STACK.manage("migrate", "--noinput")
    token = STACK.manage("create_api_token", "bench", "--create-user").strip().splitlines()[-1].strip()
    RESULTS.mkdir(exist_ok=True)
    where = (
        topology(web=args.web, balancer=True)
        if args.stack
        else "1 Daphne process, no balancer, no Celery worker, PostgreSQL and Redis on loopback, offline model"
    )
    started_on = machine()
    results: list[dict[str, Any]] = []
    slow: dict[str, Any] | None = None
    with _stack(args.web) if args.stack else _one_daphne() as server:
        print(f"{where}; {server.url}", flush=True)
        if args.warm_up:
            print(f"warm-up: {args.warm_up} runs, not counted...", flush=True)
            asyncio.run(_bench(server, token, args.warm_up))
        for n in args.sizes:
            print(f"N={n}: running...", flush=True)
            results.append(asyncio.run(_bench(server, token, n)))
        if args.slow_events:
            print(f"slow socket: {args.slow_events} frames to a socket that never reads...", flush=True)
            slow = asyncio.run(_slow_socket_round(server, token, args.slow_events))

    header = (
        f"{'N':>4} {'frames':>7} {'wall s':>7} {'fr/s':>8} {'fr/run':>8} {'done':>5} {'lost':>5} {'reord':>5} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'fail':>5} {'cpu/run':>8} {'cpu/fr':>7}"
    )
    print()
    print(
        "latency: AG-UI `timestamp` (ledger created_at, ms) -> frame arrival on the socket; "
        "cpu: web processes' user+system ms"
    )
    print(header)
    for r in results:
        c = r["events_per_run"]
        epr = str(c[0]) if len(c) == 1 else f"{c[0]}-{c[-1]}"
        p50 = r["latency_ms_p50"] if r["latency_ms_p50"] is not None else float("nan")
        p99 = r["latency_ms_p99"] if r["latency_ms_p99"] is not None else float("nan")
        print(
            f"{r['n']:>4} {r['total_events']:>7} {r['wall_s']:>7.2f} {r['events_per_s']:>8} {epr:>8} "
            f"{r['runs_finished']:>5} {r['lost_events']:>5} {r['reordered_events']:>5} "
            f"{p50:>8.1f} {p99:>8.1f} {r['socket_failures']:>5} {r['cpu_ms_per_run']:>8} {r['cpu_ms_per_frame']:>7}"
        )
    for r in results:
        print(
            f"N={r['n']}: frames without timestamp {r['frames_without_timestamp']}; "
            f"since run.accepted p50/p99 {r['since_accepted_ms_p50'] or 0:.0f}/{r['since_accepted_ms_p99'] or 0:.0f} ms; "
            f"from the run frame: first frame p50/p99 {r['first_frame_ms_p50'] or 0:.0f}/{r['first_frame_ms_p99'] or 0:.0f} ms, "
            f"RUN_FINISHED p50/p99 {r['turn_ms_p50'] or 0:.0f}/{r['turn_ms_p99'] or 0:.0f} ms; "
            f"run errors {r['runs_error']}; frames per finished run {r['events_per_finished_run']}; "
            f"ledger events per run {r['ledger_events_per_run']}; "
            f"CPU per socket connect {r['cpu_ms_per_connect']} ms (before the round, not in cpu/run)"
        )
        if r["reorder_examples"] or r["socket_failure_examples"]:
            print(f"  examples: {r['reorder_examples']} {r['socket_failure_examples']}")
    if slow is not None:
        print(
            f"slow socket: {slow['events']} events ({slow['published_and_relayed_s']} s) while it did not read; "
            f"at most {slow['peak_unsent_bytes']} bytes waited unsent (bound {slow['bound_bytes']}); web RSS "
            f"{slow['rss_before_bytes'] / 2**20:.1f} -> {slow['rss_after_bytes'] / 2**20:.1f} MiB; then it read: "
            f"{slow['missing_seqs']} seqs missing, {slow['duplicated_frames']} duplicated, in order {slow['slow_in_order']}"
        )
    rows = _targets(results, slow, balancer=args.stack)
    print(f"\ntargets (issue 23; {where}; load average at start {started_on['loadavg_at_start']}):")
    for row in rows:
        print(row.line())
    ok = all(r["lost_events"] == 0 and r["reordered_events"] == 0 and r["runs_finished"] == r["n"] for r in results)
    ok = ok and (slow is None or (not slow["missing_seqs"] and not slow["duplicated_frames"] and slow["slow_in_order"]))
    print(
        "verdict:",
        "OK (0 lost, 0 reordered, 0 duplicated)" if ok else "PROBLEM (lost/reordered/unfinished runs, see above)",
    )
    output = RESULTS / ("stream-stack.json" if args.stack else "stream.json")
    output.write_text(
        json.dumps(
            {
                "machine": started_on,
                "topology": where,
                "web_processes": args.web if args.stack else 1,
                "warm_up_runs": args.warm_up,
                "balancer": args.stack,
                "prompt": PROMPT,
                "results": results,
                "slow_socket": slow,
                "targets": [row.to_dict() for row in rows],
            },
            indent=2,
        )
    )
    print(
        f"wrote {output.relative_to(RESULTS.parent.parent)} (server log: {server.log.relative_to(RESULTS.parent.parent)})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
