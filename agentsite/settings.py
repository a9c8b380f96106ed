"""Django settings, read from the environment with embedded defaults (DESIGN 1 and 5).

With nothing set, everything runs in one process: SQLite under `var/`, Celery eager, the
in-memory channel layer, files under `var/`, and the offline model. `DATABASE_URL` and
`REDIS_URL` switch to PostgreSQL and Redis; `OPENAI_BASE_URL` / `OPENAI_API_KEY` to a
real model endpoint. A bad value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from agentsite.env import Env, database_from_url, sqlite_database

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = Env()

DEBUG = env.boolean("DJANGO_DEBUG", False)
SECRET_KEY = env.string("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    # A stable key per checkout, so sessions survive restarts of `make run`.
    # Readable by this user only, and never under the workspaces' parent (see AGENTSITE_WORKSPACE_ROOT).
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as _key:
            _key.write(secrets.token_urlsafe(50))
    if key_file.stat().st_mode & 0o077:
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()
# `testserver` (Django's test client) is added by the test environment, never here.
ALLOWED_HOSTS = env.strings("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.strings("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Swagger UI and Redoc as static files of our own, so /api/docs/ and /api/redoc/ work offline.
    "drf_spectacular_sidecar",
    "channels",
    "sessions_app",
    "runs",
    "skills_app",
    "evolution_app",
    # Last: its ready() installs the composition root (agentsite.runtime) once the apps are loaded.
    "agentsite",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentsite.middleware.malformed_request_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # After sessions, before common (Django's order): the language from the `django_language`
    # cookie that the switch sets, else Accept-Language, else LANGUAGE_CODE.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentsite.urls"
ASGI_APPLICATION = "agentsite.asgi.application"
WSGI_APPLICATION = "agentsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database ---------------------------------------------------------------------------
DATABASE_URL = env.url("DATABASE_URL", schemes=("postgres", "postgresql", "pgsql", "sqlite"))
DATABASES = {
    "default": database_from_url(DATABASE_URL, base_dir=BASE_DIR)
    if DATABASE_URL
    else sqlite_database(VAR_DIR / "agentsite.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: broker, channel layer, locks --------------------------------------------------
REDIS_URL = env.url("REDIS_URL", schemes=("redis", "rediss", "unix"))
if REDIS_URL:
    # Every socket waiting for its next event holds a Redis connection (a blocking pop), so
    # the pool must be larger than the sockets a process serves; redis-py's default is 100.
    AGENTSITE_REDIS_MAX_CONNECTIONS = env.integer("AGENTSITE_REDIS_MAX_CONNECTIONS", 2000)
    # `pubsub` (default): Redis PUBLISH/SUBSCRIBE, one round trip per event and no inbox to
    # overflow; a message nobody is subscribed to is gone, which the sockets cover by
    # re-reading the ledger. `lists`: channels_redis's queue layer, which keeps messages for
    # a while but pops them one by one per process (about 100 per second on 2 cores).
    AGENTSITE_CHANNEL_LAYER = env.choice("AGENTSITE_CHANNEL_LAYER", "pubsub", choices=("pubsub", "lists"))
    # redis-py 8 reads with a 5 s socket timeout by default, the same 5 s that the queue
    # layer blocks in BZPOPMIN: under load the empty reply comes late, the read times out
    # and the consumer dies with 1011. Reads must outwait the pop.
    AGENTSITE_REDIS_SOCKET_TIMEOUT_S = env.integer("AGENTSITE_REDIS_SOCKET_TIMEOUT_S", 30, minimum=6)
    # The queue layer keeps every socket of a process in one inbox and drops what a full
    # inbox cannot take; its default of 100 is less than two streamed runs.
    AGENTSITE_CHANNEL_CAPACITY = env.integer("AGENTSITE_CHANNEL_CAPACITY", 10000)
    _redis_host = {
        "address": REDIS_URL, "max_connections": AGENTSITE_REDIS_MAX_CONNECTIONS,
        "socket_timeout": AGENTSITE_REDIS_SOCKET_TIMEOUT_S,
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [_redis_host]},
        } if AGENTSITE_CHANNEL_LAYER == "pubsub" else {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"capacity": AGENTSITE_CHANNEL_CAPACITY, "hosts": [_redis_host]},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True


def _redis_db_url(url: str, db: int) -> str:
    """`url` aimed at Redis database `db` (the path of redis://, the `db` query of unix://)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(db))]
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{db}"))


# -- cache: the API rate counters (issue 23, item 4) ---------------------------------------------
# DRF's throttles count requests in the default cache. With REDIS_URL every web process
# counts in the same Redis database, so the rate holds across the cluster; its own database
# number (not the broker's/channels', whose keys `cache.clear()` would flush with it).
# Without Redis: local memory, one count per process.
if REDIS_URL:
    AGENTSITE_CACHE_REDIS_DB = env.integer("AGENTSITE_CACHE_REDIS_DB", 1, minimum=0)
    CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _redis_db_url(REDIS_URL, AGENTSITE_CACHE_REDIS_DB),
        "KEY_PREFIX": env.string("AGENTSITE_CACHE_KEY_PREFIX", "agentsite"),
        # A Redis that stops answering costs a request at most this long (the throttles then
        # let it through: agentsite.api.throttling).
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# With acks_late, a job whose worker died (SIGKILL, OOM, lost host) stays unacknowledged in
# Redis and is handed to another worker once it is this old; kombu's default is one hour.
# It must exceed the longest job and the summary lock's lease, or a live job runs twice.
AGENTSITE_JOB_VISIBILITY_TIMEOUT_S = env.integer("AGENTSITE_JOB_VISIBILITY_TIMEOUT_S", 300, minimum=1)
AGENTSITE_SUMMARY_LOCK_TTL_S = env.integer("AGENTSITE_SUMMARY_LOCK_TTL_S", 120, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": AGENTSITE_JOB_VISIBILITY_TIMEOUT_S,
    # How often a worker looks for such jobs (kombu: every 10 s, acting on every 10th look).
    "unacked_restore_interval": max(1, min(10, AGENTSITE_JOB_VISIBILITY_TIMEOUT_S // 4)),
    "unacked_restore_throttle": 1,
}
# Jobs are sent from inside runs (summaries) and right after them (memory, evolution). With
# the broker down a send must fail fast, not hold the run through kombu's reconnect loop:
# the next job covers the same events (their cursors are in the database).
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# Task modules that autodiscovery (which imports `tasks.py` only) would miss.
CELERY_IMPORTS = ["sessions_app.memory_tasks"]

# -- files ----------------------------------------------------------------------------------
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "artifacts": {
        "BACKEND": env.string("AGENTSITE_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"),
        "OPTIONS": {},
    },
}
_storage_location = env.string("AGENTSITE_STORAGE_LOCATION", str(VAR_DIR / "artifacts"))
if STORAGES["artifacts"]["BACKEND"].endswith("FileSystemStorage"):
    STORAGES["artifacts"]["OPTIONS"] = {"location": _storage_location}
else:
    bucket = env.raw("AGENTSITE_STORAGE_BUCKET")
    if not bucket:
        raise ImproperlyConfigured(
            "AGENTSITE_STORAGE_BUCKET is required when AGENTSITE_STORAGE_BACKEND is "
            f"{STORAGES['artifacts']['BACKEND']!r}"
        )
    STORAGES["artifacts"]["OPTIONS"] = {"bucket_name": bucket, "location": env.string("AGENTSITE_STORAGE_PREFIX", "")}
    # S3-compatible stores other than AWS (MinIO, Ceph, R2) are reached through their endpoint.
    _storage_endpoint = env.url("AGENTSITE_STORAGE_ENDPOINT_URL", schemes=("http", "https"))
    if _storage_endpoint:
        STORAGES["artifacts"]["OPTIONS"]["endpoint_url"] = _storage_endpoint

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_ROOT = VAR_DIR / "media"

# -- model ------------------------------------------------------------------------------------
OPENAI_BASE_URL = env.url("OPENAI_BASE_URL", schemes=("http", "https"))
OPENAI_API_KEY = env.raw("OPENAI_API_KEY")
AGENTSITE_MODEL = env.string("AGENTSITE_MODEL", "gpt-4o-mini" if (OPENAI_BASE_URL or OPENAI_API_KEY) else "offline")
AGENTSITE_SUMMARY_MODEL = env.string("AGENTSITE_SUMMARY_MODEL", AGENTSITE_MODEL)
AGENTSITE_CONTEXT_WINDOW = env.integer("AGENTSITE_CONTEXT_WINDOW", None, minimum=256)
AGENTSITE_MODEL_TIMEOUT_S = env.integer("AGENTSITE_MODEL_TIMEOUT_S", 120)
AGENTSITE_MODEL_MAX_RETRIES = env.integer("AGENTSITE_MODEL_MAX_RETRIES", 3, minimum=0)

# -- runs ----------------------------------------------------------------------------------------
AGENTSITE_APP = env.string("AGENTSITE_APP", "agentsite")
# The agent registry (agentsite/agents.py, docs/agents.md): `module:factory` entries, each
# factory making one agent or several from the composition root's AgentContext.
AGENTSITE_AGENTS = env.strings("AGENTSITE_AGENTS", [
    "agentsite.demo.factories:support_agent",
    "agentsite.demo.factories:general_agent",
    "agentsite.demo.factories:troubleshoot_agent",
])
for _entry in AGENTSITE_AGENTS:
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", _entry):
        raise ImproperlyConfigured(f"AGENTSITE_AGENTS entries are module:factory, got {_entry!r}")
# "": the first agent AGENTSITE_AGENTS makes (the demo's: support).
AGENTSITE_DEFAULT_AGENT = env.string("AGENTSITE_DEFAULT_AGENT", "")
# The agent whose A2A card is served at the host root, /.well-known/agent-card.json ("": the default agent).
AGENTSITE_A2A_ROOT_AGENT = env.string("AGENTSITE_A2A_ROOT_AGENT", "")
# The A2A conformance test agent at /a2a/conformance (runs/a2a/conformance.py): for the A2A
# compatibility kit only, never in production. Its held tasks stay working this long.
AGENTSITE_A2A_CONFORMANCE_AGENT = env.boolean("AGENTSITE_A2A_CONFORMANCE_AGENT", False)
AGENTSITE_A2A_CONFORMANCE_HOLD_S = env.integer("AGENTSITE_A2A_CONFORMANCE_HOLD_S", 30)
AGENTSITE_MAX_MESSAGE_CHARS = env.integer("AGENTSITE_MAX_MESSAGE_CHARS", 32_000)
AGENTSITE_MAX_STEPS = env.integer("AGENTSITE_MAX_STEPS", 10)
AGENTSITE_HISTORY_EVENT_LIMIT = env.integer("AGENTSITE_HISTORY_EVENT_LIMIT", 400)
AGENTSITE_RUN_WAIT_TIMEOUT_S = env.integer("AGENTSITE_RUN_WAIT_TIMEOUT_S", 300)
# An AG-UI run is detached from its HTTP request; past this it is stopped and ends with RUN_ERROR.
AGENTSITE_AGUI_RUN_TIMEOUT_S = env.integer("AGENTSITE_AGUI_RUN_TIMEOUT_S", 3600)
# Each process beats for its runs; a run silent for longer than STALE is reaped as interrupted.
AGENTSITE_RUN_HEARTBEAT_S = env.integer("AGENTSITE_RUN_HEARTBEAT_S", 15)
AGENTSITE_RUN_STALE_S = env.integer("AGENTSITE_RUN_STALE_S", 60)
# Bodies larger than this are refused with 413 before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.integer("AGENTSITE_MAX_BODY_BYTES", 1_048_576)
# Runs one user may have queued or running at once, over every surface and process (0: no
# limit); past it a start answers 429. Generous by default: bench/stream.py runs 200 at once
# for one user.
AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = env.integer("AGENTSITE_MAX_ACTIVE_RUNS_PER_USER", 256, minimum=0)
# Ledger events one run may write (0: no limit); a run past it stops, failed with `event_limit`.
AGENTSITE_MAX_RUN_EVENTS = env.integer("AGENTSITE_MAX_RUN_EVENTS", 2000, minimum=0)
# Messages one run may hold queued for its next model step (SPEC 1.5 steering; 429 past it).
AGENTSITE_MAX_QUEUED_MESSAGES = env.integer("AGENTSITE_MAX_QUEUED_MESSAGES", 20, minimum=1)
# Bytes a websocket may hold unsent for a client that does not read; past it the socket stops
# taking live events and catches up from the ledger once the client reads (0: no bound).
AGENTSITE_WS_SEND_BUFFER_BYTES = env.integer("AGENTSITE_WS_SEND_BUFFER_BYTES", 262_144, minimum=0)
# SPEC 1.10: keep a cancelled streaming answer as a marked assistant message (off, as the SPEC says).
AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT = env.boolean("AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT", False)

# -- long-term memory and artifacts (SPEC 6, 7) ----------------------------------------------------
AGENTSITE_MEMORY_MAX_PER_USER = env.integer("AGENTSITE_MEMORY_MAX_PER_USER", 1000)
# Auto memory: after each run, extract memories from the session's new messages (Celery job), with
# AGENTSITE_SUMMARY_MODEL: by rules with the offline model, with one model call per run (two with
# assistant episodes) on an endpoint. On by default with either (SPEC 6.3).
AGENTSITE_MEMORY_AUTO = env.boolean("AGENTSITE_MEMORY_AUTO", True)
# How extracted operations treat existing memories (SPEC 6.3; sessions_app.core.memory_policy).
AGENTSITE_MEMORY_UPDATE_POLICY = env.choice(
    "AGENTSITE_MEMORY_UPDATE_POLICY", "merge_similar", choices=("merge_similar", "preserve_history", "append_only")
)
# The second extraction stage that records reusable assistant answers as episodes (SPEC 6.4; off as there).
AGENTSITE_MEMORY_ASSISTANT_EPISODES = env.boolean("AGENTSITE_MEMORY_ASSISTANT_EPISODES", False)
# Checkers: extract only when the delta has more than N messages / the last extraction is older than S seconds.
AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES = env.integer("AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES", 0, minimum=0)
AGENTSITE_MEMORY_EXTRACT_INTERVAL_S = env.integer("AGENTSITE_MEMORY_EXTRACT_INTERVAL_S", 0, minimum=0)
# Memories preloaded into the system prompt: 0 off, -1 all, N adaptive (SPEC 6.5). For the LLM flow's
# preload step (`sessions_app.core.memory_tools.memory_preload_block`); nothing reads it until that is wired.
AGENTSITE_MEMORY_PRELOAD = env.integer("AGENTSITE_MEMORY_PRELOAD", 0, minimum=-1)
# Preload session recall (SPEC 5.4, issue 26): up to N events of the user's other sessions that match the
# new message, in every request of the support agent's run (0: off, the SPEC's default; at most 20), as a
# system block or a user message just before the new one.
AGENTSITE_RECALL_PRELOAD = env.integer("AGENTSITE_RECALL_PRELOAD", 0, minimum=0)
AGENTSITE_RECALL_PRELOAD_INJECTION = env.choice("AGENTSITE_RECALL_PRELOAD_INJECTION", "system", choices=("system", "user"))
AGENTSITE_ARTIFACT_MAX_BYTES = env.integer("AGENTSITE_ARTIFACT_MAX_BYTES", 10 * 1024 * 1024)
# Images and files in messages (issue 20): bytes per attachment (stored as a session artifact, so
# AGENTSITE_ARTIFACT_MAX_BYTES also bounds it) and attachments per message. A JSON body carrying them is
# bounded by AGENTSITE_MAX_BODY_BYTES first (base64 is 4/3 of the bytes).
AGENTSITE_UPLOAD_MAX_BYTES = env.integer("AGENTSITE_UPLOAD_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
AGENTSITE_UPLOAD_MAX_COUNT = env.integer("AGENTSITE_UPLOAD_MAX_COUNT", 10, minimum=1)

# -- context governance (DESIGN 6; README "Configuration") ----------------------------------------


def _ratio(name: str, default: float) -> float:
    value = env.raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if not 0 < number <= 1:
        raise ImproperlyConfigured(f"{name} must be in (0, 1], got {value!r}")
    return number


# The demo agents run with smaller thresholds (agentsite/demo/agents.py DEMO_GOVERNANCE) so
# that a short session shows summaries and compaction; off: the knobs below apply as set.
AGENTSITE_DEMO_GOVERNANCE = env.boolean("AGENTSITE_DEMO_GOVERNANCE", True)
AGENTSITE_SUMMARIES = env.boolean("AGENTSITE_SUMMARIES", True)
AGENTSITE_SUMMARIZER = env.string("AGENTSITE_SUMMARIZER", "auto")  # or module:factory
AGENTSITE_SUMMARY_TRIGGER_RATIO = _ratio("AGENTSITE_SUMMARY_TRIGGER_RATIO", 0.5)
AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = env.integer("AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS", 2000)
AGENTSITE_SUMMARY_EVENT_THRESHOLD = env.integer("AGENTSITE_SUMMARY_EVENT_THRESHOLD", 0, minimum=0)
# SPEC 2.6 / 3.1: the filter keys that get summaries of their own (comma-separated, empty: all).
AGENTSITE_SUMMARY_FILTER_KEYS = env.strings("AGENTSITE_SUMMARY_FILTER_KEYS", [])
# SPEC 3.5: also summarize when a request comes after an idle gap longer than this (0: off).
AGENTSITE_SUMMARY_TIME_THRESHOLD_S = env.integer("AGENTSITE_SUMMARY_TIME_THRESHOLD_S", 0, minimum=0)
AGENTSITE_SUMMARY_MAX_WORDS = env.integer("AGENTSITE_SUMMARY_MAX_WORDS", 0, minimum=0)
AGENTSITE_SUMMARY_BUDGET_TOKENS = env.integer("AGENTSITE_SUMMARY_BUDGET_TOKENS", 512)
AGENTSITE_SUMMARY_CACHE_SAFE_FORK = env.boolean("AGENTSITE_SUMMARY_CACHE_SAFE_FORK", False)
# Issue 12, C6: summaries by a model go in chunks that fit its window (summaries of summaries).
AGENTSITE_SUMMARY_CHUNKED = env.boolean("AGENTSITE_SUMMARY_CHUNKED", True)
AGENTSITE_SUMMARY_INJECTION = env.choice("AGENTSITE_SUMMARY_INJECTION", "system", choices=("system", "user"))
AGENTSITE_SUMMARY_JOBS = env.choice("AGENTSITE_SUMMARY_JOBS", "celery" if REDIS_URL else "inprocess", choices=("celery", "inprocess"))
AGENTSITE_SUMMARY_LOCK = env.choice("AGENTSITE_SUMMARY_LOCK", "redis" if REDIS_URL else "database", choices=("redis", "database"))
if AGENTSITE_SUMMARY_LOCK == "redis" and not REDIS_URL:
    raise ImproperlyConfigured("AGENTSITE_SUMMARY_LOCK is 'redis' but REDIS_URL is not set")
AGENTSITE_SYNC_SUMMARY_INTRA_RUN = env.boolean("AGENTSITE_SYNC_SUMMARY_INTRA_RUN", False)
AGENTSITE_COMPACTION = env.boolean("AGENTSITE_COMPACTION", True)
AGENTSITE_COMPACTION_RATIO = _ratio("AGENTSITE_COMPACTION_RATIO", 0.7)
AGENTSITE_COMPACTION_MIN_TOKENS = env.integer("AGENTSITE_COMPACTION_MIN_TOKENS", 2000)
# Issue 12, C5: at this share of the window a summary starts in the background and the call
# goes out unchanged; the next call swaps it in (off: only the blocking pre-call path above).
AGENTSITE_COMPACTION_SOFT = env.boolean("AGENTSITE_COMPACTION_SOFT", True)
AGENTSITE_COMPACTION_SOFT_RATIO = _ratio("AGENTSITE_COMPACTION_SOFT_RATIO", 0.55)
AGENTSITE_COMPACTION_SOFT_MIN_TOKENS = env.integer("AGENTSITE_COMPACTION_SOFT_MIN_TOKENS", 1500, minimum=0)
AGENTSITE_KEEP_RECENT_REQUESTS = env.integer("AGENTSITE_KEEP_RECENT_REQUESTS", 1, minimum=0)
AGENTSITE_TOOL_RESULT_MAX_TOKENS = env.integer("AGENTSITE_TOOL_RESULT_MAX_TOKENS", 1024, minimum=0)
AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS = env.integer("AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS", 0, minimum=0)
AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS = env.strings("AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS", [])
AGENTSITE_COMPACTION_KEEP_TOOLS = env.strings("AGENTSITE_COMPACTION_KEEP_TOOLS", [])
# Issue 12, C4: Pass 1 elides in batches of at least this many tokens (0: at once, SPEC 4.6),
# so the bytes of earlier requests, and the provider's prompt cache, change only when a batch fills.
AGENTSITE_COMPACTION_CLEAR_AT_LEAST = env.integer("AGENTSITE_COMPACTION_CLEAR_AT_LEAST", 0, minimum=0)
# Issue 12 (docs/context.md): refuse a request whose projection manifest finds an event lost
# without a way back; carry the user's standing instructions in a pinned block (share of window).
AGENTSITE_CONTEXT_MANIFEST_CHECK = env.boolean("AGENTSITE_CONTEXT_MANIFEST_CHECK", True)
AGENTSITE_PINNED_INTENT = env.boolean("AGENTSITE_PINNED_INTENT", True)
AGENTSITE_PINNED_BUDGET_RATIO = _ratio("AGENTSITE_PINNED_BUDGET_RATIO", 0.05)

# -- skills and the code workspace (SPEC 8; docs/skills.md) ----------------------------------------
# Folder skills (a SKILL.md per folder); the first root holding a name wins. Database skills
# (admin, evolution, `bootstrap_demo` imports) win over folders of the same name.
AGENTSITE_SKILLS_ROOTS = env.strings("AGENTSITE_SKILLS_ROOTS", [str(BASE_DIR / "agentsite" / "demo" / "skills")])
# The demo agent's profile: `full` (load skills and run their scripts in the sandbox) or
# `knowledge_only` (load and read only; no execution tool at all).
AGENTSITE_SKILLS_PROFILE = env.choice("AGENTSITE_SKILLS_PROFILE", "full", choices=("full", "knowledge_only"))
AGENTSITE_SKILLS_LOAD_MODE = env.choice("AGENTSITE_SKILLS_LOAD_MODE", "turn", choices=("turn", "once", "session"))
AGENTSITE_SKILLS_MAX_LOADED = env.integer("AGENTSITE_SKILLS_MAX_LOADED", 0, minimum=0)  # 0: no cap
AGENTSITE_SKILLS_REQUIRE_LOAD = env.boolean("AGENTSITE_SKILLS_REQUIRE_LOAD", False)
# Workspaces live outside the project: a sandboxed command can learn its workspace's host path,
# so the folder around the workspaces must hold nothing secret (checked below).
AGENTSITE_WORKSPACE_ROOT = Path(
    env.string("AGENTSITE_WORKSPACE_ROOT", str(Path(tempfile.gettempdir()) / "agentsite" / "workspaces"))
).absolute()
AGENTSITE_WORKSPACE_TIMEOUT_S = env.integer("AGENTSITE_WORKSPACE_TIMEOUT_S", 300)
AGENTSITE_WORKSPACE_CPU_S = env.integer("AGENTSITE_WORKSPACE_CPU_S", 60)
AGENTSITE_WORKSPACE_MEMORY_MB = env.integer("AGENTSITE_WORKSPACE_MEMORY_MB", 512, minimum=64)
AGENTSITE_WORKSPACE_FILE_SIZE_MB = env.integer("AGENTSITE_WORKSPACE_FILE_SIZE_MB", 64)
AGENTSITE_WORKSPACE_MAX_PROCESSES = env.integer("AGENTSITE_WORKSPACE_MAX_PROCESSES", 64, minimum=4)
AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES = env.integer("AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES", 16 * 1024, minimum=256)
AGENTSITE_WORKSPACE_MAX_ARTIFACTS = env.integer("AGENTSITE_WORKSPACE_MAX_ARTIFACTS", 20, minimum=0)
AGENTSITE_WORKSPACE_ALLOWED_COMMANDS = env.strings("AGENTSITE_WORKSPACE_ALLOWED_COMMANDS", [])
AGENTSITE_WORKSPACE_DENIED_COMMANDS = env.strings("AGENTSITE_WORKSPACE_DENIED_COMMANDS", [])
AGENTSITE_WORKSPACE_UID = env.integer("AGENTSITE_WORKSPACE_UID", 65534)
AGENTSITE_WORKSPACE_TTL_S = env.integer("AGENTSITE_WORKSPACE_TTL_S", 24 * 3600)
# The quota of one workspace: a size-limited tmpfs where the process may mount one, else checked.
AGENTSITE_WORKSPACE_MAX_BYTES = env.integer("AGENTSITE_WORKSPACE_MAX_BYTES", 256 * 1024 * 1024, minimum=1024 * 1024)
AGENTSITE_WORKSPACE_MAX_FILES = env.integer("AGENTSITE_WORKSPACE_MAX_FILES", 10_000, minimum=16)
_workspaces_parent = AGENTSITE_WORKSPACE_ROOT.resolve().parent
for _what, _path in (
    ("the project's var/ (secret key, demo credentials, database)", VAR_DIR),
    ("the artifact storage", Path(_storage_location)),
    ("MEDIA_ROOT", MEDIA_ROOT),
):
    _path = _path.resolve()
    if _path.is_relative_to(_workspaces_parent) or _workspaces_parent.is_relative_to(_path):
        raise ImproperlyConfigured(
            f"AGENTSITE_WORKSPACE_ROOT {str(AGENTSITE_WORKSPACE_ROOT)!r}: {_what} ({str(_path)!r}) must not be "
            f"inside the workspaces' parent folder {str(_workspaces_parent)!r}, nor hold it"
        )

# -- evolution: learning skills after runs (SPEC 9; docs/evolution.md) -----------------------------
# A review job after each run (Celery). On by default with the offline model (heuristic reviewer,
# free); with a model endpoint it costs one model call per reviewed delta, so it is opt-in there.
AGENTSITE_EVOLUTION = env.boolean("AGENTSITE_EVOLUTION", AGENTSITE_MODEL == "offline")
AGENTSITE_EVOLUTION_MODEL = env.string("AGENTSITE_EVOLUTION_MODEL", AGENTSITE_SUMMARY_MODEL)
# The evidence gate: review a delta with >= N tool calls (0: off), a user correction, a recovered tool error.
AGENTSITE_EVOLUTION_MIN_TOOL_CALLS = env.integer("AGENTSITE_EVOLUTION_MIN_TOOL_CALLS", 4, minimum=0)
AGENTSITE_EVOLUTION_ON_CORRECTION = env.boolean("AGENTSITE_EVOLUTION_ON_CORRECTION", True)
AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR = env.boolean("AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR", True)
# Gates, run in the order spec, safety, effectiveness, human whatever the order here; `none`: publish directly.
AGENTSITE_EVOLUTION_GATES = env.strings("AGENTSITE_EVOLUTION_GATES", ["spec", "safety", "effectiveness", "human"])
if AGENTSITE_EVOLUTION_GATES == ["none"]:
    AGENTSITE_EVOLUTION_GATES = []
elif set(AGENTSITE_EVOLUTION_GATES) - {"spec", "safety", "effectiveness", "human"}:
    raise ImproperlyConfigured(
        "AGENTSITE_EVOLUTION_GATES must list spec, safety, effectiveness, human (or be 'none'), "
        f"got {','.join(AGENTSITE_EVOLUTION_GATES)!r}"
    )
# The Effectiveness gate's replay: `scripted` (the recorded model turns), `model` (the evolution model), `off`;
# `auto`: `model` when the evolution model is the offline one, else `scripted`.
AGENTSITE_EVOLUTION_REPLAY = env.choice(
    "AGENTSITE_EVOLUTION_REPLAY", "auto", choices=("auto", "scripted", "model", "off")
)
AGENTSITE_EVOLUTION_MAX_SKILL_CHARS = env.integer("AGENTSITE_EVOLUTION_MAX_SKILL_CHARS", 16_000, minimum=512)

# -- auth and API ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]


def _rate(name: str, default: str) -> str | None:
    """A DRF throttle rate, `<count>/<sec|min|hour|day>`; `off` disables the throttle."""
    value = env.string(name, default)
    if value.lower() == "off":
        return None
    count, _, period = value.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in {"s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day"}:
        raise ImproperlyConfigured(f"{name} must look like 600/min (or be 'off'), got {value!r}")
    return value


LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.auth.BearerTokenAuthentication",
        "runs.auth.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agentsite.api.fields.ObjectJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "agentsite.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Per-user (token or login) and per-address request rates of the REST API, counted in
    # the default cache (CACHES: Redis, shared by every process, when REDIS_URL is set); past them: 429.
    "DEFAULT_THROTTLE_CLASSES": [
        "agentsite.api.throttling.UserRateThrottle",
        "agentsite.api.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": _rate("AGENTSITE_API_RATE_USER", "6000/min"),
        "anon": _rate("AGENTSITE_API_RATE_ANON", "600/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agentsite API",
    "DESCRIPTION": "Run LLM agents as managed, durable, observable work.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Pages, the admin, JavaScript strings and API error messages in English and Simplified
# Chinese (issue 21). Catalogs under locale/, compiled .mo files committed: running needs no
# gettext tools. Machine-readable error codes never change with the language.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The language switch's choice lasts a year (Django's default lasts the browser session).
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.string("AGENTSITE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
