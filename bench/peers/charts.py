"""Draw the peers benchmark's charts from its JSON: `charts.py bench/results/peers/peers.json`.

Runs in bench/.venv-peers (matplotlib is a peers' requirement, not the project's). For each N:
`latency-N{n}.png` (per-turn latency against turn number) and `chars-N{n}.png` (characters
sent per model call against turn number; the four calls of turn t are drawn at t, t+.25,
t+.5, t+.75), one line per runtime, next to the JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

STYLE = {"agentsite": "-", "adk": "--", "langgraph": "-.", "openai": ":"}


def _style(name: str) -> dict[str, Any]:
    family = name.split("-")[0]
    return {"linestyle": STYLE.get(family, "-"), "linewidth": 2.0 if family == "agentsite" else 1.3}


def draw(path: Path) -> list[Path]:
    document = json.loads(path.read_text())
    m = document["machine"]
    stamp = f"{document['created_at'][:16].replace('T', ' ')} UTC, {m['cpu_count']} CPUs, {m['platform']}"
    written = []
    for n, result in document["results"].items():
        series = result["per_turn"]
        fig, ax = plt.subplots(figsize=(11, 6))
        for name, data in series.items():
            ax.plot(range(1, len(data["ms"]) + 1), data["ms"], label=name, **_style(name))
        ax.set_yscale("log")
        ax.set_xlabel("turn")
        ax.set_ylabel("turn latency, ms (log scale)")
        ax.set_title(f"Per-turn latency, one session of {n} turns (3 lookups + answer per turn)\n{stamp}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        target = path.parent / f"latency-N{n}.png"
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)

        fig, ax = plt.subplots(figsize=(11, 6))
        for name, data in series.items():
            xs = [t + i / len(calls) for t, calls in enumerate(data["chars"], start=1) for i in range(len(calls))]
            ys = [c for calls in data["chars"] for c in calls]
            ax.plot(xs, ys, label=name, **_style(name))
        ax.set_xlabel("turn")
        ax.set_ylabel("characters sent to the model per call")
        ax.set_title(f"Request size per model call, one session of {n} turns\n{stamp}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        target = path.parent / f"chars-N{n}.png"
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} PEERS_JSON", file=sys.stderr)
        sys.exit(2)
    for written_path in draw(Path(sys.argv[1])):
        print(f"chart: {written_path}")
