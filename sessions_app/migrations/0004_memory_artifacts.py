"""Long-term memory, its extraction cursors, and versioned artifacts (SPEC 6 and 7).

PostgreSQL also gets the search indexes `sessions_app/memory_backends.py` queries:
- `memory_search_fts`: GIN over `array_to_tsvector(string_to_array(search_tokens, ' '))`,
  the full-text index over the tokens our analyzer wrote (stemmed words, CJK bigrams), so
  the database matches exactly what the in-memory and SQLite backends match;
- `memory_text_trgm`: GIN `pg_trgm` over `lower(text)`, for phrase (substring) matches,
  CJK included.
On SQLite nothing: search there ranks the user's (at most 1,000) memories with BM25 in Python.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS memory_search_fts ON sessions_app_memory "
    "USING gin (array_to_tsvector(string_to_array(search_tokens, ' ')))",
    "CREATE INDEX IF NOT EXISTS memory_text_trgm ON sessions_app_memory USING gin (lower(text) gin_trgm_ops)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS memory_text_trgm",
    "DROP INDEX IF EXISTS memory_search_fts",
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
        ("sessions_app", "0003_event_search"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='MemoryCursor',
            fields=[
                ('session', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='memory_cursor', serialize=False, to='sessions_app.session')),
                ('last_seq', models.PositiveBigIntegerField(default=0)),
                ('extracted_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='Artifact',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('app', models.CharField(max_length=64)),
                ('scope', models.CharField(max_length=80)),
                ('filename', models.CharField(max_length=255)),
                ('version', models.PositiveIntegerField()),
                ('storage_key', models.CharField(max_length=1024)),
                ('mime', models.CharField(max_length=255)),
                ('size', models.PositiveBigIntegerField()),
                ('sha256', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField()),
                ('session', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='artifacts', to='sessions_app.session')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='artifacts', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['filename', 'version'],
                'constraints': [models.UniqueConstraint(fields=('app', 'user', 'scope', 'filename', 'version'), name='artifact_unique_version')],
            },
        ),
        migrations.CreateModel(
            name='Memory',
            fields=[
                ('id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('app', models.CharField(max_length=64)),
                ('kind', models.CharField(choices=[('fact', 'fact'), ('episode', 'episode')], default='fact', max_length=16)),
                ('text', models.TextField()),
                ('topics', models.JSONField(blank=True, default=list)),
                ('event_time', models.DateTimeField(blank=True, null=True)),
                ('participants', models.JSONField(blank=True, default=list)),
                ('location', models.CharField(blank=True, default='', max_length=200)),
                ('search_tokens', models.TextField(blank=True, default='', editable=False)),
                ('token_count', models.PositiveIntegerField(default=0, editable=False)),
                ('embedding', models.JSONField(blank=True, editable=False, null=True)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memories', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-updated_at'],
                'indexes': [models.Index(fields=['app', 'user', '-updated_at'], name='memory_user_recent'), models.Index(fields=['app', 'user', 'kind', 'event_time'], name='memory_user_kind_time')],
            },
        ),
        PostgresOnlySQL(sql=FORWARD, reverse_sql=BACKWARD),
    ]
