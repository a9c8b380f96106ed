"""Stream benchmark: N concurrent runs streamed over the session websocket of a real Daphne.

Starts `daphne agentsite.asgi:application` as a subprocess on PostgreSQL
(`agentsite_stream_bench`, dropped and recreated) and the Redis channel layer (db 11) with the
offline model, creates a user and an API token, then for N in (50, 200): creates N sessions
(`POST /api/sessions/`), opens one websocket per session, sends one `run` frame on every
socket at the same time and records every frame with its arrival time. Per N it reports total
events, wall time, events/s, events per run, lost and reordered events (both must be 0) and
latency p50/p99 from the AG-UI `timestamp` (ms, set by the translator from the ledger event's
`created_at`, or "now" for frames made at translation time) to arrival on the socket.
Lost is measured against the ledger (`GET /api/sessions/<id>/events/`) after the round: a
ledger seq that never reached the socket in an AG-UI frame, or an assistant text whose deltas
and whole messages on the socket do not add up to the ledger's text. (How many
TEXT_MESSAGE_CONTENT frames a run gives varies by design: a socket that falls behind gets a
message whole from the ledger and drops its late deltas.) Reordered: a seq lower than one
already received, content after its message ended, a tool result before its call.
Prints a table and writes `bench/results/stream.json`. Skips (exit 0) when PostgreSQL or Redis
do not answer. Daphne is killed at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stack import RESULTS, Stack, free_port, percentile, wait_ready

STACK = Stack(db_name="agentsite_stream_bench", redis_db=11, extra_env=(("AGENTSITE_MEMORY_AUTO", "0"),))
PROMPT = "Search the logs of payments for errors"
SIZES = (50, 200)
OUTPUT = RESULTS / "stream.json"
# A run that has not ended this long after its start frame counts as unfinished: each of N
# concurrent offline runs takes ~0.1 s of CPU, so the allowance grows with N.
RUN_TIMEOUT_BASE_S = 30.0
RUN_TIMEOUT_PER_RUN_S = 0.25












def _http(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")






async def _one_socket(
    port: int, token: str, session_id: str, start: asyncio.Event, frames: list, ready: list, timeout_s: float
) -> None:
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{port}/ws/sessions/{session_id}/?token={token}"
    async with connect(url, origin=f"http://127.0.0.1:{port}", max_size=None, open_timeout=60) as ws:
        ready.append(session_id)
        await start.wait()
        await ws.send(json.dumps({"type": "run", "message": PROMPT}))
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
    assistant_ids = {f.get("messageId") for _, f in frames if f.get("type") == "TEXT_MESSAGE_START" and f.get("role") == "assistant"}
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
    no_ts = 0
    for frames, ledger in zip(per_socket, ledgers, strict=True):
        accepted_at = None
        events = []
        last_seq = -1
        ended_text: set[str] = set()
        started_tool: set[str] = set()
        finished = False
        error = False
        for now, f in frames:
            t = f.get("type")
            if t == "run.accepted":
                accepted_at = now
                continue
            if t == "error":
                error = True
                continue
            events.append(t)
            if t == "RUN_FINISHED":
                finished = True
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
        runs.append({
            "events": events, "finished": finished, "error": error, "accepted": accepted_at is not None,
            "lost": _ledger_losses(frames, ledger), "ledger_events": len(ledger),
        })

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
    }


async def _bench(port: int, token: str, n: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(16) as pool:
        sessions = await asyncio.gather(
            *(loop.run_in_executor(pool, _http, "POST", f"{base}/api/sessions/", token, {"title": f"s{i}"}) for i in range(n))
        )
    ids = [s["id"] for s in sessions]
    start = asyncio.Event()
    per_socket: list[list] = [[] for _ in ids]
    ready: list[str] = []
    timeout_s = RUN_TIMEOUT_BASE_S + RUN_TIMEOUT_PER_RUN_S * n
    tasks = [
        asyncio.create_task(_one_socket(port, token, sid, start, per_socket[i], ready, timeout_s))
        for i, sid in enumerate(ids)
    ]
    # Wait until every socket has finished its handshake (or failed), then start all runs.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(ready) + sum(t.done() for t in tasks) < n:  # noqa: ASYNC110  (readiness is a count over many sockets, not one event)
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # let the consumers finish their ledger replay
    t0 = time.perf_counter()
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - t0
    failures = [repr(r) for r in results if isinstance(r, BaseException)]
    with ThreadPoolExecutor(16) as pool:
        ledgers = await asyncio.gather(*(
            loop.run_in_executor(pool, _http, "GET", f"{base}/api/sessions/{sid}/events/?limit=500", token) for sid in ids
        ))
    stats = _analyse(per_socket, [page["results"] for page in ledgers])
    stats.update(
        n=n,
        wall_s=round(wall, 3),
        events_per_s=round(stats["total_events"] / wall, 1) if wall else None,
        socket_failures=len(failures),
        socket_failure_examples=failures[:3],
    )
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="concurrent sessions per round")
    sizes = parser.parse_args().sizes
    problem = STACK.reset()
    if problem:
        print(f"SKIP: {problem}; stream benchmark not run.")
        return 0
    print(f"database {STACK.db_name} recreated; migrating...", flush=True)
    STACK.manage("migrate", "--noinput")
    token = STACK.manage("create_api_token", "bench", "--create-user").strip().splitlines()[-1].strip()
    port = free_port()
    RESULTS.mkdir(exist_ok=True)
    proc = STACK.daphne(port, RESULTS / "stream-daphne.log")
    results = []
    try:
        wait_ready(port, proc)
        print(f"daphne pid {proc.pid} on port {port}", flush=True)
        for n in sizes:
            print(f"N={n}: running...", flush=True)
            results.append(asyncio.run(_bench(port, token, n)))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    header = f"{'N':>4} {'events':>7} {'wall s':>7} {'ev/s':>8} {'ev/run':>8} {'done':>5} {'lost':>5} {'reord':>5} {'p50 ms':>8} {'p99 ms':>8} {'fail':>5}"
    print()
    print("latency: AG-UI `timestamp` (ledger created_at, ms) -> frame arrival on the socket")
    print(header)
    for r in results:
        c = r["events_per_run"]
        epr = str(c[0]) if len(c) == 1 else f"{c[0]}-{c[-1]}"
        p50 = r["latency_ms_p50"] if r["latency_ms_p50"] is not None else float("nan")
        p99 = r["latency_ms_p99"] if r["latency_ms_p99"] is not None else float("nan")
        print(
            f"{r['n']:>4} {r['total_events']:>7} {r['wall_s']:>7.2f} {r['events_per_s']:>8} {epr:>8} "
            f"{r['runs_finished']:>5} {r['lost_events']:>5} {r['reordered_events']:>5} "
            f"{p50:>8.1f} {p99:>8.1f} {r['socket_failures']:>5}"
        )
    for r in results:
        print(
            f"N={r['n']}: frames without timestamp {r['frames_without_timestamp']}; "
            f"since run.accepted p50/p99 {r['since_accepted_ms_p50'] or 0:.0f}/{r['since_accepted_ms_p99'] or 0:.0f} ms; "
            f"run errors {r['runs_error']}; frames per finished run {r['events_per_finished_run']}; "
            f"ledger events per run {r['ledger_events_per_run']}"
        )
        if r["reorder_examples"] or r["socket_failure_examples"]:
            print(f"  examples: {r['reorder_examples']} {r['socket_failure_examples']}")
    ok = all(r["lost_events"] == 0 and r["reordered_events"] == 0 and r["runs_finished"] == r["n"] for r in results)
    print("verdict:", "OK (0 lost, 0 reordered)" if ok else "PROBLEM (lost/reordered/unfinished runs, see above)")
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(
        json.dumps(
            {"prompt": PROMPT, "python": platform.python_version(), "cpus": os.cpu_count(), "results": results},
            indent=2,
        )
    )
    print(f"wrote {OUTPUT.relative_to(RESULTS.parent.parent)} (Daphne log: bench/results/stream-daphne.log)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
