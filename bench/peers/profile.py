"""Profile one runtime configuration of the peers workload with pyinstrument.

    PYTHONPATH=/path/to/pyinstrument .venv/bin/python bench/peers/profile.py agentsite sqlite-off --turns 60
    bench/.venv-peers/bin/python bench/peers/profile.py langgraph sqlite --turns 60

Plays --skip turns unprofiled (warm-up, and to profile a long session's late turns), then
--turns turns under pyinstrument, and prints the call tree (wall time, async-aware). The
Agentsite driver gets a fresh SQLite file in a temporary folder (or --database-url).
pyinstrument is in bench/requirements-peers.txt; the project's venv does not carry it, so
point PYTHONPATH at a `pip install --target` copy when profiling Agentsite.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DRIVERS = {
    "agentsite": "agentsite_driver",
    "adk": "adk_driver",
    "langgraph": "langgraph_driver",
    "openai": "openai_driver",
}


async def _profile(driver: object, skip: int, count: int, interval: float) -> str:
    from pyinstrument import Profiler

    setup = getattr(driver, "setup")  # noqa: B009  (a Driver of any of the four modules)
    await setup()
    session = await driver.new_session("profiled")  # type: ignore[attr-defined]  # Driver protocol, duck-typed
    recorder = driver.recorder  # type: ignore[attr-defined]  # Driver protocol, duck-typed
    for number in range(1, skip + 1):
        recorder.sizes, recorder.turn = [], number
        await driver.turn(session, number)  # type: ignore[attr-defined]  # Driver protocol, duck-typed
    profiler = Profiler(interval=interval, async_mode="enabled")
    profiler.start()
    for number in range(skip + 1, skip + count + 1):
        recorder.sizes, recorder.turn = [], number
        await driver.turn(session, number)  # type: ignore[attr-defined]  # Driver protocol, duck-typed
    profiler.stop()
    return profiler.output_text(unicode=True, color=False, show_all=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("runtime", choices=sorted(DRIVERS))
    parser.add_argument("config")
    parser.add_argument("--turns", type=int, default=40, help="profiled turns (default 40)")
    parser.add_argument("--skip", type=int, default=3, help="unprofiled turns first (default 3)")
    parser.add_argument("--interval", type=float, default=0.0005, help="sampling interval, s")
    parser.add_argument("--database-url", default="", help="Agentsite only: instead of a fresh SQLite file")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="agentsite-peers-profile-")
    if args.runtime == "agentsite":
        from bench import turns

        os.environ.update(turns._child_env(args.database_url or f"sqlite:///{workdir}/profile.sqlite3"))
        os.environ.pop("REDIS_URL", None)
    module = importlib.import_module(f"bench.peers.{DRIVERS[args.runtime]}")
    driver = module.build(args.config, workdir)
    print(asyncio.run(_profile(driver, args.skip, args.turns, args.interval)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
