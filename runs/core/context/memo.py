"""Per-item work a kept projection lets later requests reuse (issue 18, item 6).

The incremental projection (`runs.core.context.incremental`) hands out the same
`ProjectedItem` objects call after call for everything before its cut. What a request
derives from one item alone (is it a tool result that a compaction pass could touch, its
unit, its weight, what Pass 0/1/2 turn it into given its unit's protection; which ledger
events it shows whole or compacted, and the manifest entries those get) is therefore
kept here, keyed by the item object, and each request does that work only for the items
it has not seen yet or whose unit changed its protection. A memo lives in one projection
state: a state made again from the ledger (a new summary, a window loaded anew) starts an
empty one, so nothing derived under an old summary survives it.

Every entry holds the item it was made for and is used only for that very object
(`entry[0] is item`), so a stale or raced entry is recomputed, never misread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_ENTRIES = 8_192
"""A memo over this many entries per table is emptied (a long-lived state's old items)."""


@dataclass(eq=False)
class RequestMemo:
    """The reusable per-item outcomes of the requests built on one projection state."""

    compaction_key: tuple[Any, ...] | None = None
    """The compaction settings (config, `session_load`, tokenizer) `outcomes` were made under."""
    units: dict[int, Any] = field(default_factory=dict)
    """id(item) -> (item, what compaction reads of it alone)."""
    outcomes: dict[int, Any] = field(default_factory=dict)
    """id(item) -> (item, unit status, compacted item, pass, tokens saved)."""
    marks: dict[int, Any] = field(default_factory=dict)
    """id(item) -> (item, ids of the events it shows compacted, ids of those it shows whole)."""
    entries: dict[int, Any] = field(default_factory=dict)
    """id(event) -> (event, filter key, compacting item or None, shown whole, summary,
    superseded ids, its manifest entry, the text standing for it or None)."""
    activated: dict[int, Any] = field(default_factory=dict)
    """id(kept item) -> (kept item, its copy with `active` set)."""

    def trim(self, table: dict[int, Any]) -> None:
        if len(table) > MAX_ENTRIES:
            table.clear()
