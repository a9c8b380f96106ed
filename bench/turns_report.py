"""bench/turns.py's comparison: early against late turns, per backend, as a table and a verdict."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

from bench.turns_agent import EVENTS_PER_TURN

TARGET = "the cost of a turn does not grow with the session: late/early ratio at most 1.3"
TARGET_RATIO = 1.3
WINDOW = 10


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(late: float, early: float) -> float | None:
    return late / early if early > 0 else None


def _pooled(series: list[list[Any]], start: int, stop: int) -> list[Any]:
    """The samples of turns start+1..stop of every session."""
    return [value for session in series for value in session[start:stop]]


def _window(result: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    latency = _pooled(result["latency_ms"], start, stop)
    statements: dict[str, list[float]] = {}
    turns = _pooled(result["statements"], start, stop)
    for per_turn in turns:
        for label, (count, rows) in per_turn.items():
            total = statements.setdefault(label, [0.0, 0.0])
            total[0] += count / len(turns)
            total[1] += rows / len(turns)
    return {
        "turns": [start + 1, stop],
        "samples": len(latency),
        "p50_ms": round(percentile(latency, 0.50), 3),
        "p95_ms": round(percentile(latency, 0.95), 3),
        "queries_per_turn": round(_mean(_pooled(result["queries"], start, stop)), 2),
        "rows_per_turn": round(_mean(_pooled(result["rows"], start, stop)), 2),
        "request_messages": round(_mean(_pooled(result["request_messages"], start, stop)), 1),
        "statements": {k: {"queries": round(v[0], 2), "rows": round(v[1], 2)} for k, v in sorted(statements.items())},
    }


def _growth(early: dict[str, Any], late: dict[str, Any]) -> list[dict[str, Any]]:
    """Statements whose count or rows per turn changed between the two windows."""
    changed = []
    for label in sorted(set(early["statements"]) | set(late["statements"])):
        before = early["statements"].get(label, {"queries": 0.0, "rows": 0.0})
        after = late["statements"].get(label, {"queries": 0.0, "rows": 0.0})
        delta_rows = after["rows"] - before["rows"]
        delta_queries = after["queries"] - before["queries"]
        if abs(delta_rows) >= 0.5 or abs(delta_queries) >= 0.5:
            changed.append({"statement": label, "early": before, "late": after, "rows_delta": round(delta_rows, 2)})
    return sorted(changed, key=lambda c: -abs(c["rows_delta"]))


def summarize(name: str, result: dict[str, Any]) -> dict[str, Any]:
    turns = result["turns"]
    size = min(WINDOW, turns // 2)
    early = _window(result, 0, size)
    late = _window(result, turns - size, turns)
    ratios = {
        "p50": _ratio(late["p50_ms"], early["p50_ms"]),
        "queries": _ratio(late["queries_per_turn"], early["queries_per_turn"]),
        "rows": _ratio(late["rows_per_turn"], early["rows_per_turn"]),
    }
    measured = [r for r in ratios.values() if r is not None]
    return {
        "status": "ok",
        "database": result["database"],
        "turns": turns,
        "elapsed_s": result["elapsed_s"],
        "early": early,
        "late": late,
        "ratios": {k: round(v, 3) if v is not None else None for k, v in ratios.items()},
        "growth": _growth(early, late),
        "verdict": "MEETS" if all(r <= TARGET_RATIO for r in measured) else "MISSES",
        "repeats": result["repeats"],
        # Per turn number, across sessions: median latency, mean queries, rows, messages.
        "per_turn": {
            "latency_ms": [round(percentile(v, 0.5), 3) for v in zip(*result["latency_ms"], strict=True)],
            **{
                k: [round(_mean(v), 2) for v in zip(*result[k], strict=True)]
                for k in ("queries", "rows", "request_messages")
            },
        },
    }


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"x{value:.2f}"


def report(summaries: dict[str, dict[str, Any]], turns: int, repeats: int) -> list[str]:
    size = min(WINDOW, turns // 2)
    early_turns, late_turns = f"{1}-{size}", f"{turns - size + 1}-{turns}"
    sessions = "one session" if repeats == 1 else f"{repeats} sessions (one after the other)"
    lines = [
        f"Turn benchmark: {sessions} of {turns} turns per backend; a turn = user message -> 3 tool calls",
        f"in one model response -> text answer ({EVENTS_PER_TURN} ledger events), timed as Runner.start + handle.wait.",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; early = turns {early_turns}, late = turns "
        f"{late_turns}, {size * repeats} samples per window; queries and rows are means per turn.",
        "",
        f"{'backend':<9} {'turns':<9} {'p50 ms':>8} {'p95 ms':>8} {'queries/turn':>13} {'rows/turn':>10} "
        f"{'msgs/request':>13}",
    ]
    for name, s in summaries.items():
        if s["status"] != "ok":
            lines.append(f"{name:<9} {s['status'].upper()}: {s['reason']}")
            continue
        lines.append(f"{name:<9} {s['database']}")
        for label, w in ((early_turns, s["early"]), (late_turns, s["late"])):
            lines.append(
                f"{'':<9} {label:<9} {w['p50_ms']:>8.2f} {w['p95_ms']:>8.2f} {w['queries_per_turn']:>13.1f} "
                f"{w['rows_per_turn']:>10.1f} {w['request_messages']:>13.1f}"
            )
        r = s["ratios"]
        lines.append(
            f"{'':<9} {'late/early':<10}{_fmt_ratio(r['p50']):>7} {'':>8} {_fmt_ratio(r['queries']):>13} "
            f"{_fmt_ratio(r['rows']):>10} {_fmt_ratio(_ratio(s['late']['request_messages'], s['early']['request_messages'])):>13}"
        )
    peer = summaries.get("memory")
    if peer is not None and peer["status"] == "ok":
        against = [
            f"{name} x{s['early']['p50_ms'] / peer['early']['p50_ms']:.1f}"
            for name, s in summaries.items()
            if name != "memory" and s["status"] == "ok"
        ]
        if against:
            lines += ["", "Early p50 against the in-memory peer: " + ", ".join(against)]
    growth = [(name, g) for name, s in summaries.items() if s["status"] == "ok" for g in s["growth"][:3]]
    if growth:
        lines += ["", "What grows (per turn, early -> late, by statement):"]
        for name, g in growth:
            lines.append(
                f"  {name:<9} {g['statement']}: queries {g['early']['queries']:.1f} -> {g['late']['queries']:.1f}, "
                f"rows {g['early']['rows']:.1f} -> {g['late']['rows']:.1f}"
            )
    lines += ["", f"Verdict (target: {TARGET}):"]
    for name, s in summaries.items():
        if s["status"] != "ok":
            lines.append(f"  {name:<9} {s['status'].upper()}: {s['reason']}")
            continue
        e, la, r = s["early"], s["late"], s["ratios"]
        lines.append(
            f"  {name:<9} {s['verdict']}: p50 {_fmt_ratio(r['p50'])} ({e['p50_ms']:.2f} -> {la['p50_ms']:.2f} ms), "
            f"queries {_fmt_ratio(r['queries'])} ({e['queries_per_turn']:.1f} -> {la['queries_per_turn']:.1f}), "
            f"rows {_fmt_ratio(r['rows'])} ({e['rows_per_turn']:.1f} -> {la['rows_per_turn']:.1f})"
        )
    return lines
