"""The process-wide default context policy: summaries, compaction and the pinned block.

Agents bring their own `ContextPolicy` in code (agentsite/context_policy.py); the demo
replaces eight of these with its named profile (agentsite/demo/profile.py).
"""

from __future__ import annotations

from agentsite.config.variable import Variable, declare

_CONTEXT = "Context policy (the default of agents that bring none)"

# The process-wide default context policy (summary jobs run per session, not per agent).
CONTEXT: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_DEMO_GOVERNANCE",
        "boolean",
        True,
        _CONTEXT,
        "the demo's named profile (`demo_profile`, agentsite/demo/profile.py): small thresholds so that a short session shows summaries "
        "and compaction; they replace the eight variables of this section that it names. Off: the section "
        "applies as set",
    ),
    declare("AGENTSITE_SUMMARIES", "boolean", True, _CONTEXT, "rolling session summaries"),
    declare(
        "AGENTSITE_SUMMARIZER",
        "string",
        "auto",
        _CONTEXT,
        "`auto` (extractive with the offline model, else `AGENTSITE_SUMMARY_MODEL`) or `module:factory` returning "
        "a summarizer",
    ),
    declare(
        "AGENTSITE_SUMMARY_TRIGGER_RATIO",
        "ratio",
        0.5,
        _CONTEXT,
        "summarize when the text to summarize passes max(window x ratio, min tokens)",
    ),
    declare("AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS", "integer", 2000, _CONTEXT, "the min tokens of that trigger"),
    declare(
        "AGENTSITE_SUMMARY_EVENT_THRESHOLD",
        "integer",
        0,
        _CONTEXT,
        "also summarize when more than this many events wait (0: off)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_SUMMARY_FILTER_KEYS",
        "strings",
        [],
        _CONTEXT,
        "the filter keys that get summaries of their own (empty: all)",
        shown="all",
    ),
    declare(
        "AGENTSITE_SUMMARY_TIME_THRESHOLD_S",
        "integer",
        0,
        _CONTEXT,
        "also summarize when a request comes after an idle gap longer than this (0: off)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_SUMMARY_MAX_WORDS",
        "integer",
        0,
        _CONTEXT,
        "word limit asked of a model summary (0: none)",
        minimum=0,
    ),
    declare("AGENTSITE_SUMMARY_BUDGET_TOKENS", "integer", 512, _CONTEXT, "size of an extractive summary"),
    declare(
        "AGENTSITE_SUMMARY_CACHE_SAFE_FORK",
        "boolean",
        False,
        _CONTEXT,
        "model summaries reuse the agent's request as their prefix (provider prompt caches)",
    ),
    declare(
        "AGENTSITE_SUMMARY_CHUNKED",
        "boolean",
        True,
        _CONTEXT,
        "model summaries go in chunks that fit the window, rolled up as summaries of summaries (docs/context.md)",
    ),
    declare(
        "AGENTSITE_SUMMARY_INJECTION",
        "choice",
        "system",
        _CONTEXT,
        "the summary block as a system message, or `user` (opens the first user message)",
        choices=("system", "user"),
    ),
    declare(
        "AGENTSITE_SUMMARY_JOBS",
        "choice",
        "inprocess",
        _CONTEXT,
        "where summary jobs run: Celery workers or asyncio tasks of the web process",
        choices=("celery", "inprocess"),
        shown="`celery` with `REDIS_URL`, else `inprocess`",
    ),
    declare(
        "AGENTSITE_SUMMARY_LOCK",
        "choice",
        "database",
        _CONTEXT,
        "one summariser per session and filter key: a Redis lock (needs `REDIS_URL`) or a database lease",
        choices=("redis", "database"),
        shown="`redis` with `REDIS_URL`, else `database`",
    ),
    declare(
        "AGENTSITE_SYNC_SUMMARY_INTRA_RUN",
        "boolean",
        False,
        _CONTEXT,
        "also summarize before every model call of a run but the first",
    ),
    declare("AGENTSITE_COMPACTION", "boolean", True, _CONTEXT, "tool-result compaction and pre-call compaction"),
    declare(
        "AGENTSITE_COMPACTION_RATIO", "ratio", 0.7, _CONTEXT, "pre-call compaction at max(window x ratio, min tokens)"
    ),
    declare("AGENTSITE_COMPACTION_MIN_TOKENS", "integer", 2000, _CONTEXT, "the min tokens of that threshold"),
    declare(
        "AGENTSITE_COMPACTION_SOFT",
        "boolean",
        True,
        _CONTEXT,
        "non-blocking compaction: a summary starts in the background and the next call swaps it in",
    ),
    declare(
        "AGENTSITE_COMPACTION_SOFT_RATIO",
        "ratio",
        0.55,
        _CONTEXT,
        "that background summary starts at max(window x ratio, min tokens)",
    ),
    declare(
        "AGENTSITE_COMPACTION_SOFT_MIN_TOKENS", "integer", 1500, _CONTEXT, "the min tokens of that threshold", minimum=0
    ),
    declare(
        "AGENTSITE_KEEP_RECENT_REQUESTS",
        "integer",
        1,
        _CONTEXT,
        "completed requests whose tool results are kept whole, besides the current one",
        minimum=0,
    ),
    declare(
        "AGENTSITE_TOOL_RESULT_MAX_TOKENS",
        "integer",
        1024,
        _CONTEXT,
        "older tool results over this size become recoverable placeholders",
        minimum=0,
    ),
    declare(
        "AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS",
        "integer",
        0,
        _CONTEXT,
        "cut the middle of any tool result over this size, the current request's included (0: off; 8,192 recommended)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS",
        "strings",
        [],
        _CONTEXT,
        "tools whose old results are always dropped",
        shown="none",
    ),
    declare(
        "AGENTSITE_COMPACTION_KEEP_TOOLS",
        "strings",
        [],
        _CONTEXT,
        "tools whose old results are never compacted",
        shown="none",
    ),
    declare(
        "AGENTSITE_COMPACTION_CLEAR_AT_LEAST",
        "integer",
        0,
        _CONTEXT,
        "elide old tool results only in batches of at least this many tokens (prompt cache; 0: at once)",
        minimum=0,
    ),
    declare(
        "AGENTSITE_CONTEXT_MANIFEST_CHECK",
        "boolean",
        True,
        _CONTEXT,
        "refuse a request whose projection manifest finds an event lost without a way back (docs/context.md)",
    ),
    declare(
        "AGENTSITE_PINNED_INTENT", "boolean", True, _CONTEXT, "carry the user's standing instructions in a pinned block"
    ),
    declare("AGENTSITE_PINNED_BUDGET_RATIO", "ratio", 0.05, _CONTEXT, "share of the window that pinned block may take"),
)
