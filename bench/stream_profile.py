"""Where the web process spends its CPU during `bench/stream.py`'s rounds (issue 23).

Runs the stream benchmark (same options) with its Daphne under yappi, CPU clock, every
thread (the event loop and the database threads), profiling only each round's CPU window
(from the start frames to the last RUN_FINISHED, as the benchmark measures it), after an
unprofiled warm-up round of 10 runs. After each round it prints the project's functions by
inclusive CPU, as a share of the profiled total, and keeps the whole profile as
`bench/results/profile/stream-profile-<time>.pstat` (open it with `python -m pstats`); the
round's results and server log go to `bench/results/profile/` too. The profiler slows the process several times over: read the
shares, not the milliseconds, and the figures of `bench/stream.py` for the cost.

yappi is not a dependency of the project: install it where this script finds it, e.g.
`.venv/bin/pip install --target /tmp/yappi yappi` and `YAPPI_PATH=/tmp/yappi`.

    YAPPI_PATH=/tmp/yappi .venv/bin/python bench/stream_profile.py --sizes 100 --slow-events 0
"""

from __future__ import annotations

import os
import pstats
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import stack
import stream

SHOWN = 40
WARM_UP_RUNS = 10
PROFILED_TIMEOUT_S = 600.0  # the profiler slows every run several times over
PROJECT = r"/(runs|sessions_app|skills_app|evolution_app|agentsite)/"


def _daphne_under_yappi(out: str) -> None:
    """The child: Daphne with yappi started on SIGUSR1, stopped and saved on SIGUSR2."""
    import yappi

    def start(*_: Any) -> None:
        yappi.clear_stats()
        yappi.set_clock_type("cpu")
        yappi.start(builtins=False, profile_threads=True)

    def stop(*_: Any) -> None:
        yappi.stop()
        yappi.get_func_stats().save(out + ".tmp", type="pstat")
        os.replace(out + ".tmp", out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *sys.argv[3:]]
    CommandLineInterface.entrypoint()


def main() -> int:
    out = stack.RESULTS / "profile" / "stream-profile.pstat"

    def daphne(self: stack.Stack, port: int, log: Path) -> subprocess.Popen[bytes]:
        env = {
            **self.env(),
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("YAPPI_PATH"), str(stack.ROOT / "bench")) if p),
        }
        with log.open("wb") as sink:
            return subprocess.Popen(
                [
                    str(stack.PYTHON),
                    __file__,
                    "--daphne",
                    str(out),
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "--websocket_connect_timeout",
                    "30",
                    "agentsite.asgi:application",
                ],
                cwd=stack.ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    calls = {"n": 0}
    warm = {"done": False, "profiling": True}
    measured = stream.Server.cpu_s
    bench_round = stream._bench

    async def profiled_round(server: stream.Server, token: str, n: int) -> dict[str, Any]:
        if not warm["done"]:
            # Unprofiled first: the process loads its tokenizer, schemas and connections.
            warm.update(done=True, profiling=False)
            await bench_round(server, token, WARM_UP_RUNS)
            warm["profiling"] = True
        return await bench_round(server, token, n)

    def cpu_s(self: stream.Server) -> float:
        # The benchmark reads the CPU at the start and at the end of each round's window.
        if not warm["profiling"]:
            return measured(self)
        calls["n"] += 1
        pid = self.pids()[0]
        if calls["n"] % 2 == 1:
            out.unlink(missing_ok=True)
            os.kill(pid, signal.SIGUSR1)
            return measured(self)
        value = measured(self)
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 300
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        _report(out)
        return value

    stack.Stack.daphne = daphne  # type: ignore[method-assign]
    stream.Server.cpu_s = cpu_s  # type: ignore[method-assign]
    stream._bench = profiled_round
    stream.RUN_TIMEOUT_BASE_S = PROFILED_TIMEOUT_S
    # The profiled rounds are slower: their results and logs go apart from the benchmark's.
    stream.RESULTS = out.parent
    out.parent.mkdir(parents=True, exist_ok=True)
    # Its own unprofiled warm-up (above) stands for the benchmark's.
    sys.argv = ["stream.py", "--warm-up", "0", *sys.argv[1:]]
    return stream.main()


def _where(file: str) -> str:
    try:
        return Path(file).resolve().relative_to(stack.ROOT).as_posix()
    except ValueError:
        return file


def _report(path: Path) -> None:
    stats = pstats.Stats(str(path))
    total = sum(tt for _cc, _nc, tt, _ct, _callers in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(
        (
            (ct, nc, f"{_where(file)}:{line}({name})")
            for (file, line, name), (_cc, nc, _tt, ct, _callers) in stats.stats.items()  # type: ignore[attr-defined]
            if re.search(PROJECT, file)
        ),
        reverse=True,
    )
    print(f"\nprofile of the round ({total:.1f} s of CPU under the profiler), project functions by inclusive CPU:")
    for ct, nc, where in rows[:SHOWN]:
        print(f"  {100 * ct / total:5.1f}%  {nc:>7} calls  {where}")
    keep = path.with_name(f"stream-profile-{int(time.time())}.pstat")
    path.rename(keep)
    print(f"  (whole profile: {keep.relative_to(stack.ROOT)})", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--daphne":
        _daphne_under_yappi(sys.argv[2])
    else:
        sys.exit(main())
