"""C7 of `bench/context_beyond.py`, evidence-grade recall: LoCoMo dev evidence recall@5 and MRR@10,
loaded-evidence efficiency, LongMemEval hit rate and the abstention proxy."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench.context_beyond_ledgers import APP, DATA, T0, count, mean, summary_through
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex, session_load, session_search

RECALL_K = 5
MRR_DEPTH = 10


def _evidence_rank(found: Sequence[str], evidence: set[str]) -> float:
    return next((1.0 / (r + 1) for r, key in enumerate(found[:MRR_DEPTH]) if key in evidence), 0.0)


async def recall_locomo() -> dict[str, Any]:
    """LoCoMo dev: one session per conversation, every LoCoMo session but the last hidden
    behind a summary boundary; questions with evidence in the hidden part."""
    from rank_bm25 import BM25Okapi

    from bench.recall import load_locomo, plain_tokens

    cases, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    scores: dict[str, dict[str, list[float]]] = {}
    loads: dict[str, list[int]] = {"unit_loaded": [], "unit_evidence": [], "window_loaded": [], "window_evidence": []}
    found_by_load: dict[str, list[float]] = {"unit": [], "window": []}

    def score(policy: str, found: Sequence[str], groups: list[set[str]]) -> None:
        row = scores.setdefault(policy, {"recall@5": [], "mrr@10": []})
        row["recall@5"].append(sum(1 for g in groups if g & set(found[:RECALL_K])) / len(groups))
        row["mrr@10"].append(_evidence_rank(found, set().union(*groups)))

    for case in cases:
        last_session = max(int(t.key[1:].split(":")[0]) for t in case.turns)
        hidden_keys = {t.key for t in case.turns if int(t.key[1:].split(":")[0]) < last_session}
        session = await service.create_session(app=APP, user_id="bench", session_id=case.name)
        keys: dict[str, str] = {}
        tokens: dict[str, int] = {}
        for n, turn in enumerate(case.turns):
            event = Event(
                author=turn.speaker,
                message=Message(role=turn.role, content=turn.text),  # type: ignore[arg-type]  # user/assistant
                created_at=T0 + timedelta(seconds=30 * n),
            )
            saved = await service.append_event(session, event)
            keys[saved.id] = turn.key
            tokens[turn.key] = count(turn.text)
        last_hidden = max((e for e in session.events if keys[e.id] in hidden_keys), key=lambda e: e.seq or 0)
        await service.put_summary(
            session.key,
            dataclasses.replace(summary_through(session.events, last_hidden.seq or 0, "(summary)", 1), filter_key=""),
        )
        loaded = await service.get_session(session.key, event_limit=0)
        assert loaded is not None
        hidden_turns = [t for t in case.turns if t.key in hidden_keys]
        bm25 = BM25Okapi([plain_tokens(t.text) or ["\u2205"] for t in hidden_turns])
        for question in case.questions:
            groups = [g & hidden_keys for g in question.evidence if g & hidden_keys]
            if not groups:
                continue
            ranked = bm25.get_scores(plain_tokens(question.text))
            score(
                "BM25 (rank-bm25, word tokens)",
                [hidden_turns[i].key for i in sorted(range(len(hidden_turns)), key=lambda i: -ranked[i])],
                groups,
            )
            for policy, ranking in (
                ("seed: lexical session_search", "lexical"),
                ("ours: hybrid session_search", "hybrid"),
            ):
                answer = await session_search(
                    index, session=loaded, query=question.text, top_k=MRR_DEPTH, ranking=ranking
                )  # type: ignore[arg-type]  # literal
                score(policy, [keys[r["event_id"]] for r in answer["results"]], groups)
                if ranking != "hybrid":
                    continue
                # Loaded-evidence efficiency: load each of the top 5 hits as a unit and as the
                # seed's fixed window (1 before, 1 after); count distinct turns loaded.
                evidence = set().union(*groups)
                for mode in ("unit", "window"):
                    got: set[str] = set()
                    for r in answer["results"][:RECALL_K]:
                        window = await session_load(index, session=loaded, event_id=r["event_id"], unit=mode == "unit")
                        got.update(keys[m["event_id"]] for m in window["messages"])
                    loads[f"{mode}_loaded"].append(sum(tokens[k] for k in got))
                    loads[f"{mode}_evidence"].append(sum(tokens[k] for k in got & evidence))
                    found_by_load[mode].append(sum(1 for g in groups if g & got) / len(groups))
    table = {p: {m: mean(v) for m, v in row.items()} | {"questions": len(row["mrr@10"])} for p, row in scores.items()}
    efficiency = {
        mode: sum(loads[f"{mode}_evidence"]) / max(1, sum(loads[f"{mode}_loaded"])) for mode in ("unit", "window")
    }
    return {
        "rankings": table,
        "efficiency": efficiency,
        "loaded_tokens_per_question": {m: mean(loads[f"{m}_loaded"]) for m in ("unit", "window")},
        "evidence_in_loaded": {m: mean(found_by_load[m]) for m in ("unit", "window")},
    }


_LME_MESSAGE = re.compile(r"^(user|assistant): ", re.MULTILINE)


async def recall_longmemeval() -> dict[str, Any]:
    """LongMemEval (first 25, oracle): every case's sessions belong to one user; each
    question searches the user's other sessions (scope other_sessions, top 5). Hit: a hit
    in one of its answer sessions. The file holds no abstention question, so a proxy:
    the same question with its own case's sessions removed; any hit is a false hit."""
    cases = json.loads((DATA / "longmemeval" / "onemem_longmemeval_oracle_first25.json").read_text())["cases"]
    out: dict[str, Any] = {}
    for ranking in ("lexical", "hybrid"):
        hits = false_hits = 0
        for absent in (None, *range(len(cases))):
            service = InMemorySessionService()
            index = InMemoryRecallIndex(service)
            owner: dict[str, str] = {}
            for c, case in enumerate(cases):
                if c == absent:
                    continue
                for episode in case["episodes"]:
                    sid = episode["text"].split("\n", 1)[0].rsplit(" ", 1)[-1]
                    stored = await service.create_session(app=APP, user_id="u", session_id=f"{c}:{sid}")
                    owner[stored.id] = sid
                    parts = _LME_MESSAGE.split(episode["text"])
                    for role, text in zip(parts[1::2], parts[2::2], strict=True):
                        await service.append_event(
                            stored, Event(author=role, message=Message(role=role, content=text.strip()))
                        )  # type: ignore[arg-type]  # user/assistant
            current = await service.create_session(app=APP, user_id="u", session_id="now")
            for c, case in enumerate(cases):
                if absent is not None and c != absent:
                    continue
                answer = await session_search(
                    index,
                    session=current,
                    query=case["queries"][0]["query"],
                    scope="other_sessions",
                    top_k=RECALL_K,
                    ranking=ranking,
                )  # type: ignore[arg-type]  # literal
                if absent is None:
                    hits += any(
                        owner[r["session_id"]] in case["metadata"]["answer_session_ids"] for r in answer["results"]
                    )
                else:
                    false_hits += bool(answer["results"])
        out[ranking] = {
            "questions": len(cases),
            "hit_rate@5": hits / len(cases),
            "abstention_proxy_false_hit_rate": false_hits / len(cases),
        }
    return out


def report_c7(locomo: dict[str, Any], lme: dict[str, Any]) -> str:
    base = locomo["rankings"]["BM25 (rank-bm25, word tokens)"]
    lines = [
        "## C7: evidence-grade recall (LoCoMo dev, 7 conversations; every LoCoMo session but the last hidden)",
        "",
        "| ranking | questions | recall@5 | MRR@10 | vs BM25 (points, R@5 / MRR) |",
        "|---|---|---|---|---|",
    ]
    for policy, row in locomo["rankings"].items():
        lines.append(
            f"| {policy} | {row['questions']} | {row['recall@5']:.3f} | {row['mrr@10']:.3f} | "
            f"{100 * (row['recall@5'] - base['recall@5']):+.1f} / {100 * (row['mrr@10'] - base['mrr@10']):+.1f} |"
        )
    eff, tok, got = locomo["efficiency"], locomo["loaded_tokens_per_question"], locomo["evidence_in_loaded"]
    lines += [
        "",
        f"Loading the top {RECALL_K} hybrid hits: whole units (`session_load(unit=True)`) vs the seed's fixed windows (1 before, 1 after).",
        "",
        "| load | evidence tokens / loaded tokens | loaded tokens per question | evidence groups in what was loaded |",
        "|---|---|---|---|",
        f"| units | {eff['unit']:.3f} ({eff['unit'] / eff['window']:.2f}x) | {tok['unit']:.0f} | {got['unit']:.3f} |",
        f"| fixed windows ±1 | {eff['window']:.3f} (1x) | {tok['window']:.0f} | {got['window']:.3f} |",
        "",
        "LongMemEval (first 25, oracle sessions of all 25 cases under one user; scope other_sessions, top 5): "
        + "; ".join(
            f"{r}: hit rate {v['hit_rate@5']:.0%}, false-hit rate on the abstention proxy {v['abstention_proxy_false_hit_rate']:.0%}"
            for r, v in lme.items()
        )
        + ". The file holds no abstention question; the proxy asks each question with its own case's sessions removed.",
    ]
    return "\n".join(lines)
