"""Re-analyze stored memories with the shared analyzer (issue 22, item 4).

Memory search and session recall now read text with one analyzer
(`sessions_app.core.text.analyze`, memory's input NFKC-normalized first). The memory
analyzer before it kept only ASCII letters and digits (so "café" was "caf" and Thai or
Cyrillic text had no tokens at all) and had its own, longer, stop-word list, so the tokens
stored in `search_tokens` (what PostgreSQL's `memory_search_fts` index and the Python
ranking read) and `token_count` (BM25's length) no longer match what a query is analyzed
into. This migration rewrites both for every memory, in batches.

Forward: the analyzer of the code being migrated (`sessions_app.core.memory.analyze`), so
that the stored tokens are always what search analyzes a query into. Backward: the previous
memory analyzer, frozen below (`previous_tokens`), so migrating back to 0006 restores the
tokens the code of that time expects. Both share `stem`, unchanged by this step.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from django.db import migrations

BATCH = 500

# -- the memory analyzer before 0007, frozen (sessions_app/core/memory/ranking.py of 0006)
_PREVIOUS_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just let ll me more most my myself no nor not
    now of off on once only or other ought our ours ourselves out over own re same shan she should
    shouldn so some such than that the their theirs them themselves then there these they this those
    through to too under until up us ve very was wasn we were weren what when where which while who
    whom why will with won would wouldn you your yours yourself yourselves
    also ever really still yet s t d m o y
    """.split()
)
_PREVIOUS_LATIN = re.compile(r"[a-z0-9]+")
_PREVIOUS_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_PREVIOUS_SPLIT = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+)")
_PREVIOUS_MAX_TOKEN_CHARS = 64


def previous_tokens(text: str) -> list[str]:
    """The search tokens the memory analyzer of migration 0006's time made of `text`."""
    from sessions_app.core.text import stem

    tokens: list[str] = []
    for piece in _PREVIOUS_SPLIT.split(unicodedata.normalize("NFKC", text).lower()):
        if not piece:
            continue
        if _PREVIOUS_CJK.fullmatch(piece):
            if len(piece) == 1:
                tokens.append(piece)
            else:
                tokens.extend(piece[i : i + 2] for i in range(len(piece) - 1))
            continue
        for word in _PREVIOUS_LATIN.findall(piece.replace("'", " ").replace("\u2019", " ")):
            if word in _PREVIOUS_STOP_WORDS or len(word) > _PREVIOUS_MAX_TOKEN_CHARS:
                continue
            tokens.append(stem(word))
    return tokens


def current_tokens(text: str) -> list[str]:
    """The search tokens of `text` under the shared analyzer."""
    from sessions_app.core.memory import analyze

    return analyze(text)


def _batches(rows: Iterable[Any], size: int) -> Iterable[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def retokenize(analyzer: Callable[[str], list[str]]) -> Callable[[Any, Any], None]:
    """A RunPython step rewriting every memory's `search_tokens` and `token_count` with
    `analyzer`; rows whose tokens do not change are not written."""

    def run(apps: Any, schema_editor: Any) -> None:
        memory = apps.get_model("sessions_app", "Memory")
        db = schema_editor.connection.alias
        rows = memory.objects.using(db).only("id", "text", "search_tokens", "token_count").order_by("id")
        for batch in _batches(rows.iterator(chunk_size=BATCH), BATCH):
            changed = []
            for row in batch:
                tokens = analyzer(row.text)
                joined = " ".join(tokens)
                if joined != row.search_tokens or len(tokens) != row.token_count:
                    row.search_tokens, row.token_count = joined, len(tokens)
                    changed.append(row)
            if changed:
                memory.objects.using(db).bulk_update(changed, ["search_tokens", "token_count"], batch_size=BATCH)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0006_history_fingerprint"),
    ]

    operations = [
        migrations.RunPython(retokenize(current_tokens), retokenize(previous_tokens), elidable=False),
    ]
