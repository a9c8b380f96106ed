"""Agents, surfaces and limits: what a request, a run and a user may use, and what a user keeps."""

from __future__ import annotations

from agentsite.config.variable import Variable, declare

_RUNS = "Agents, runs and limits"
_MEMORY = "Long-term memory, recall and attachments"

# The agent registry, the protocol surfaces (A2A, AG-UI, websockets, REST) and what one user or run may use.
RUNS: tuple[Variable, ...] = (
    declare("AGENTSITE_APP", "string", "agentsite", _RUNS, "the app name sessions, runs and skills are stored under"),
    declare(
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
    declare(
        "AGENTSITE_DEFAULT_AGENT",
        "string",
        "",
        _RUNS,
        "agent used when a request names none",
        shown="the first registered agent (`support`)",
    ),
    declare(
        "AGENTSITE_A2A_ROOT_AGENT",
        "string",
        "",
        _RUNS,
        "agent whose A2A card is served at `/.well-known/agent-card.json`",
        shown="the default agent",
    ),
    declare(
        "AGENTSITE_A2A_CONFORMANCE_AGENT",
        "boolean",
        False,
        _RUNS,
        "serve the A2A conformance test agent at `/a2a/conformance` (compatibility kit only, never in production)",
    ),
    declare(
        "AGENTSITE_A2A_CONFORMANCE_HOLD_S",
        "integer",
        30,
        _RUNS,
        "how long that agent keeps a `test-resubscribe-message-id*` streamed task working",
    ),
    declare("AGENTSITE_MAX_MESSAGE_CHARS", "integer", 32_000, _RUNS, "longer messages are refused with 413"),
    declare("AGENTSITE_HISTORY_EVENT_LIMIT", "integer", 400, _RUNS, "newest ledger events loaded to start a turn"),
    declare("AGENTSITE_RUN_WAIT_TIMEOUT_S", "integer", 300, _RUNS, "longest a `wait=true` request waits"),
    declare(
        "AGENTSITE_AGUI_RUN_TIMEOUT_S",
        "integer",
        3600,
        _RUNS,
        "an AG-UI run (detached from its request) is stopped past this and ends with RUN_ERROR",
    ),
    declare("AGENTSITE_RUN_HEARTBEAT_S", "integer", 15, _RUNS, "how often a web process beats for its runs"),
    declare(
        "AGENTSITE_RUN_STALE_S",
        "integer",
        60,
        _RUNS,
        "a run whose process has not beaten for this long (another host) is reaped as `interrupted`",
    ),
    declare("AGENTSITE_MAX_BODY_BYTES", "integer", 1_048_576, _RUNS, "larger request bodies are refused with 413"),
    declare(
        "AGENTSITE_MAX_ACTIVE_RUNS_PER_USER",
        "integer",
        256,
        _RUNS,
        "a user's runs queued or running at once, over every surface and process (0: no limit); past it a start "
        "answers 429 `too_many_runs`",
        minimum=0,
    ),
    declare(
        "AGENTSITE_MAX_RUN_EVENTS",
        "integer",
        2000,
        _RUNS,
        "ledger events one run may write (0: no limit); past it the run ends `failed` with an `event_limit` error",
        minimum=0,
    ),
    declare(
        "AGENTSITE_MAX_QUEUED_MESSAGES",
        "integer",
        20,
        _RUNS,
        "messages one run may hold queued for its next model step (steering); more are refused with 429",
    ),
    declare(
        "AGENTSITE_WS_SEND_BUFFER_BYTES",
        "integer",
        262_144,
        _RUNS,
        "bytes a websocket may hold unsent for a client that does not read (0: no bound); past it the socket "
        "catches up from the ledger once the client reads",
        minimum=0,
    ),
    declare(
        "AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT",
        "boolean",
        False,
        _RUNS,
        "keep the text of an answer a cancel cut short as an assistant message that later turns see (SPEC 1.10)",
    ),
    declare(
        "AGENTSITE_API_RATE_USER",
        "rate",
        "6000/min",
        _RUNS,
        "REST requests per user (DRF throttling); past it 429 `throttled` with `Retry-After`",
    ),
    declare("AGENTSITE_API_RATE_ANON", "rate", "600/min", _RUNS, "REST requests per address without credentials"),
)

# What a user may store: long-term memories, session recall, artifacts and attachments.
MEMORY: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_MEMORY_MAX_PER_USER",
        "integer",
        1000,
        _MEMORY,
        "long-term memories a user may hold; adding past it is refused (409)",
    ),
    declare(
        "AGENTSITE_MEMORY_AUTO",
        "boolean",
        True,
        _MEMORY,
        "after each run, a job extracts memories from the session's new messages (offline: by rules; with an "
        "endpoint: one call to `AGENTSITE_SUMMARY_MODEL` per run)",
    ),
    declare(
        "AGENTSITE_MEMORY_UPDATE_POLICY",
        "choice",
        "merge_similar",
        _MEMORY,
        "how extraction treats existing memories (docs/memory.md)",
        choices=("merge_similar", "preserve_history", "append_only"),
    ),
    declare(
        "AGENTSITE_MEMORY_ASSISTANT_EPISODES",
        "boolean",
        False,
        _MEMORY,
        "a second extraction call records reusable assistant answers as episodes; model endpoints only",
    ),
    declare(
        "AGENTSITE_MEMORY_EXTRACT_MIN_MESSAGES",
        "integer",
        0,
        _MEMORY,
        "extract only when more new messages than this wait (0: every run)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_MEMORY_EXTRACT_INTERVAL_S",
        "integer",
        0,
        _MEMORY,
        "extract only this long after the last extraction (0: every run)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_MEMORY_PRELOAD",
        "integer",
        0,
        _MEMORY,
        "memories put into the support agent's instruction at the start of each run: 0 off, -1 all, N the N most "
        "relevant",
        minimum=-1,
    ),
    declare(
        "AGENTSITE_RECALL_PRELOAD",
        "integer",
        0,
        _MEMORY,
        "preload session recall (SPEC 5.4): up to N events (at most 20) of the user's other chats that match the "
        "new message, in every request of the support agent's run (0: off)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_RECALL_PRELOAD_INJECTION",
        "choice",
        "system",
        _MEMORY,
        "the recall block as a system block, or `user` (a message just before the new one)",
        choices=("system", "user"),
    ),
    declare(
        "AGENTSITE_ARTIFACT_MAX_BYTES",
        "integer",
        10 * 1024 * 1024,
        _MEMORY,
        "larger artifacts are refused (413 on upload)",
    ),
    declare(
        "AGENTSITE_UPLOAD_MAX_BYTES",
        "integer",
        10 * 1024 * 1024,
        _MEMORY,
        "bytes of one image or file in a message (413 past it; docs/attachments.md)",
    ),
    declare("AGENTSITE_UPLOAD_MAX_COUNT", "integer", 10, _MEMORY, "attachments per message (413 past it)"),
)
