"""Memory benchmark: search latency at scale, and retrieval quality on LoCoMo.

1. Scale (PostgreSQL): 100 users x 1,000 memories each (100,000 rows, the per-user limit)
   in `agentsite_memory_bench`, dropped and recreated at every run. Memories are
   synthetic sentences from a fixed vocabulary (seeded, so every run has the same data);
   queries are 2-3 words taken from the user's own memories. Reports p50/p95/p99 of
   `MemoryManager.search` (what `DjangoMemoryService.search` runs in its worker thread,
   without the thread hop), and the in-memory backend on the same data as the peer.
2. LoCoMo (`shared/data/locomo/locomo_dev7.json`, read in place): each conversation is a
   user; its `observation` facts are stored as memories (dedupe off, so that every fact
   keeps its evidence ids); each question with evidence goes through the `memory_search`
   tool with top 5. Reports recall@5 (share of a question's evidence turns found in the
   five memories' sources) and hit@5 (at least one), per category, on the in-memory
   backend and on PostgreSQL (same scorer: the numbers should match).

Prints tables and writes `bench/results/memory.md`. No model is called.

    .venv/bin/python bench/memory.py                       # both parts, ~3 minutes
    .venv/bin/python bench/memory.py --users 20 --queries 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/agentsite_memory_bench"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev7.json"
OUTPUT = ROOT / "bench" / "results" / "memory.md"
APP = "bench"
TOP_K = 5
# LoCoMo's categories as its question data uses them (category 2 asks "when", 3 asks for
# inference, 5 has no answer in the conversation).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

SUBJECTS = [
    "team",
    "service",
    "cluster",
    "database",
    "pipeline",
    "dashboard",
    "sister",
    "manager",
    "client",
    "dog",
    "garden",
    "bike",
    "kitchen",
    "laptop",
    "phone",
    "band",
    "course",
    "project",
    "startup",
    "library",
]
VERBS = [
    "runs",
    "prefers",
    "uses",
    "likes",
    "owns",
    "deploys",
    "visits",
    "builds",
    "reads",
    "plays",
    "studies",
    "migrated",
    "fixed",
    "painted",
    "booked",
    "cooked",
    "ordered",
    "wrote",
    "reviewed",
    "shipped",
]
OBJECTS = [
    "go",
    "rust",
    "python",
    "postgres",
    "redis",
    "kafka",
    "kubernetes",
    "terraform",
    "jazz",
    "violin",
    "tennis",
    "sushi",
    "ramen",
    "espresso",
    "oolong",
    "marathon",
    "lisbon",
    "porto",
    "berlin",
    "kyoto",
    "camping",
    "pottery",
    "chess",
    "poetry",
    "sourdough",
    "yoga",
    "cello",
    "hiking",
    "photography",
    "origami",
    "gardening",
    "climbing",
    "surfing",
    "salsa",
    "karaoke",
    "astronomy",
    "woodwork",
    "knitting",
    "sailing",
    "skiing",
]
QUALIFIERS = [
    "on weekends",
    "in production",
    "every morning",
    "since 2019",
    "with friends",
    "at work",
    "for fun",
    "after lunch",
    "twice a week",
    "in the evening",
    "on holidays",
    "for the kids",
    "near home",
    "downtown",
]


# -- setup ---------------------------------------------------------------------------------------


def prepare_postgres(url: str) -> bool:
    """Drop and recreate the benchmark database; False when PostgreSQL does not answer."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL is not reachable at {admin}: {exc}")
        return False
    return True


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ["AGENTSITE_LOG_LEVEL"] = "WARNING"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def timings(samples: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "p50": percentile(ms, 50),
        "p95": percentile(ms, 95),
        "p99": percentile(ms, 99),
        "mean": statistics.fmean(ms),
    }


# -- 1. scale --------------------------------------------------------------------------------------


def synthetic_memories(rng: random.Random, count: int) -> list[str]:
    texts: list[str] = []
    for _ in range(count):
        subject, verb = rng.choice(SUBJECTS), rng.choice(VERBS)
        objects = rng.sample(OBJECTS, 2)
        texts.append(f"The {subject} {verb} {objects[0]} and {objects[1]} {rng.choice(QUALIFIERS)}")
    return texts


def scale(args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from sessions_app.core.memory import (
        InMemoryMemoryStore,
        MemoryDraft,
        MemoryManager,
        SearchOptions,
        UserKey,
        analyze,
    )
    from sessions_app.memory_backends import DjangoMemoryStore

    rng = random.Random(7)
    user_model = get_user_model()
    users = user_model.objects.bulk_create([user_model(username=f"bench-{i:03d}") for i in range(args.users)])
    store = DjangoMemoryStore()
    memory_store = InMemoryMemoryStore()
    texts_by_user: dict[str, list[str]] = {}
    started = time.perf_counter()
    for user in users:
        key = UserKey(app=APP, user_id=str(user.pk))
        texts = synthetic_memories(rng, args.per_user)
        texts_by_user[key.user_id] = texts
        drafts = [(MemoryDraft(text=t), analyze(t)) for t in texts]
        store.bulk_insert(key, drafts, limit=args.per_user)
        for draft, tokens in drafts:
            memory_store.insert(key, draft, tokens=tokens, embedding=None, limit=args.per_user)
    load_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE sessions_app_memory")
        cursor.execute("SELECT count(*) FROM sessions_app_memory")
        rows = cursor.fetchone()[0]
    print(f"loaded {rows} memories for {len(users)} users in {load_s:.1f}s")

    queries: list[tuple[UserKey, str]] = []
    for _ in range(args.queries):
        user_id = rng.choice(list(texts_by_user))
        words = [w for w in rng.choice(texts_by_user[user_id]).split() if w.lower() not in {"the", "and"}]
        queries.append((UserKey(app=APP, user_id=user_id), " ".join(rng.sample(words, rng.choice((2, 3))))))

    results: dict[str, Any] = {"rows": rows, "users": len(users), "load_s": load_s, "queries": len(queries)}
    for name, manager in (("postgres", MemoryManager(store)), ("memory", MemoryManager(memory_store))):
        for key, query in queries[:20]:  # warm caches and connections
            manager.search(key, SearchOptions(query=query))
        samples: list[float] = []
        hits = 0
        for key, query in queries:
            t0 = time.perf_counter()
            found = manager.search(key, SearchOptions(query=query))
            samples.append(time.perf_counter() - t0)
            hits += bool(found)
        results[name] = {**timings(samples), "answered": hits / len(queries)}
        print(
            f"{name:9} p50 {results[name]['p50']:.2f} ms  p95 {results[name]['p95']:.2f} ms  "
            f"({hits}/{len(queries)} queries with results)"
        )
    return results


# -- 2. LoCoMo -------------------------------------------------------------------------------------------


def evidence_ids(value: Any) -> set[str]:
    raw = value if isinstance(value, list) else [value]
    ids: set[str] = set()
    for item in raw:
        ids.update(re.findall(r"D\d+:\d+", str(item)))
    return ids


def load_locomo(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def locomo(
    conversations: list[dict[str, Any]], service_factory: Callable[[], Any], user_ids: Sequence[str]
) -> dict[str, Any]:
    from runs.core.tools.base import ToolContext
    from sessions_app.core.memory import MemoryDraft, UserKey
    from sessions_app.core.session import Session
    from sessions_app.memory_backends import memory_function_tools

    search_tool = next(t for t in memory_function_tools(mode="auto") if t.name == "memory_search")
    service = service_factory()

    async def run() -> dict[str, Any]:
        per_category: dict[int, list[tuple[float, bool]]] = defaultdict(list)
        stored = 0
        started = time.perf_counter()
        search_s: list[float] = []
        for conversation, user_id in zip(conversations, user_ids, strict=True):
            key = UserKey(app=APP, user_id=user_id)
            sources: dict[str, set[str]] = {}
            for observations in conversation["observation"].values():
                for speaker, facts in observations.items():
                    for fact in facts:
                        text, evidence = fact[0], fact[1] if len(fact) > 1 else ""
                        write = await service.add(key, MemoryDraft(text=text, topics=(speaker,)), dedupe=False)
                        sources[write.entry.id] = evidence_ids(evidence)
                        stored += 1
            context = ToolContext(
                session=Session(app=APP, user_id=user_id, id=f"locomo-{conversation['sample_id']}"),
                invocation_id="bench",
                tool_call_id="bench",
                agent_name="bench",
                cancel_event=asyncio.Event(),
                services={"memory": service},
            )
            for qa in conversation["qa"]:
                wanted = evidence_ids(qa.get("evidence", []))
                if not wanted:
                    continue
                t0 = time.perf_counter()
                found = await search_tool.call(context, {"query": qa["question"], "limit": TOP_K})
                search_s.append(time.perf_counter() - t0)
                got: set[str] = set()
                for memory in found["memories"]:
                    got |= sources.get(memory["id"], set())
                per_category[int(qa["category"])].append((len(wanted & got) / len(wanted), bool(wanted & got)))
        return {
            "stored": stored,
            "seconds": time.perf_counter() - started,
            "search": timings(search_s),
            "categories": {
                c: {"n": len(v), "recall": statistics.fmean(r for r, _ in v), "hit": statistics.fmean(h for _, h in v)}
                for c, v in sorted(per_category.items())
            },
            "overall": {
                "n": sum(len(v) for v in per_category.values()),
                "recall": statistics.fmean(r for v in per_category.values() for r, _ in v),
                "hit": statistics.fmean(h for v in per_category.values() for _, h in v),
            },
        }

    return asyncio.run(run())


# -- report --------------------------------------------------------------------------------------------------


def report(
    scale_result: dict[str, Any] | None, locomo_results: dict[str, dict[str, Any]], args: argparse.Namespace
) -> str:
    lines = [
        "# Memory benchmark",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.platform()}, "
        f"Python {platform.python_version()}. `bench/memory.py`; no model calls.",
        "",
    ]
    lines += ["## Search latency at scale", ""]
    if scale_result is None:
        lines += ["Skipped (PostgreSQL not reachable, or `--skip-scale`).", ""]
    else:
        lines += [
            f"{scale_result['users']} users x {args.per_user} memories = {scale_result['rows']:,} rows "
            f"(loaded in {scale_result['load_s']:.1f} s); {scale_result['queries']} keyword queries of 2-3 words "
            "from the user's own memories, top 10, one at a time.",
            "",
            "| backend | p50 ms | p95 ms | p99 ms | mean ms | queries with results |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name in ("postgres", "memory"):
            r = scale_result[name]
            lines.append(
                f"| {name} | {r['p50']:.2f} | {r['p95']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} | {r['answered']:.0%} |"
            )
        lines.append("")
    lines += ["## LoCoMo: recall of evidence turns through `memory_search` (top 5)", ""]
    if not locomo_results:
        lines += ["Skipped.", ""]
    for backend, result in locomo_results.items():
        lines += [
            f"### {backend}",
            "",
            f"{result['stored']} observation facts stored as memories; {result['overall']['n']} questions with evidence; "
            f"search p50 {result['search']['p50']:.2f} ms, p95 {result['search']['p95']:.2f} ms.",
            "",
            "| category | questions | recall@5 | hit@5 |",
            "|---|---:|---:|---:|",
        ]
        for category, row in result["categories"].items():
            lines.append(
                f"| {category} {CATEGORIES.get(category, '?')} | {row['n']} | {row['recall']:.3f} | {row['hit']:.3f} |"
            )
        overall = result["overall"]
        lines += [f"| **all** | {overall['n']} | **{overall['recall']:.3f}** | **{overall['hit']:.3f}** |", ""]
    lines += [
        "How to read it: recall@5 is the share of a question's evidence turns (`D<session>:<turn>`) that the five",
        "memories returned cite as their source; hit@5 counts a question when at least one is found. Observations are",
        "LoCoMo's own extracted facts, so this measures retrieval, not extraction. Lexical search only (no embedder):",
        'questions that share no word with their evidence ("What might ...", paraphrases) are the misses.',
        "Both backends use the same BM25 scorer over the same tokens, so their LoCoMo numbers match up to the order of tied scores.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--per-user", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-locomo", action="store_true")
    args = parser.parse_args()

    postgres = prepare_postgres(args.postgres_url)
    if postgres:
        setup_django(args.postgres_url)
    else:
        import tempfile

        setup_django(f"sqlite:///{tempfile.mkdtemp()}/memory-bench.sqlite3")
        print("running LoCoMo on SQLite and in memory only")

    scale_result = scale(args) if postgres and not args.skip_scale else None

    locomo_results: dict[str, dict[str, Any]] = {}
    if not args.skip_locomo:
        if not args.locomo.exists():
            print(f"LoCoMo data not found at {args.locomo}; skipped")
        else:
            from django.contrib.auth import get_user_model

            from sessions_app.core.memory import InMemoryMemoryService
            from sessions_app.memory_backends import DjangoMemoryService

            conversations = load_locomo(args.locomo)
            names = [f"locomo-{c['sample_id']}" for c in conversations]
            locomo_results["memory"] = locomo(conversations, InMemoryMemoryService, names)
            user_model = get_user_model()
            users = [user_model.objects.create_user(username=name) for name in names]
            label = "postgres" if postgres else "sqlite"
            locomo_results[label] = locomo(conversations, DjangoMemoryService, [str(u.pk) for u in users])
            for backend, result in locomo_results.items():
                overall = result["overall"]
                print(
                    f"LoCoMo {backend:8} recall@5 {overall['recall']:.3f}  hit@5 {overall['hit']:.3f}  "
                    f"({overall['n']} questions, {result['stored']} memories, {result['seconds']:.1f}s)"
                )

    text = report(scale_result, locomo_results, args)
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print()
    print(text)
    print(f"written to {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
