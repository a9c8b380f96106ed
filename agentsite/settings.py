"""Django settings, read from the environment with embedded defaults (DESIGN 1 and 5).

With nothing set, everything runs in one process: SQLite under `var/`, Celery eager, the
in-memory channel layer, files under `var/`, and the offline model. `DATABASE_URL` and
`REDIS_URL` switch to PostgreSQL and Redis; `OPENAI_BASE_URL` / `OPENAI_API_KEY` to a
real model endpoint. A bad value stops start-up with a message naming the variable.

Every variable is declared, with its parser, default and meaning, in `agentsite/config/`
and read here through `read(name)`; docs/settings.md is the table generated from there.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from agentsite.config import read, refuse_retired
from agentsite.env import database_from_url, sqlite_database

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

refuse_retired()

DEBUG = read("DJANGO_DEBUG")
SECRET_KEY = read("DJANGO_SECRET_KEY")
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
ALLOWED_HOSTS = read("DJANGO_ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = read("DJANGO_CSRF_TRUSTED_ORIGINS")

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
DATABASE_URL = read("DATABASE_URL")
DATABASES = {
    "default": database_from_url(DATABASE_URL, base_dir=BASE_DIR)
    if DATABASE_URL
    else sqlite_database(VAR_DIR / "agentsite.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: broker, channel layer, locks --------------------------------------------------
REDIS_URL = read("REDIS_URL")
if REDIS_URL:
    # Every socket waiting for its next event holds a Redis connection (a blocking pop), so
    # the pool must be larger than the sockets a process serves; redis-py's default is 100.
    AGENTSITE_REDIS_MAX_CONNECTIONS = read("AGENTSITE_REDIS_MAX_CONNECTIONS")
    # `pubsub` (default): Redis PUBLISH/SUBSCRIBE, one round trip per event and no inbox to
    # overflow; a message nobody is subscribed to is gone, which the sockets cover by
    # re-reading the ledger. `lists`: channels_redis's queue layer, which keeps messages for
    # a while but pops them one by one per process (about 100 per second on 2 cores).
    AGENTSITE_CHANNEL_LAYER = read("AGENTSITE_CHANNEL_LAYER")
    # redis-py 8 reads with a 5 s socket timeout by default, the same 5 s that the queue
    # layer blocks in BZPOPMIN: under load the empty reply comes late, the read times out
    # and the consumer dies with 1011. Reads must outwait the pop.
    AGENTSITE_REDIS_SOCKET_TIMEOUT_S = read("AGENTSITE_REDIS_SOCKET_TIMEOUT_S")
    # The queue layer keeps every socket of a process in one inbox and drops what a full
    # inbox cannot take; its default of 100 is less than two streamed runs.
    AGENTSITE_CHANNEL_CAPACITY = read("AGENTSITE_CHANNEL_CAPACITY")
    _redis_host = {
        "address": REDIS_URL,
        "max_connections": AGENTSITE_REDIS_MAX_CONNECTIONS,
        "socket_timeout": AGENTSITE_REDIS_SOCKET_TIMEOUT_S,
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [_redis_host]},
        }
        if AGENTSITE_CHANNEL_LAYER == "pubsub"
        else {
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
    AGENTSITE_CACHE_REDIS_DB = read("AGENTSITE_CACHE_REDIS_DB")
    CACHES = {
        "default": {
            "BACKEND": "agentsite.cache.SharedRedisCache",
            "LOCATION": _redis_db_url(REDIS_URL, AGENTSITE_CACHE_REDIS_DB),
            "KEY_PREFIX": read("AGENTSITE_CACHE_KEY_PREFIX"),
            # A Redis that stops answering costs a request at most this long (the throttles then
            # let it through: agentsite.api.throttling).
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes a worker's database connection before and after each task
# unless this is set; with it, every this many tasks. Between, the worker keeps its
# connection and checks it before a task when it may be dead (agentsite/celery.py).
CELERY_DB_REUSE_MAX = 1000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# With acks_late, a job whose worker died (SIGKILL, OOM, lost host) stays unacknowledged in
# Redis and is handed to another worker once it is this old; kombu's default is one hour.
# It must exceed the longest job and the summary lock's lease, or a live job runs twice.
AGENTSITE_JOB_VISIBILITY_TIMEOUT_S = read("AGENTSITE_JOB_VISIBILITY_TIMEOUT_S")
AGENTSITE_SUMMARY_LOCK_TTL_S = read("AGENTSITE_SUMMARY_LOCK_TTL_S")
# A web process's post-run jobs within this window go to the broker as one message (sessions_app.jobs).
AGENTSITE_JOB_BATCH_S = read("AGENTSITE_JOB_BATCH_S")
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
        "BACKEND": read("AGENTSITE_STORAGE_BACKEND"),
        "OPTIONS": {},
    },
}
_storage_location = read("AGENTSITE_STORAGE_LOCATION", default=str(VAR_DIR / "artifacts"))
if STORAGES["artifacts"]["BACKEND"].endswith("FileSystemStorage"):
    STORAGES["artifacts"]["OPTIONS"] = {"location": _storage_location}
else:
    bucket = read("AGENTSITE_STORAGE_BUCKET")
    if not bucket:
        raise ImproperlyConfigured(
            "AGENTSITE_STORAGE_BUCKET is required when AGENTSITE_STORAGE_BACKEND is "
            f"{STORAGES['artifacts']['BACKEND']!r}"
        )
    STORAGES["artifacts"]["OPTIONS"] = {"bucket_name": bucket, "location": read("AGENTSITE_STORAGE_PREFIX")}
    # S3-compatible stores other than AWS (MinIO, Ceph, R2) are reached through their endpoint.
    _storage_endpoint = read("AGENTSITE_STORAGE_ENDPOINT_URL")
    if _storage_endpoint:
        STORAGES["artifacts"]["OPTIONS"]["endpoint_url"] = _storage_endpoint

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_ROOT = VAR_DIR / "media"

# -- model ------------------------------------------------------------------------------------
OPENAI_BASE_URL = read("OPENAI_BASE_URL")
OPENAI_API_KEY = read("OPENAI_API_KEY")
AGENTSITE_MODEL = read("AGENTSITE_MODEL", default="gpt-4o-mini" if (OPENAI_BASE_URL or OPENAI_API_KEY) else "offline")
AGENTSITE_SUMMARY_MODEL = read("AGENTSITE_SUMMARY_MODEL", default=AGENTSITE_MODEL)
AGENTSITE_CONTEXT_WINDOW = read("AGENTSITE_CONTEXT_WINDOW")
AGENTSITE_MODEL_TIMEOUT_S = read("AGENTSITE_MODEL_TIMEOUT_S")
AGENTSITE_MODEL_MAX_RETRIES = read("AGENTSITE_MODEL_MAX_RETRIES")

# -- runs ----------------------------------------------------------------------------------------
AGENTSITE_APP = read("AGENTSITE_APP")
# The agent registry (agentsite/agents.py, docs/agents.md): `module:factory` entries, each
# factory making one agent or several from the composition root's AgentContext.
AGENTSITE_AGENTS = read("AGENTSITE_AGENTS")
for _entry in AGENTSITE_AGENTS:
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", _entry):
        raise ImproperlyConfigured(f"AGENTSITE_AGENTS entries are module:factory, got {_entry!r}")
# "": the first agent AGENTSITE_AGENTS makes (the demo's: support).
AGENTSITE_DEFAULT_AGENT = read("AGENTSITE_DEFAULT_AGENT")
# The agent whose A2A card is served at the host root, /.well-known/agent-card.json ("": the default agent).
AGENTSITE_A2A_ROOT_AGENT = read("AGENTSITE_A2A_ROOT_AGENT")
# The A2A conformance test agent at /a2a/conformance (runs/surfaces/a2a/conformance.py): for the A2A
# compatibility kit only, never in production. Its held tasks stay working this long.
AGENTSITE_A2A_CONFORMANCE_AGENT = read("AGENTSITE_A2A_CONFORMANCE_AGENT")
AGENTSITE_A2A_CONFORMANCE_HOLD_S = read("AGENTSITE_A2A_CONFORMANCE_HOLD_S")
AGENTSITE_MAX_MESSAGE_CHARS = read("AGENTSITE_MAX_MESSAGE_CHARS")
AGENTSITE_HISTORY_EVENT_LIMIT = read("AGENTSITE_HISTORY_EVENT_LIMIT")
AGENTSITE_RUN_WAIT_TIMEOUT_S = read("AGENTSITE_RUN_WAIT_TIMEOUT_S")
# An AG-UI run is detached from its HTTP request; past this it is stopped and ends with RUN_ERROR.
AGENTSITE_AGUI_RUN_TIMEOUT_S = read("AGENTSITE_AGUI_RUN_TIMEOUT_S")
# Each process beats for its runs; a run silent for longer than STALE is reaped as interrupted.
AGENTSITE_RUN_HEARTBEAT_S = read("AGENTSITE_RUN_HEARTBEAT_S")
AGENTSITE_RUN_STALE_S = read("AGENTSITE_RUN_STALE_S")
# Bodies larger than this are refused with 413 before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = read("AGENTSITE_MAX_BODY_BYTES")
# Runs one user may have queued or running at once, over every surface and process (0: no
# limit); past it a start answers 429. Generous by default: bench/stream.py runs 200 at once
# for one user.
AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = read("AGENTSITE_MAX_ACTIVE_RUNS_PER_USER")
# Ledger events one run may write (0: no limit); a run past it stops, failed with `event_limit`.
AGENTSITE_MAX_RUN_EVENTS = read("AGENTSITE_MAX_RUN_EVENTS")
# Messages one run may hold queued for its next model step (SPEC 1.5 steering; 429 past it).
AGENTSITE_MAX_QUEUED_MESSAGES = read("AGENTSITE_MAX_QUEUED_MESSAGES")
# Bytes a websocket may hold unsent for a client that does not read; past it the socket stops
# taking live events and catches up from the ledger once the client reads (0: no bound).
AGENTSITE_WS_SEND_BUFFER_BYTES = read("AGENTSITE_WS_SEND_BUFFER_BYTES")
# SPEC 1.10: keep a cancelled streaming answer as a marked assistant message (off, as the SPEC says).
AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT = read("AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT")

# The demo's scan_fleet duration: checked here at start; the tool reads it per call (tests change it).
AGENTSITE_DEMO_SCAN_DELAY_S = read("AGENTSITE_DEMO_SCAN_DELAY_S")

# -- long-term memory and artifacts (SPEC 6, 7) ----------------------------------------------------
AGENTSITE_MEMORY_MAX_PER_USER = read("AGENTSITE_MEMORY_MAX_PER_USER")
# Auto memory: after each run, extract memories from the session's new messages (Celery job), with
# AGENTSITE_SUMMARY_MODEL: by rules with the offline model, with one model call per run (two with
# assistant episodes) on an endpoint. On by default with either (SPEC 6.3).
AGENTSITE_MEMORY_AUTO = read("AGENTSITE_MEMORY_AUTO")
# How extracted operations treat existing memories (SPEC 6.3; sessions_app.core.memory_policy).
AGENTSITE_MEMORY_UPDATE_POLICY = read("AGENTSITE_MEMORY_UPDATE_POLICY")
# The second extraction stage that records reusable assistant answers as episodes (SPEC 6.4; off as there).
AGENTSITE_MEMORY_ASSISTANT_EPISODES = read("AGENTSITE_MEMORY_ASSISTANT_EPISODES")
# Checkers: extract only when the delta has more than N messages / the last extraction is older than S seconds.
AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES = read("AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES")
AGENTSITE_MEMORY_EXTRACT_INTERVAL_S = read("AGENTSITE_MEMORY_EXTRACT_INTERVAL_S")
# Memories preloaded into the system prompt: 0 off, -1 all, N adaptive (SPEC 6.5). For the LLM flow's
# preload step (`sessions_app.core.memory_tools.memory_preload_block`); nothing reads it until that is wired.
AGENTSITE_MEMORY_PRELOAD = read("AGENTSITE_MEMORY_PRELOAD")
# Preload session recall (SPEC 5.4, issue 26): up to N events of the user's other sessions that match the
# new message, in every request of the support agent's run (0: off, the SPEC's default; at most 20), as a
# system block or a user message just before the new one.
AGENTSITE_RECALL_PRELOAD = read("AGENTSITE_RECALL_PRELOAD")
AGENTSITE_RECALL_PRELOAD_INJECTION = read("AGENTSITE_RECALL_PRELOAD_INJECTION")
AGENTSITE_ARTIFACT_MAX_BYTES = read("AGENTSITE_ARTIFACT_MAX_BYTES")
# Images and files in messages (issue 20): bytes per attachment (stored as a session artifact, so
# AGENTSITE_ARTIFACT_MAX_BYTES also bounds it) and attachments per message. A JSON body carrying them is
# bounded by AGENTSITE_MAX_BODY_BYTES first (base64 is 4/3 of the bytes).
AGENTSITE_UPLOAD_MAX_BYTES = read("AGENTSITE_UPLOAD_MAX_BYTES")
AGENTSITE_UPLOAD_MAX_COUNT = read("AGENTSITE_UPLOAD_MAX_COUNT")

# -- context governance (DESIGN 6): the process-wide ContextPolicy (agentsite/context_policy.py) ------
# The demo agents run with smaller thresholds (agentsite/demo/profile.py, the demo profile) so
# that a short session shows summaries and compaction; off: the knobs below apply as set.
AGENTSITE_DEMO_GOVERNANCE = read("AGENTSITE_DEMO_GOVERNANCE")
AGENTSITE_SUMMARIES = read("AGENTSITE_SUMMARIES")
AGENTSITE_SUMMARIZER = read("AGENTSITE_SUMMARIZER")  # or module:factory
AGENTSITE_SUMMARY_TRIGGER_RATIO = read("AGENTSITE_SUMMARY_TRIGGER_RATIO")
AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS = read("AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS")
AGENTSITE_SUMMARY_EVENT_THRESHOLD = read("AGENTSITE_SUMMARY_EVENT_THRESHOLD")
# SPEC 2.6 / 3.1: the filter keys that get summaries of their own (comma-separated, empty: all).
AGENTSITE_SUMMARY_FILTER_KEYS = read("AGENTSITE_SUMMARY_FILTER_KEYS")
# SPEC 3.5: also summarize when a request comes after an idle gap longer than this (0: off).
AGENTSITE_SUMMARY_TIME_THRESHOLD_S = read("AGENTSITE_SUMMARY_TIME_THRESHOLD_S")
AGENTSITE_SUMMARY_MAX_WORDS = read("AGENTSITE_SUMMARY_MAX_WORDS")
AGENTSITE_SUMMARY_BUDGET_TOKENS = read("AGENTSITE_SUMMARY_BUDGET_TOKENS")
AGENTSITE_SUMMARY_CACHE_SAFE_FORK = read("AGENTSITE_SUMMARY_CACHE_SAFE_FORK")
# Issue 12, C6: summaries by a model go in chunks that fit its window (summaries of summaries).
AGENTSITE_SUMMARY_CHUNKED = read("AGENTSITE_SUMMARY_CHUNKED")
AGENTSITE_SUMMARY_INJECTION = read("AGENTSITE_SUMMARY_INJECTION")
AGENTSITE_SUMMARY_JOBS = read("AGENTSITE_SUMMARY_JOBS", default="celery" if REDIS_URL else "inprocess")
AGENTSITE_SUMMARY_LOCK = read("AGENTSITE_SUMMARY_LOCK", default="redis" if REDIS_URL else "database")
if AGENTSITE_SUMMARY_LOCK == "redis" and not REDIS_URL:
    raise ImproperlyConfigured("AGENTSITE_SUMMARY_LOCK is 'redis' but REDIS_URL is not set")
AGENTSITE_SYNC_SUMMARY_INTRA_RUN = read("AGENTSITE_SYNC_SUMMARY_INTRA_RUN")
AGENTSITE_COMPACTION = read("AGENTSITE_COMPACTION")
AGENTSITE_COMPACTION_RATIO = read("AGENTSITE_COMPACTION_RATIO")
AGENTSITE_COMPACTION_MIN_TOKENS = read("AGENTSITE_COMPACTION_MIN_TOKENS")
# Issue 12, C5: at this share of the window a summary starts in the background and the call
# goes out unchanged; the next call swaps it in (off: only the blocking pre-call path above).
AGENTSITE_COMPACTION_SOFT = read("AGENTSITE_COMPACTION_SOFT")
AGENTSITE_COMPACTION_SOFT_RATIO = read("AGENTSITE_COMPACTION_SOFT_RATIO")
AGENTSITE_COMPACTION_SOFT_MIN_TOKENS = read("AGENTSITE_COMPACTION_SOFT_MIN_TOKENS")
AGENTSITE_KEEP_RECENT_REQUESTS = read("AGENTSITE_KEEP_RECENT_REQUESTS")
AGENTSITE_TOOL_RESULT_MAX_TOKENS = read("AGENTSITE_TOOL_RESULT_MAX_TOKENS")
AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS = read("AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS")
AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS = read("AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS")
AGENTSITE_COMPACTION_KEEP_TOOLS = read("AGENTSITE_COMPACTION_KEEP_TOOLS")
# Issue 12, C4: Pass 1 elides in batches of at least this many tokens (0: at once, SPEC 4.6),
# so the bytes of earlier requests, and the provider's prompt cache, change only when a batch fills.
AGENTSITE_COMPACTION_CLEAR_AT_LEAST = read("AGENTSITE_COMPACTION_CLEAR_AT_LEAST")
# Issue 12 (docs/context.md): refuse a request whose projection manifest finds an event lost
# without a way back; carry the user's standing instructions in a pinned block (share of window).
AGENTSITE_CONTEXT_MANIFEST_CHECK = read("AGENTSITE_CONTEXT_MANIFEST_CHECK")
AGENTSITE_PINNED_INTENT = read("AGENTSITE_PINNED_INTENT")
AGENTSITE_PINNED_BUDGET_RATIO = read("AGENTSITE_PINNED_BUDGET_RATIO")

# -- skills and the code workspace (SPEC 8; docs/skills.md) ----------------------------------------
# Folder skills (a SKILL.md per folder); the first root holding a name wins. Database skills
# (admin, evolution, `bootstrap_demo` imports) win over folders of the same name.
AGENTSITE_SKILLS_ROOTS = read("AGENTSITE_SKILLS_ROOTS", default=[str(BASE_DIR / "agentsite" / "demo" / "skills")])
# The demo agent's profile: `full` (load skills and run their scripts in the sandbox) or
# `knowledge_only` (load and read only; no execution tool at all).
AGENTSITE_SKILLS_PROFILE = read("AGENTSITE_SKILLS_PROFILE")
AGENTSITE_SKILLS_LOAD_MODE = read("AGENTSITE_SKILLS_LOAD_MODE")
AGENTSITE_SKILLS_MAX_LOADED = read("AGENTSITE_SKILLS_MAX_LOADED")  # 0: no cap
AGENTSITE_SKILLS_REQUIRE_LOAD = read("AGENTSITE_SKILLS_REQUIRE_LOAD")
# Workspaces live outside the project: a sandboxed command can learn its workspace's host path,
# so the folder around the workspaces must hold nothing secret (checked below).
AGENTSITE_WORKSPACE_ROOT = Path(
    read("AGENTSITE_WORKSPACE_ROOT", default=str(Path(tempfile.gettempdir()) / "agentsite" / "workspaces"))
).absolute()
AGENTSITE_WORKSPACE_TIMEOUT_S = read("AGENTSITE_WORKSPACE_TIMEOUT_S")
AGENTSITE_WORKSPACE_CPU_S = read("AGENTSITE_WORKSPACE_CPU_S")
AGENTSITE_WORKSPACE_MEMORY_MB = read("AGENTSITE_WORKSPACE_MEMORY_MB")
AGENTSITE_WORKSPACE_FILE_SIZE_MB = read("AGENTSITE_WORKSPACE_FILE_SIZE_MB")
AGENTSITE_WORKSPACE_MAX_PROCESSES = read("AGENTSITE_WORKSPACE_MAX_PROCESSES")
AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES = read("AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES")
AGENTSITE_WORKSPACE_MAX_ARTIFACTS = read("AGENTSITE_WORKSPACE_MAX_ARTIFACTS")
AGENTSITE_WORKSPACE_ALLOWED_COMMANDS = read("AGENTSITE_WORKSPACE_ALLOWED_COMMANDS")
AGENTSITE_WORKSPACE_DENIED_COMMANDS = read("AGENTSITE_WORKSPACE_DENIED_COMMANDS")
AGENTSITE_WORKSPACE_UID_BASE = read("AGENTSITE_WORKSPACE_UID_BASE")
AGENTSITE_WORKSPACE_UID_COUNT = read("AGENTSITE_WORKSPACE_UID_COUNT")
AGENTSITE_WORKSPACE_TTL_S = read("AGENTSITE_WORKSPACE_TTL_S")
# The quota of one workspace: a size-limited tmpfs where the process may mount one, else checked.
AGENTSITE_WORKSPACE_MAX_BYTES = read("AGENTSITE_WORKSPACE_MAX_BYTES")
AGENTSITE_WORKSPACE_MAX_FILES = read("AGENTSITE_WORKSPACE_MAX_FILES")
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
AGENTSITE_EVOLUTION = read("AGENTSITE_EVOLUTION", default=AGENTSITE_MODEL == "offline")
AGENTSITE_EVOLUTION_MODEL = read("AGENTSITE_EVOLUTION_MODEL", default=AGENTSITE_SUMMARY_MODEL)
# The evidence gate: review a delta with >= N tool calls (0: off), a user correction, a recovered tool error.
AGENTSITE_EVOLUTION_MIN_TOOL_CALLS = read("AGENTSITE_EVOLUTION_MIN_TOOL_CALLS")
AGENTSITE_EVOLUTION_ON_CORRECTION = read("AGENTSITE_EVOLUTION_ON_CORRECTION")
AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR = read("AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR")
# Gates, run in the order spec, safety, effectiveness, human whatever the order here; `none`: publish directly.
AGENTSITE_EVOLUTION_GATES = read("AGENTSITE_EVOLUTION_GATES")
if AGENTSITE_EVOLUTION_GATES == ["none"]:
    AGENTSITE_EVOLUTION_GATES = []
elif set(AGENTSITE_EVOLUTION_GATES) - {"spec", "safety", "effectiveness", "human"}:
    raise ImproperlyConfigured(
        "AGENTSITE_EVOLUTION_GATES must list spec, safety, effectiveness, human (or be 'none'), "
        f"got {','.join(AGENTSITE_EVOLUTION_GATES)!r}"
    )
# The Effectiveness gate's replay: `scripted` (the recorded model turns), `model` (the evolution model), `off`;
# `auto`: `model` when the evolution model is the offline one, else `scripted`.
AGENTSITE_EVOLUTION_REPLAY = read("AGENTSITE_EVOLUTION_REPLAY")
AGENTSITE_EVOLUTION_MAX_SKILL_CHARS = read("AGENTSITE_EVOLUTION_MAX_SKILL_CHARS")

# -- auth and API ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

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
        "user": read("AGENTSITE_API_RATE_USER"),
        "anon": read("AGENTSITE_API_RATE_ANON"),
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
    "root": {"handlers": ["console"], "level": read("AGENTSITE_LOG_LEVEL")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
