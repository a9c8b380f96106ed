"""Deployment facts: Django, the stores, the model endpoint, the processes and the demo (issue 22, item 3)."""

from __future__ import annotations

from agentsite.config.variable import Variable, declare

_DJANGO = "Django"
_STORES = "Database, Redis and files"
_MODEL = "Model"
_PROCESS = "Processes and logs"
_DEMO = "Demo"

# Django itself: debug, the secret key, the hosts and origins it trusts.
DJANGO: tuple[Variable, ...] = (
    declare("DJANGO_DEBUG", "boolean", False, _DJANGO, "Django's debug mode (never in production)"),
    declare(
        "DJANGO_SECRET_KEY",
        "secret",
        "",
        _DJANGO,
        "Django's secret key (sessions, CSRF)",
        shown="a key kept in `var/secret_key`",
    ),
    declare(
        "DJANGO_ALLOWED_HOSTS",
        "strings",
        ["127.0.0.1", "localhost", "[::1]"],
        _DJANGO,
        "host names this server answers for",
    ),
    declare(
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "strings",
        [],
        _DJANGO,
        "origins (`https://app.example.com`, `https://*.example.com`) trusted for unsafe requests and for cookie "
        "websockets besides the site's own (docs/websocket.md)",
    ),
)

# Where state lives: the database, Redis (broker, channel layer, locks, cache) and the artifact storage.
STORES: tuple[Variable, ...] = (
    declare(
        "DATABASE_URL",
        "url",
        None,
        _STORES,
        "`postgres://user:pass@host:5432/db` or `sqlite:///relative/path`",
        schemes=("postgres", "postgresql", "pgsql", "sqlite"),
        shown="SQLite at `var/agentsite.sqlite3`",
    ),
    declare(
        "REDIS_URL",
        "url",
        None,
        _STORES,
        "Celery broker, channel layer, locks, API rate counters",
        schemes=("redis", "rediss", "unix"),
        shown="unset: Celery eager, in-memory channel layer",
    ),
    declare(
        "AGENTSITE_REDIS_MAX_CONNECTIONS",
        "integer",
        2000,
        _STORES,
        "With Redis: connections per process for the channel layer; every open socket waiting for events holds one",
    ),
    declare(
        "AGENTSITE_CHANNEL_LAYER",
        "choice",
        "pubsub",
        _STORES,
        "With Redis: `pubsub` (publish/subscribe, one round trip per event) or `lists` (channels_redis's queue layer)",
        choices=("pubsub", "lists"),
    ),
    declare(
        "AGENTSITE_REDIS_SOCKET_TIMEOUT_S",
        "integer",
        30,
        _STORES,
        "With Redis: read timeout of the channel layer; it must outwait the 5 s blocking pop that delivers events",
        minimum=6,
    ),
    declare(
        "AGENTSITE_CHANNEL_CAPACITY",
        "integer",
        10000,
        _STORES,
        "`lists` only: messages a process's inbox holds (all its sockets share it); past it sockets fall back "
        "to the ledger",
    ),
    declare(
        "AGENTSITE_CACHE_REDIS_DB",
        "integer",
        1,
        _STORES,
        "With Redis: the Redis database of Django's cache, where every web process counts the API rates "
        "(keep it apart from `REDIS_URL`'s)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_CACHE_KEY_PREFIX",
        "string",
        "agentsite",
        _STORES,
        "With Redis: the prefix of the cache's keys (two deployments sharing one Redis database need different ones)",
    ),
    declare(
        "AGENTSITE_JOB_VISIBILITY_TIMEOUT_S",
        "integer",
        300,
        _STORES,
        "a job taken by a worker that died is handed to another worker after this long; keep it above the "
        "longest job and the summary lock's lease",
    ),
    declare("AGENTSITE_SUMMARY_LOCK_TTL_S", "integer", 120, _STORES, "lease of the one-summariser-per-session lock"),
    declare(
        "AGENTSITE_STORAGE_BACKEND",
        "string",
        "django.core.files.storage.FileSystemStorage",
        _STORES,
        "the storage class of artifacts (any django-storages backend)",
    ),
    declare(
        "AGENTSITE_STORAGE_LOCATION",
        "string",
        "",
        _STORES,
        "folder of artifacts with the file storage",
        shown="`var/artifacts`",
    ),
    declare(
        "AGENTSITE_STORAGE_BUCKET", "string", "", _STORES, "bucket of artifacts with another backend (required there)"
    ),
    declare("AGENTSITE_STORAGE_PREFIX", "string", "", _STORES, "key prefix of artifacts in that bucket"),
    declare(
        "AGENTSITE_STORAGE_ENDPOINT_URL",
        "url",
        None,
        _STORES,
        "endpoint of an S3-compatible store (MinIO, Ceph, R2) when the backend is S3",
        schemes=("http", "https"),
        shown="unset (AWS)",
    ),
)

# The model endpoint, its secret and its call limits.
MODEL: tuple[Variable, ...] = (
    declare(
        "OPENAI_BASE_URL",
        "url",
        None,
        _MODEL,
        "any OpenAI-compatible endpoint (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp)",
        schemes=("http", "https"),
        shown="unset: the offline model",
    ),
    declare("OPENAI_API_KEY", "secret", None, _MODEL, "the endpoint's API key"),
    declare(
        "AGENTSITE_MODEL",
        "string",
        "offline",
        _MODEL,
        "model name sent to the endpoint",
        shown="`offline`, or `gpt-4o-mini` when an endpoint is set",
    ),
    declare(
        "AGENTSITE_SUMMARY_MODEL",
        "string",
        "",
        _MODEL,
        "model for summaries and memory extraction",
        shown="`AGENTSITE_MODEL`",
    ),
    declare(
        "AGENTSITE_CONTEXT_WINDOW",
        "integer",
        None,
        _MODEL,
        "overrides the model's context window",
        minimum=256,
        shown="from the model table, 8,192 when unknown",
    ),
    declare("AGENTSITE_MODEL_TIMEOUT_S", "integer", 120, _MODEL, "per model call"),
    declare(
        "AGENTSITE_MODEL_MAX_RETRIES",
        "integer",
        3,
        _MODEL,
        "retries of 429, 5xx, timeouts and dropped connections (jittered backoff) while nothing was streamed yet",
        minimum=0,
    ),
)

# Each process's thread pools and log level.
PROCESSES: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_DB_THREADS",
        "integer",
        8,
        _PROCESS,
        "database threads per web process (each may hold a database connection)",
    ),
    declare(
        "AGENTSITE_VIEW_THREADS",
        "integer",
        16,
        _PROCESS,
        "threads per web process that serve the synchronous pages and REST views, each keeping its database connection",
    ),
    declare(
        "AGENTSITE_JOB_BATCH_S",
        "seconds",
        0.2,
        _PROCESS,
        "how long a web process gathers the post-run jobs (auto memory, evolution review) its runs ask for into one "
        "broker message (a Celery send costs about 0.5 ms of CPU); 0 sends each at once",
        shown="0.2",
    ),
    declare(
        "AGENTSITE_LOG_LEVEL",
        "choice",
        "INFO",
        _PROCESS,
        "the root logger's level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    ),
)

# The demo agents' tools.
DEMO: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_DEMO_SCAN_DELAY_S",
        "seconds",
        10.0,
        _DEMO,
        "how long the demo's `scan_fleet` tool takes in all (spread over its twelve steps, each with a progress "
        "report); tests set it small",
        shown="10",
    ),
)
