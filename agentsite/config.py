"""Every environment variable Agentsite reads, declared once (issue 22, item 3).

`VARIABLES` is the one list: name, kind (how the value is parsed and checked), default and
what it does. `agentsite/settings.py` (and `agentsite/threads.py`, which starts before the
settings) read the environment only through `read(name)`, so a variable that is not declared
here cannot be read, and `python -m agentsite.config` prints the table that
`docs/settings.md` holds (a test keeps the two equal).

Environment variables are for deployment: URLs, secrets, limits, pools and process-wide
defaults. How many steps an agent takes is the agent's (`LLMAgent(max_steps=...)`); its
context policy is a `ContextPolicy` (agentsite/context_policy.py) built in code. The
`Context policy` section is the process-wide default policy (summary jobs run per session,
not per agent), which the demo replaces with its named profile (agentsite/demo/profile.py).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentsite.env import Env

Kind = Literal["boolean", "integer", "string", "choice", "strings", "url", "ratio", "seconds", "rate", "secret"]


@dataclass(frozen=True, kw_only=True)
class Variable:
    """One environment variable: how it is parsed and checked, its default, what it does."""

    name: str
    kind: Kind
    default: Any
    help: str
    section: str
    minimum: int = 1
    choices: tuple[str, ...] = ()
    schemes: tuple[str, ...] = ()
    shown: str = ""
    """The default as the docs show it, where it is computed from other settings."""

    def expects(self) -> str:
        """What a valid value looks like (the table's type column)."""
        if self.kind == "integer":
            return f"integer >= {self.minimum}"
        if self.kind == "choice":
            return " / ".join(f"`{choice}`" for choice in self.choices)
        if self.kind == "url":
            return "URL (" + ", ".join(f"`{scheme}`" for scheme in self.schemes) + ")"
        return {
            "boolean": "boolean",
            "string": "string",
            "strings": "comma-separated list",
            "ratio": "number in (0, 1]",
            "seconds": "seconds >= 0",
            "rate": "`N/sec|min|hour|day` or `off`",
            "secret": "string (secret)",
        }[self.kind]

    def default_text(self) -> str:
        """The default as the table shows it."""
        if self.shown:
            return self.shown
        if self.default is None or self.default == "" or self.default == []:
            return "unset"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, list):
            return "`" + ",".join(self.default) + "`"
        if isinstance(self.default, int):
            return f"{self.default:,}"
        return f"`{self.default}`"


_DJANGO = "Django"
_STORES = "Database, Redis and files"
_MODEL = "Model"
_RUNS = "Agents, runs and limits"
_MEMORY = "Long-term memory, recall and attachments"
_CONTEXT = "Context policy (the default of agents that bring none)"
_SKILLS = "Skills and the code workspace"
_EVOLUTION = "Evolution"
_PROCESS = "Processes and logs"
_DEMO = "Demo"


def _v(name: str, kind: Kind, default: Any, section: str, help: str, **options: Any) -> Variable:
    return Variable(name=name, kind=kind, default=default, section=section, help=help, **options)


VARIABLES: tuple[Variable, ...] = (
    # -- Django
    _v("DJANGO_DEBUG", "boolean", False, _DJANGO, "Django's debug mode (never in production)"),
    _v(
        "DJANGO_SECRET_KEY",
        "secret",
        "",
        _DJANGO,
        "Django's secret key (sessions, CSRF)",
        shown="a key kept in `var/secret_key`",
    ),
    _v(
        "DJANGO_ALLOWED_HOSTS",
        "strings",
        ["127.0.0.1", "localhost", "[::1]"],
        _DJANGO,
        "host names this server answers for",
    ),
    _v(
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "strings",
        [],
        _DJANGO,
        "origins (`https://app.example.com`, `https://*.example.com`) trusted for unsafe requests and for cookie "
        "websockets besides the site's own (docs/websocket.md)",
    ),
    # -- stores
    _v(
        "DATABASE_URL",
        "url",
        None,
        _STORES,
        "`postgres://user:pass@host:5432/db` or `sqlite:///relative/path`",
        schemes=("postgres", "postgresql", "pgsql", "sqlite"),
        shown="SQLite at `var/agentsite.sqlite3`",
    ),
    _v(
        "REDIS_URL",
        "url",
        None,
        _STORES,
        "Celery broker, channel layer, locks, API rate counters",
        schemes=("redis", "rediss", "unix"),
        shown="unset: Celery eager, in-memory channel layer",
    ),
    _v(
        "AGENTSITE_REDIS_MAX_CONNECTIONS",
        "integer",
        2000,
        _STORES,
        "With Redis: connections per process for the channel layer; every open socket waiting for events holds one",
    ),
    _v(
        "AGENTSITE_CHANNEL_LAYER",
        "choice",
        "pubsub",
        _STORES,
        "With Redis: `pubsub` (publish/subscribe, one round trip per event) or `lists` (channels_redis's queue layer)",
        choices=("pubsub", "lists"),
    ),
    _v(
        "AGENTSITE_REDIS_SOCKET_TIMEOUT_S",
        "integer",
        30,
        _STORES,
        "With Redis: read timeout of the channel layer; it must outwait the 5 s blocking pop that delivers events",
        minimum=6,
    ),
    _v(
        "AGENTSITE_CHANNEL_CAPACITY",
        "integer",
        10000,
        _STORES,
        "`lists` only: messages a process's inbox holds (all its sockets share it); past it sockets fall back "
        "to the ledger",
    ),
    _v(
        "AGENTSITE_CACHE_REDIS_DB",
        "integer",
        1,
        _STORES,
        "With Redis: the Redis database of Django's cache, where every web process counts the API rates "
        "(keep it apart from `REDIS_URL`'s)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_CACHE_KEY_PREFIX",
        "string",
        "agentsite",
        _STORES,
        "With Redis: the prefix of the cache's keys (two deployments sharing one Redis database need different ones)",
    ),
    _v(
        "AGENTSITE_JOB_VISIBILITY_TIMEOUT_S",
        "integer",
        300,
        _STORES,
        "a job taken by a worker that died is handed to another worker after this long; keep it above the "
        "longest job and the summary lock's lease",
    ),
    _v("AGENTSITE_SUMMARY_LOCK_TTL_S", "integer", 120, _STORES, "lease of the one-summariser-per-session lock"),
    _v(
        "AGENTSITE_STORAGE_BACKEND",
        "string",
        "django.core.files.storage.FileSystemStorage",
        _STORES,
        "the storage class of artifacts (any django-storages backend)",
    ),
    _v(
        "AGENTSITE_STORAGE_LOCATION",
        "string",
        "",
        _STORES,
        "folder of artifacts with the file storage",
        shown="`var/artifacts`",
    ),
    _v("AGENTSITE_STORAGE_BUCKET", "string", "", _STORES, "bucket of artifacts with another backend (required there)"),
    _v("AGENTSITE_STORAGE_PREFIX", "string", "", _STORES, "key prefix of artifacts in that bucket"),
    _v(
        "AGENTSITE_STORAGE_ENDPOINT_URL",
        "url",
        None,
        _STORES,
        "endpoint of an S3-compatible store (MinIO, Ceph, R2) when the backend is S3",
        schemes=("http", "https"),
        shown="unset (AWS)",
    ),
    # -- model
    _v(
        "OPENAI_BASE_URL",
        "url",
        None,
        _MODEL,
        "any OpenAI-compatible endpoint (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp)",
        schemes=("http", "https"),
        shown="unset: the offline model",
    ),
    _v("OPENAI_API_KEY", "secret", None, _MODEL, "the endpoint's API key"),
    _v(
        "AGENTSITE_MODEL",
        "string",
        "offline",
        _MODEL,
        "model name sent to the endpoint",
        shown="`offline`, or `gpt-4o-mini` when an endpoint is set",
    ),
    _v(
        "AGENTSITE_SUMMARY_MODEL",
        "string",
        "",
        _MODEL,
        "model for summaries and memory extraction",
        shown="`AGENTSITE_MODEL`",
    ),
    _v(
        "AGENTSITE_CONTEXT_WINDOW",
        "integer",
        None,
        _MODEL,
        "overrides the model's context window",
        minimum=256,
        shown="from the model table, 8,192 when unknown",
    ),
    _v("AGENTSITE_MODEL_TIMEOUT_S", "integer", 120, _MODEL, "per model call"),
    _v(
        "AGENTSITE_MODEL_MAX_RETRIES",
        "integer",
        3,
        _MODEL,
        "retries of 429, 5xx, timeouts and dropped connections (jittered backoff) while nothing was streamed yet",
        minimum=0,
    ),
    # -- runs
    _v("AGENTSITE_APP", "string", "agentsite", _RUNS, "the app name sessions, runs and skills are stored under"),
    _v(
        "AGENTSITE_AGENTS",
        "strings",
        [
            "agentsite.demo.factories:support_agent",
            "agentsite.demo.factories:general_agent",
            "agentsite.demo.factories:troubleshoot_agent",
        ],
        _RUNS,
        "the agent registry: `module:factory,...`, each factory making one agent or several, each with its own "
        "model, tools, skills and context policy (docs/agents.md)",
        shown="the demo's `support`, `general`, `troubleshoot` factories",
    ),
    _v(
        "AGENTSITE_DEFAULT_AGENT",
        "string",
        "",
        _RUNS,
        "agent used when a request names none",
        shown="the first registered agent (`support`)",
    ),
    _v(
        "AGENTSITE_A2A_ROOT_AGENT",
        "string",
        "",
        _RUNS,
        "agent whose A2A card is served at `/.well-known/agent-card.json`",
        shown="the default agent",
    ),
    _v(
        "AGENTSITE_A2A_CONFORMANCE_AGENT",
        "boolean",
        False,
        _RUNS,
        "serve the A2A conformance test agent at `/a2a/conformance` (compatibility kit only, never in production)",
    ),
    _v(
        "AGENTSITE_A2A_CONFORMANCE_HOLD_S",
        "integer",
        30,
        _RUNS,
        "how long that agent keeps a `test-resubscribe-message-id*` streamed task working",
    ),
    _v("AGENTSITE_MAX_MESSAGE_CHARS", "integer", 32_000, _RUNS, "longer messages are refused with 413"),
    _v("AGENTSITE_HISTORY_EVENT_LIMIT", "integer", 400, _RUNS, "newest ledger events loaded to start a turn"),
    _v("AGENTSITE_RUN_WAIT_TIMEOUT_S", "integer", 300, _RUNS, "longest a `wait=true` request waits"),
    _v(
        "AGENTSITE_AGUI_RUN_TIMEOUT_S",
        "integer",
        3600,
        _RUNS,
        "an AG-UI run (detached from its request) is stopped past this and ends with RUN_ERROR",
    ),
    _v("AGENTSITE_RUN_HEARTBEAT_S", "integer", 15, _RUNS, "how often a web process beats for its runs"),
    _v(
        "AGENTSITE_RUN_STALE_S",
        "integer",
        60,
        _RUNS,
        "a run whose process has not beaten for this long (another host) is reaped as `interrupted`",
    ),
    _v("AGENTSITE_MAX_BODY_BYTES", "integer", 1_048_576, _RUNS, "larger request bodies are refused with 413"),
    _v(
        "AGENTSITE_MAX_ACTIVE_RUNS_PER_USER",
        "integer",
        256,
        _RUNS,
        "a user's runs queued or running at once, over every surface and process (0: no limit); past it a start "
        "answers 429 `too_many_runs`",
        minimum=0,
    ),
    _v(
        "AGENTSITE_MAX_RUN_EVENTS",
        "integer",
        2000,
        _RUNS,
        "ledger events one run may write (0: no limit); past it the run ends `failed` with an `event_limit` error",
        minimum=0,
    ),
    _v(
        "AGENTSITE_MAX_QUEUED_MESSAGES",
        "integer",
        20,
        _RUNS,
        "messages one run may hold queued for its next model step (steering); more are refused with 429",
    ),
    _v(
        "AGENTSITE_WS_SEND_BUFFER_BYTES",
        "integer",
        262_144,
        _RUNS,
        "bytes a websocket may hold unsent for a client that does not read (0: no bound); past it the socket "
        "catches up from the ledger once the client reads",
        minimum=0,
    ),
    _v(
        "AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT",
        "boolean",
        False,
        _RUNS,
        "keep the text of an answer a cancel cut short as an assistant message that later turns see (SPEC 1.10)",
    ),
    _v(
        "AGENTSITE_API_RATE_USER",
        "rate",
        "6000/min",
        _RUNS,
        "REST requests per user (DRF throttling); past it 429 `throttled` with `Retry-After`",
    ),
    _v("AGENTSITE_API_RATE_ANON", "rate", "600/min", _RUNS, "REST requests per address without credentials"),
    # -- memory
    _v(
        "AGENTSITE_MEMORY_MAX_PER_USER",
        "integer",
        1000,
        _MEMORY,
        "long-term memories a user may hold; adding past it is refused (409)",
    ),
    _v(
        "AGENTSITE_MEMORY_AUTO",
        "boolean",
        True,
        _MEMORY,
        "after each run, a job extracts memories from the session's new messages (offline: by rules; with an "
        "endpoint: one call to `AGENTSITE_SUMMARY_MODEL` per run)",
    ),
    _v(
        "AGENTSITE_MEMORY_UPDATE_POLICY",
        "choice",
        "merge_similar",
        _MEMORY,
        "how extraction treats existing memories (docs/memory.md)",
        choices=("merge_similar", "preserve_history", "append_only"),
    ),
    _v(
        "AGENTSITE_MEMORY_ASSISTANT_EPISODES",
        "boolean",
        False,
        _MEMORY,
        "a second extraction call records reusable assistant answers as episodes; model endpoints only",
    ),
    _v(
        "AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES",
        "integer",
        0,
        _MEMORY,
        "extract only when more new messages than this wait (0: every run)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_MEMORY_EXTRACT_INTERVAL_S",
        "integer",
        0,
        _MEMORY,
        "extract only this long after the last extraction (0: every run)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_MEMORY_PRELOAD",
        "integer",
        0,
        _MEMORY,
        "memories put into the support agent's instruction at the start of each run: 0 off, -1 all, N the N most "
        "relevant",
        minimum=-1,
    ),
    _v(
        "AGENTSITE_RECALL_PRELOAD",
        "integer",
        0,
        _MEMORY,
        "preload session recall (SPEC 5.4): up to N events (at most 20) of the user's other chats that match the "
        "new message, in every request of the support agent's run (0: off)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_RECALL_PRELOAD_INJECTION",
        "choice",
        "system",
        _MEMORY,
        "the recall block as a system block, or `user` (a message just before the new one)",
        choices=("system", "user"),
    ),
    _v(
        "AGENTSITE_ARTIFACT_MAX_BYTES",
        "integer",
        10 * 1024 * 1024,
        _MEMORY,
        "larger artifacts are refused (413 on upload)",
    ),
    _v(
        "AGENTSITE_UPLOAD_MAX_BYTES",
        "integer",
        10 * 1024 * 1024,
        _MEMORY,
        "bytes of one image or file in a message (413 past it; docs/attachments.md)",
    ),
    _v("AGENTSITE_UPLOAD_MAX_COUNT", "integer", 10, _MEMORY, "attachments per message (413 past it)"),
    # -- context policy
    _v(
        "AGENTSITE_DEMO_GOVERNANCE",
        "boolean",
        True,
        _CONTEXT,
        "the demo's named profile (`demo_profile`, agentsite/demo/profile.py): small thresholds so that a short session shows summaries "
        "and compaction; they replace the eight variables of this section that it names. Off: the section "
        "applies as set",
    ),
    _v("AGENTSITE_SUMMARIES", "boolean", True, _CONTEXT, "rolling session summaries"),
    _v(
        "AGENTSITE_SUMMARIZER",
        "string",
        "auto",
        _CONTEXT,
        "`auto` (extractive with the offline model, else `AGENTSITE_SUMMARY_MODEL`) or `module:factory` returning "
        "a summarizer",
    ),
    _v(
        "AGENTSITE_SUMMARY_TRIGGER_RATIO",
        "ratio",
        0.5,
        _CONTEXT,
        "summarize when the text to summarize passes max(window x ratio, min tokens)",
    ),
    _v("AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS", "integer", 2000, _CONTEXT, "the min tokens of that trigger"),
    _v(
        "AGENTSITE_SUMMARY_EVENT_THRESHOLD",
        "integer",
        0,
        _CONTEXT,
        "also summarize when more than this many events wait (0: off)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_SUMMARY_FILTER_KEYS",
        "strings",
        [],
        _CONTEXT,
        "the filter keys that get summaries of their own (empty: all)",
        shown="all",
    ),
    _v(
        "AGENTSITE_SUMMARY_TIME_THRESHOLD_S",
        "integer",
        0,
        _CONTEXT,
        "also summarize when a request comes after an idle gap longer than this (0: off)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_SUMMARY_MAX_WORDS",
        "integer",
        0,
        _CONTEXT,
        "word limit asked of a model summary (0: none)",
        minimum=0,
    ),
    _v("AGENTSITE_SUMMARY_BUDGET_TOKENS", "integer", 512, _CONTEXT, "size of an extractive summary"),
    _v(
        "AGENTSITE_SUMMARY_CACHE_SAFE_FORK",
        "boolean",
        False,
        _CONTEXT,
        "model summaries reuse the agent's request as their prefix (provider prompt caches)",
    ),
    _v(
        "AGENTSITE_SUMMARY_CHUNKED",
        "boolean",
        True,
        _CONTEXT,
        "model summaries go in chunks that fit the window, rolled up as summaries of summaries (docs/context.md)",
    ),
    _v(
        "AGENTSITE_SUMMARY_INJECTION",
        "choice",
        "system",
        _CONTEXT,
        "the summary block as a system message, or `user` (opens the first user message)",
        choices=("system", "user"),
    ),
    _v(
        "AGENTSITE_SUMMARY_JOBS",
        "choice",
        "inprocess",
        _CONTEXT,
        "where summary jobs run: Celery workers or asyncio tasks of the web process",
        choices=("celery", "inprocess"),
        shown="`celery` with `REDIS_URL`, else `inprocess`",
    ),
    _v(
        "AGENTSITE_SUMMARY_LOCK",
        "choice",
        "database",
        _CONTEXT,
        "one summariser per session and filter key: a Redis lock (needs `REDIS_URL`) or a database lease",
        choices=("redis", "database"),
        shown="`redis` with `REDIS_URL`, else `database`",
    ),
    _v(
        "AGENTSITE_SYNC_SUMMARY_INTRA_RUN",
        "boolean",
        False,
        _CONTEXT,
        "also summarize before every model call of a run but the first",
    ),
    _v("AGENTSITE_COMPACTION", "boolean", True, _CONTEXT, "tool-result compaction and pre-call compaction"),
    _v("AGENTSITE_COMPACTION_RATIO", "ratio", 0.7, _CONTEXT, "pre-call compaction at max(window x ratio, min tokens)"),
    _v("AGENTSITE_COMPACTION_MIN_TOKENS", "integer", 2000, _CONTEXT, "the min tokens of that threshold"),
    _v(
        "AGENTSITE_COMPACTION_SOFT",
        "boolean",
        True,
        _CONTEXT,
        "non-blocking compaction: a summary starts in the background and the next call swaps it in",
    ),
    _v(
        "AGENTSITE_COMPACTION_SOFT_RATIO",
        "ratio",
        0.55,
        _CONTEXT,
        "that background summary starts at max(window x ratio, min tokens)",
    ),
    _v(
        "AGENTSITE_COMPACTION_SOFT_MIN_TOKENS", "integer", 1500, _CONTEXT, "the min tokens of that threshold", minimum=0
    ),
    _v(
        "AGENTSITE_KEEP_RECENT_REQUESTS",
        "integer",
        1,
        _CONTEXT,
        "completed requests whose tool results are kept whole, besides the current one",
        minimum=0,
    ),
    _v(
        "AGENTSITE_TOOL_RESULT_MAX_TOKENS",
        "integer",
        1024,
        _CONTEXT,
        "older tool results over this size become recoverable placeholders",
        minimum=0,
    ),
    _v(
        "AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS",
        "integer",
        0,
        _CONTEXT,
        "cut the middle of any tool result over this size, the current request's included (0: off; 8,192 recommended)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS",
        "strings",
        [],
        _CONTEXT,
        "tools whose old results are always dropped",
        shown="none",
    ),
    _v(
        "AGENTSITE_COMPACTION_KEEP_TOOLS",
        "strings",
        [],
        _CONTEXT,
        "tools whose old results are never compacted",
        shown="none",
    ),
    _v(
        "AGENTSITE_COMPACTION_CLEAR_AT_LEAST",
        "integer",
        0,
        _CONTEXT,
        "elide old tool results only in batches of at least this many tokens (prompt cache; 0: at once)",
        minimum=0,
    ),
    _v(
        "AGENTSITE_CONTEXT_MANIFEST_CHECK",
        "boolean",
        True,
        _CONTEXT,
        "refuse a request whose projection manifest finds an event lost without a way back (docs/context.md)",
    ),
    _v(
        "AGENTSITE_PINNED_INTENT", "boolean", True, _CONTEXT, "carry the user's standing instructions in a pinned block"
    ),
    _v("AGENTSITE_PINNED_BUDGET_RATIO", "ratio", 0.05, _CONTEXT, "share of the window that pinned block may take"),
    # -- skills
    _v(
        "AGENTSITE_SKILLS_ROOTS",
        "strings",
        [],
        _SKILLS,
        "folders of skills (a SKILL.md per folder); the first root holding a name wins, database skills win over "
        "folders",
        shown="`agentsite/demo/skills`",
    ),
    _v(
        "AGENTSITE_SKILLS_PROFILE",
        "choice",
        "full",
        _SKILLS,
        "`full` (load skills and run their scripts in the sandbox) or `knowledge_only` (no execution tool)",
        choices=("full", "knowledge_only"),
    ),
    _v(
        "AGENTSITE_SKILLS_LOAD_MODE",
        "choice",
        "turn",
        _SKILLS,
        "how long a loaded skill stays in the prompt (docs/skills.md)",
        choices=("turn", "once", "session"),
    ),
    _v("AGENTSITE_SKILLS_MAX_LOADED", "integer", 0, _SKILLS, "skills loaded at once (0: no cap)", minimum=0),
    _v("AGENTSITE_SKILLS_REQUIRE_LOAD", "boolean", False, _SKILLS, "a skill's script runs only once it is loaded"),
    _v(
        "AGENTSITE_WORKSPACE_ROOT",
        "string",
        "",
        _SKILLS,
        "where code workspaces live (one per run); its parent must not hold `var/`, the artifacts or the media "
        "files (checked at start)",
        shown="`<temp dir>/agentsite/workspaces`",
    ),
    _v("AGENTSITE_WORKSPACE_TIMEOUT_S", "integer", 300, _SKILLS, "wall-clock limit of one sandboxed command"),
    _v("AGENTSITE_WORKSPACE_CPU_S", "integer", 60, _SKILLS, "CPU limit of one sandboxed command"),
    _v("AGENTSITE_WORKSPACE_MEMORY_MB", "integer", 512, _SKILLS, "memory limit of one sandboxed command", minimum=64),
    _v("AGENTSITE_WORKSPACE_FILE_SIZE_MB", "integer", 64, _SKILLS, "largest file a sandboxed command may write"),
    _v("AGENTSITE_WORKSPACE_MAX_PROCESSES", "integer", 64, _SKILLS, "processes of one sandboxed command", minimum=4),
    _v(
        "AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES",
        "integer",
        16 * 1024,
        _SKILLS,
        "output of a command kept for the model",
        minimum=256,
    ),
    _v(
        "AGENTSITE_WORKSPACE_MAX_ARTIFACTS",
        "integer",
        20,
        _SKILLS,
        "files of a workspace saved as artifacts per command",
        minimum=0,
    ),
    _v(
        "AGENTSITE_WORKSPACE_ALLOWED_COMMANDS",
        "strings",
        [],
        _SKILLS,
        "policy mode: only these programs may run",
        shown="none (no policy)",
    ),
    _v(
        "AGENTSITE_WORKSPACE_DENIED_COMMANDS",
        "strings",
        [],
        _SKILLS,
        "policy mode: these programs may not run",
        shown="none",
    ),
    _v("AGENTSITE_WORKSPACE_UID", "integer", 65534, _SKILLS, "user and group id sandboxed commands run as"),
    _v("AGENTSITE_WORKSPACE_TTL_S", "integer", 24 * 3600, _SKILLS, "a workspace unused this long is swept"),
    _v(
        "AGENTSITE_WORKSPACE_MAX_BYTES",
        "integer",
        256 * 1024 * 1024,
        _SKILLS,
        "quota of one workspace (a size-limited tmpfs where the server may mount one, else checked)",
        minimum=1024 * 1024,
    ),
    _v(
        "AGENTSITE_WORKSPACE_MAX_FILES",
        "integer",
        10_000,
        _SKILLS,
        "files and folders one workspace may hold",
        minimum=16,
    ),
    # -- evolution
    _v(
        "AGENTSITE_EVOLUTION",
        "boolean",
        True,
        _EVOLUTION,
        "queue a skill review after each completed run",
        shown="on with the offline model, else off",
    ),
    _v(
        "AGENTSITE_EVOLUTION_MODEL",
        "string",
        "",
        _EVOLUTION,
        "the reviewer's model (`offline`: heuristic reviewer)",
        shown="`AGENTSITE_SUMMARY_MODEL`",
    ),
    _v(
        "AGENTSITE_EVOLUTION_MIN_TOOL_CALLS",
        "integer",
        4,
        _EVOLUTION,
        "evidence gate: tool calls (0: trigger off)",
        minimum=0,
    ),
    _v("AGENTSITE_EVOLUTION_ON_CORRECTION", "boolean", True, _EVOLUTION, "evidence gate: a user correction"),
    _v("AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR", "boolean", True, _EVOLUTION, "evidence gate: a recovered tool error"),
    _v(
        "AGENTSITE_EVOLUTION_GATES",
        "strings",
        ["spec", "safety", "effectiveness", "human"],
        _EVOLUTION,
        "gates a candidate passes (`spec`, `safety`, `effectiveness`, `human`); `none`: publish directly",
    ),
    _v(
        "AGENTSITE_EVOLUTION_REPLAY",
        "choice",
        "auto",
        _EVOLUTION,
        "the Effectiveness gate's replay (docs/evolution.md)",
        choices=("auto", "scripted", "model", "off"),
    ),
    _v("AGENTSITE_EVOLUTION_MAX_SKILL_CHARS", "integer", 16_000, _EVOLUTION, "the Spec gate's size limit", minimum=512),
    # -- processes
    _v(
        "AGENTSITE_DB_THREADS",
        "integer",
        8,
        _PROCESS,
        "database threads per web process (each may hold a database connection)",
    ),
    _v(
        "AGENTSITE_VIEW_THREADS",
        "integer",
        16,
        _PROCESS,
        "threads per web process for REST views that start, cancel or steer runs",
    ),
    _v(
        "AGENTSITE_LOG_LEVEL",
        "choice",
        "INFO",
        _PROCESS,
        "the root logger's level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    ),
    # -- demo
    _v(
        "AGENTSITE_DEMO_SCAN_DELAY_S",
        "seconds",
        10.0,
        _DEMO,
        "how long the demo's `scan_fleet` tool takes in all (spread over its twelve steps, each with a progress "
        "report); tests set it small",
        shown="10",
    ),
)

BY_NAME: Mapping[str, Variable] = {variable.name: variable for variable in VARIABLES}

_UNSET: Any = object()


def read(name: str, *, default: Any = _UNSET, environ: Mapping[str, str] | None = None) -> Any:
    """The declared variable `name` from the environment, parsed and checked; `default`
    replaces the declared one where it is computed from other settings. A bad value raises
    ImproperlyConfigured naming the variable and what it expects; an undeclared name is a
    KeyError (declare it in VARIABLES first)."""
    variable = BY_NAME[name]
    env = Env(environ)
    value = variable.default if default is _UNSET else default
    match variable.kind:
        case "boolean":
            return env.boolean(name, value)
        case "integer":
            return env.integer(name, value, minimum=variable.minimum)
        case "string":
            return env.string(name, value)
        case "secret":
            return env.raw(name) or value
        case "choice":
            return env.choice(name, value, choices=variable.choices)
        case "strings":
            # A copy: the declaration's default list is shared by every read.
            return list(env.strings(name, value))
        case "url":
            return env.url(name, schemes=variable.schemes) or value
        case "ratio":
            return env.ratio(name, value)
        case "seconds":
            return env.seconds(name, value)
        case "rate":
            return env.rate(name, value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """The Markdown table of every variable, by section (docs/settings.md)."""
    lines: list[str] = []
    section = ""
    for variable in VARIABLES:
        if variable.section != section:
            section = variable.section
            lines += [
                "",
                f"## {section}",
                "",
                "| variable | type | default | what it does |",
                "| --- | --- | --- | --- |",
            ]
        lines.append(
            f"| `{variable.name}` | {_cell(variable.expects())} | {_cell(variable.default_text())} | "
            f"{_cell(variable.help)} |"
        )
    return "\n".join(lines).lstrip("\n") + "\n"


HEADER = """# Settings

Every environment variable Agentsite reads. Generated from `agentsite/config.py` by
`python -m agentsite.config > docs/settings.md`; a test keeps this file equal to it. Each is
read once, at start-up, and checked: a bad value stops the server with a message naming the
variable and what it expects.

Environment variables are for deployment: URLs, secrets, limits, pools and process-wide
defaults. How many steps an agent takes is the agent's own (`LLMAgent(max_steps=...)`), and
so is its context policy: a `ContextPolicy` (`agentsite/context_policy.py`) built in code,
turned into the agent's governance by `governance(policy, ...)`. The context-policy section
is the process-wide default policy (summary jobs run per session, not per agent:
`ContextPolicy.from_settings()`); the demo replaces eight of its values with its named
profile (`agentsite/demo/profile.py`) while `AGENTSITE_DEMO_GOVERNANCE` is on.

"""


def document() -> str:
    """docs/settings.md: the header and the table."""
    return HEADER + table()


if __name__ == "__main__":
    sys.stdout.write(document())
