"""Search indexes for session recall (PostgreSQL only).

PostgreSQL: `pg_trgm`, a GIN full-text index on `to_tsvector('simple', ...)` and a GIN
trigram index (substring search: the lexical scan, and scripts written without spaces),
both over the first `SEARCH_TEXT_CHARS` characters of `text`, a bound that keeps a
multi-megabyte tool result from failing its insert on tsvector's 1 MB limit.
`sessions_app/search.py` queries exactly these expressions (a test holds them equal), so
the planner can use the indexes.

SQLite: nothing. Recall there ranks the user's recent events with BM25 in Python, under a
scan cap (see `sessions_app/search.py`).
"""

from django.db import migrations

SEARCH_TEXT_CHARS = 100_000
# ASCII punctuation becomes a space (so "v1.2", "a-b" and "x@y.com" split into words, as
# the Python tokenizer splits them), and each character of a script written without
# spaces stands alone (so a Chinese bigram is two lexemes the index can intersect).
FTS_DOCUMENT = (
    r"to_tsvector('simple'::regconfig, regexp_replace(regexp_replace("
    rf"left(text, {SEARCH_TEXT_CHARS}), '[!-/:-@\[-`{{-~]+', ' ', 'g'), "
    r"'([\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
    r"\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])', ' \1 ', 'g'))"
)
TRGM_DOCUMENT = f"left(text, {SEARCH_TEXT_CHARS})"

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS event_text_fts ON sessions_app_event USING gin (({FTS_DOCUMENT}))",
    f"CREATE INDEX IF NOT EXISTS event_text_trgm ON sessions_app_event USING gin (({TRGM_DOCUMENT}) gin_trgm_ops)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS event_text_trgm",
    "DROP INDEX IF EXISTS event_text_fts",
    # The extension stays: other tables may use it, and dropping it needs more rights.
]


class PostgresOnlySQL(migrations.RunSQL):
    """RunSQL that does nothing on any database but PostgreSQL."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0002_governance"),
    ]

    operations = [
        PostgresOnlySQL(sql=FORWARD, reverse_sql=BACKWARD),
    ]
