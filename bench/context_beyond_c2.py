"""C2 of `bench/context_beyond.py`, pinned intent: directives and corrections planted, forced lossy
compactions, the final request of four policies scored."""

from __future__ import annotations

import random
from typing import Any

from bench.context_beyond_ledgers import APP, WINDOW, LedgerBuilder, count, lossy_summary, mean, summary_through
from runs.core.context.governance import ContextGovernance, PinnedConfig
from runs.core.context.request import build_context
from sessions_app.core.session import Session, Summary

DIRECTIVES = [
    "Always write dates as YYYY-MM-DD.",
    "Never mention the quarterly budget figures.",
    "Keep each answer under 120 words.",
    "Always address me as Captain.",
    "Don't use emoji in your replies.",
    "Always cite the source ticket number.",
    "Never schedule meetings on Fridays.",
    "Use metric units for every measurement.",
    "Always reply in British English spelling.",
    "Never share my phone number with anyone.",
    "Make sure every code sample uses Python 3.11 syntax.",
    "Always list risks before recommendations.",
    "Don't book flights with overnight layovers.",
    "Always round prices to whole euros.",
    "Never recommend restaurants serving shellfish.",
    "Use the staging cluster for all experiments.",
    "Always end summaries with a next step.",
    "From now on, keep my calendar in Lisbon time.",
    "Never store passwords in plain text notes.",
    "Always check the weather before suggesting hikes.",
]
CORRECTIONS = {
    0: "Actually, write dates as DD/MM/YYYY.",
    3: "Actually, address me as Commander.",
    7: "Actually, use imperial units for every measurement.",
    13: "Actually, round prices to whole dollars.",
    17: "Actually, keep my calendar in Tokyo time.",
}
COMPACTIONS = 10
SUMMARY_BUDGET = 600
LOSS = 0.5
CODEX_USER_TOKENS = 20_000
CODEX_WINDOW = 272_000
POLICIES = ("ours: pinned block", "summary only", "Codex: user msgs <= 20k", "Codex scaled: user msgs <= 7.4% window")


def plant(
    turns: list[tuple[str, str]], rng: random.Random
) -> tuple[list[tuple[str, str]], dict[int, int], dict[int, int]]:
    """Turns with the directives and corrections appended to user messages, and where each went."""
    n = len(turns)
    spots = rng.sample(range(1, int(0.6 * n)), len(DIRECTIVES))
    where = dict(enumerate(spots))
    fixes = {i: rng.randrange(where[i] + 1, int(0.85 * n)) for i in CORRECTIONS}
    texts: dict[int, list[str]] = {}
    for i, spot in where.items():
        texts.setdefault(spot, []).append(DIRECTIVES[i])
    for i, spot in fixes.items():
        texts.setdefault(spot, []).append(CORRECTIONS[i])
    planted = [(u + "".join("\n" + t for t in texts.get(k, [])), a) for k, (u, a) in enumerate(turns)]
    return planted, where, fixes


def pinned_session(name: str, turns: list[tuple[str, str]], rng: random.Random) -> dict[str, Any]:
    planted, _, _ = plant(turns, rng)
    ledger = LedgerBuilder()
    ends: list[int] = []
    for k, (user, answer) in enumerate(planted):
        ledger.exchange(k, user, answer)
        ends.append(len(ledger.events))
    events = ledger.events
    summary: Summary | None = None
    through = 0
    for c in range(1, COMPACTIONS + 1):
        cut = ends[max(0, round(c * 0.9 * len(planted) / COMPACTIONS) - 1)]
        text = lossy_summary(
            summary.text if summary else "", events[through:cut], budget=SUMMARY_BUDGET, drop=LOSS, rng=rng
        )
        summary = summary_through(events, cut, text, c)
        through = cut
    assert summary is not None
    session = Session(
        app=APP, user_id="alice", id=name, events=list(events), summaries={APP: summary}, last_seq=len(events)
    )
    governed = ContextGovernance(pinned=PinnedConfig())
    ours = build_context(
        session, filter_key=APP, instruction="Be helpful.", tools=[], governance=governed, window=WINDOW
    )
    plain = build_context(
        session, filter_key=APP, instruction="Be helpful.", tools=[], governance=ContextGovernance(), window=WINDOW
    )
    tail = [i.message.content for i in plain.items]
    users = [e.text for e in events[:through] if e.is_user_message]

    def codex(budget: int) -> tuple[str, int]:
        kept: list[str] = []
        used = 0
        for text in reversed(users):  # the newest first; the oldest are cut
            cost = count(text)
            if used + cost > budget:
                break
            kept.append(text)
            used += cost
        return "\n".join([*reversed(kept), summary.text, *tail]), used  # type: ignore[union-attr]

    scaled = int(CODEX_USER_TOKENS * WINDOW / CODEX_WINDOW)
    requests = {
        POLICIES[0]: ("\n".join(m.content for m in ours.request.messages), ours.pinned.tokens if ours.pinned else 0),
        POLICIES[1]: ("\n".join(m.content for m in plain.request.messages), 0),
        POLICIES[2]: codex(CODEX_USER_TOKENS),
        POLICIES[3]: codex(scaled),
    }
    in_force = [CORRECTIONS.get(i, d) for i, d in enumerate(DIRECTIVES)]
    superseded = {d: CORRECTIONS[i] for i, d in enumerate(DIRECTIVES) if i in CORRECTIONS}
    planted_texts = set(DIRECTIVES) | set(CORRECTIONS.values())
    out: dict[str, Any] = {
        "session": name,
        "turns": len(planted),
        "events": len(events),
        "summary_tokens": count(summary.text),
    }
    for policy, (text, intent_tokens) in requests.items():
        out[policy] = {
            "survival": sum(d in text for d in in_force) / len(in_force),
            "stale": sum(old in text and new not in text for old, new in superseded.items()),
            "superseded_present": sum(old in text for old in superseded),
            "intent_tokens": intent_tokens,
            "intent_share_of_window": intent_tokens / WINDOW,
        }
    shown = ours.pinned.shown if ours.pinned else ()
    out["pins_active"] = len(shown) + (len(ours.pinned.omitted) if ours.pinned else 0)
    out["pins_false"] = sum(r.text not in planted_texts for r in shown)
    out["pins_omitted"] = len(ours.pinned.omitted) if ours.pinned else 0
    return out


def report_c2(rows: list[dict[str, Any]]) -> str:
    from bench.context_scoped import bootstrap  # 95% interval over sessions

    def survival(values: list[dict[str, Any]]) -> str:
        share, low, high = bootstrap([v["survival"] for v in values])
        return f"{share:.1%} [{low:.1%}, {high:.1%}] (min {min(v['survival'] for v in values):.0%})"

    lines = [
        f"## C2: pinned intent (20 directives + 5 corrections planted; {COMPACTIONS} forced compactions, "
        f"extractive surrogate {SUMMARY_BUDGET} tokens, {LOSS:.0%} of sentences dropped; window {WINDOW:,})",
        "",
        "| data | policy | survival, 95% CI over sessions | stale | superseded shown | intent tokens (% window) |",
        "|---|---|---|---|---|---|",
    ]
    for data in ("locomo", "qmsum"):
        subset = [r for r in rows if r["data"] == data]
        for policy in POLICIES:
            values = [r[policy] for r in subset]
            lines.append(
                f"| {data} ({len(subset)}) | {policy} | {survival(values)} | {sum(v['stale'] for v in values)} | "
                f"{sum(v['superseded_present'] for v in values)} | {mean([v['intent_tokens'] for v in values]):,.0f} "
                f"({mean([v['intent_share_of_window'] for v in values]):.1%}, max {max(v['intent_share_of_window'] for v in values):.1%}) |"
            )
    lines += [
        "",
        "Pinned records besides the planted ones (extractor false positives), per session: "
        + ", ".join(f"{r['session']} {r['pins_false']}" for r in rows)
        + f"; over the budget: {sum(r['pins_omitted'] for r in rows)} in all.",
    ]
    for data in ("locomo", "qmsum"):
        subset = [float(r["pins_false"]) for r in rows if r["data"] == data]
        if subset:
            per, low, high = bootstrap(subset)
            lines.append(
                f"False pins per {data} session: {per:.2f} [{low:.2f}, {high:.2f}] (95% bootstrap over sessions)."
            )
    return "\n".join(lines)
