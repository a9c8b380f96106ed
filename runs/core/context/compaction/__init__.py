"""Tool-result compaction (SPEC 4.6): slimmer copies of old tool results in a request.

Works on the projected history, copy-on-write: an item whose result changes is replaced
by a new item with a new message; the ledger, the session's events and the items given
are never modified. A request's history is made of *units*, one per request (run) that
produced it (`req:<request id>`, else `inv:<invocation id>`). Protected from passes 0 and
1: the current unit and the last `keep_recent_requests` completed units (a unit is
completed when one of its events is `done`).

- Pass 0 (policy): results of tools in `force_clean_tools` and not in `keep_tools` become
  a short policy note, whatever their size.
- Pass 1 (historical): results over `tool_result_max_tokens` become a recoverable
  placeholder naming the event, the tool call and the tool; it advertises `session_load`
  only when the request exposes that tool.
- Pass 2 (oversized, off by default): results over `oversized_tool_result_max_tokens`,
  the current unit's included, keep their head and tail around a marker.

Cache-stable elision (issue 12, C4): with `clear_at_least` > 0, Pass 1 elides in batches.
The units it may touch end at an *elision frontier* that moves only once the results
waiting behind it weigh `clear_at_least` tokens (`elision_frontier`). The frontier is a
function of the unit sequence alone, read oldest first, so a new request never moves an
earlier decision: between two moves the bytes of every earlier request stay as they were
and a provider's prompt cache keeps them. Placeholder and marker texts are functions of
the event alone (ids, tool name, sizes), never of the request they appear in.

The package, by concern: `config` (the knobs, defaults and the tally), `placeholders` (the
texts a pass writes, one item's replacement), `passes` (the passes over a request) and
`kept` (the same passes reused per item over a kept projection). Its public names are all
importable from here.
"""

from runs.core.context.compaction.config import (
    KEEP_RECENT_REQUESTS,
    OVERSIZED_RECOMMENDED,
    OVERSIZED_TOOL_RESULT_MAX_TOKENS,
    TOOL_RESULT_MAX_TOKENS,
    CompactionConfig,
    CompactionPass,
    CompactionStats,
)
from runs.core.context.compaction.passes import (
    compact_resume_tail,
    compact_tool_results,
    elision_frontier,
    fit_current_invocation,
    protected_units,
)
from runs.core.context.compaction.placeholders import (
    ARGS_NOTE_KEY,
    CURRENT_INVOCATION_REASON,
    PLACEHOLDER_TAG,
    SESSION_LOAD_TOOL,
    is_compacted,
    placeholder,
    policy_note,
    shorten_arguments,
)

__all__ = [
    "ARGS_NOTE_KEY",
    "CURRENT_INVOCATION_REASON",
    "KEEP_RECENT_REQUESTS",
    "OVERSIZED_RECOMMENDED",
    "OVERSIZED_TOOL_RESULT_MAX_TOKENS",
    "PLACEHOLDER_TAG",
    "SESSION_LOAD_TOOL",
    "TOOL_RESULT_MAX_TOKENS",
    "CompactionConfig",
    "CompactionPass",
    "CompactionStats",
    "compact_resume_tail",
    "compact_tool_results",
    "elision_frontier",
    "fit_current_invocation",
    "is_compacted",
    "placeholder",
    "policy_note",
    "protected_units",
    "shorten_arguments",
]
