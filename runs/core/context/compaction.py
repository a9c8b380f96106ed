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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from runs.core.context.memo import RequestMemo
from runs.core.context.projection import ProjectedItem, compaction_unit
from sessions_app.core.summary import Tokenizer

SESSION_LOAD_TOOL = "session_load"
PLACEHOLDER_TAG = "[compacted tool result]"
"""Every text a pass writes starts with this; a pass never compacts it again."""

# DESIGN 6 / SPEC 4.2 defaults.
KEEP_RECENT_REQUESTS = 1
TOOL_RESULT_MAX_TOKENS = 1024
OVERSIZED_TOOL_RESULT_MAX_TOKENS = 0
OVERSIZED_RECOMMENDED = 8192

CompactionPass = Literal["pass0", "pass1", "pass2", "args"]
CURRENT_INVOCATION_REASON = "current_invocation_summary"
ARGS_NOTE_KEY = "_context_note"


@dataclass(frozen=True, kw_only=True)
class CompactionConfig:
    """The compaction knobs (DESIGN 6). `enabled=False` turns every pass off."""

    enabled: bool = True
    keep_recent_requests: int = KEEP_RECENT_REQUESTS
    tool_result_max_tokens: int = TOOL_RESULT_MAX_TOKENS
    oversized_tool_result_max_tokens: int = OVERSIZED_TOOL_RESULT_MAX_TOKENS
    force_clean_tools: frozenset[str] = frozenset()
    keep_tools: frozenset[str] = frozenset()
    clear_at_least: int = 0
    """Issue 12, C4: Pass 1 elides in batches of at least this many tokens of results
    (0: each result as soon as its unit leaves the protected ones, SPEC 4.6)."""

    def __post_init__(self) -> None:
        for name in (
            "keep_recent_requests",
            "tool_result_max_tokens",
            "oversized_tool_result_max_tokens",
            "clear_at_least",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True, kw_only=True)
class CompactionStats:
    """How many results each pass replaced, and the tokens that saved."""

    pass0: int = 0
    pass1: int = 0
    pass2: int = 0
    resume_tail: int = 0
    """Results and call arguments of the resume tail replaced (SPEC 4.5)."""
    fallback: int = 0
    """Results of the running invocation replaced or cut because a request still did not
    fit after its summary (or without one)."""
    tokens_saved: int = 0

    @property
    def total(self) -> int:
        return self.pass0 + self.pass1 + self.pass2 + self.resume_tail + self.fallback

    def plus(self, other: CompactionStats) -> CompactionStats:
        return CompactionStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        )

    def to_dict(self) -> dict[str, int]:
        # Not dataclasses.asdict: it deep-copies, and every model call records these.
        return {f.name: getattr(self, f.name) for f in _STATS_FIELDS}


_STATS_FIELDS = dataclasses.fields(CompactionStats)


def protected_units(
    unit_order: Sequence[str], completed: Iterable[str], *, current_unit: str, keep_recent_requests: int
) -> frozenset[str]:
    """The current unit and the last `keep_recent_requests` completed ones before it."""
    done = set(completed)
    protected = {current_unit}
    kept = 0
    for unit in reversed(unit_order):
        if kept >= keep_recent_requests:
            break
        if unit != current_unit and unit in done:
            protected.add(unit)
            kept += 1
    return frozenset(protected)


def is_compacted(content: str) -> bool:
    return content.startswith(PLACEHOLDER_TAG)


def policy_note() -> str:
    """Pass 0's text: no ids and no recovery hints (SPEC 4.6)."""
    return f"{PLACEHOLDER_TAG} This result was left out of the context by the compaction policy for this tool."


def placeholder(item: ProjectedItem, *, session_load: bool, reason: str = "historical_compaction") -> str:
    """Pass 1's recoverable placeholder for a tool result."""
    message = item.message
    event = item.event
    event_id = event.id if event is not None else ""
    failed = bool(event is not None and event.extensions.get("tool_error"))
    if reason == CURRENT_INVOCATION_REASON:
        lead = (
            f"{PLACEHOLDER_TAG} This tool result of the current run is left out of the raw history; the call "
            f"{'ended with an error' if failed else 'succeeded'}, and its payload was compacted to keep the "
            "context within bounds. Use the summary and the details below before repeating work."
        )
    else:
        lead = (
            f"{PLACEHOLDER_TAG} This tool call {'ended with an error' if failed else 'succeeded'}; the assistant "
            "already used its result, which was removed to save context. Rely on the summary and the details "
            "below. Re-run a tool only if it is read-only or idempotent and the exact data is needed; never "
            "repeat an operation with side effects."
        )
    lines = [lead]
    if event_id:
        lines.append(f"event_id: {event_id}")
    if message.tool_call_id:
        lines.append(f"tool_call_id: {message.tool_call_id}")
    lines.append(f"tool_name: {message.tool_name or 'tool'}")
    lines.append(f"reason: {reason}")
    if not event_id and not message.tool_call_id:
        lines.append("recoverable: false")
    elif session_load and event_id:
        lines.append(
            f"For the full result, call {SESSION_LOAD_TOOL} with this event_id "
            "(content_offset/content_limit page through it)."
        )
    else:
        lines.append("The full result cannot be loaded with the tools available here.")
    return "\n".join(lines)


def _truncation_marker(item: ProjectedItem, dropped: int, *, session_load: bool) -> str:
    message = item.message
    event_id = item.event.id if item.event is not None else ""
    parts = [f"[... {dropped} characters of this tool result left out"]
    if event_id:
        parts.append(f"event_id={event_id}")
    if message.tool_call_id:
        parts.append(f"tool_call_id={message.tool_call_id}")
    parts.append(f"tool_name={message.tool_name or 'tool'}")
    if session_load and event_id:
        parts.append(f"call {SESSION_LOAD_TOOL} with this event_id for the rest ...]")
    else:
        parts.append("re-run only safe read-only or idempotent tools if the rest is needed ...]")
    return "; ".join(parts)


def _truncate(
    item: ProjectedItem, limit: int, tokenizer: Tokenizer, *, session_load: bool
) -> tuple[str, int, int] | None:
    """The longest head + marker + tail of the result within `limit` tokens (binary search over
    the characters kept) with the head and tail lengths it kept, or None when even the marker
    alone does not fit."""
    content = item.message.content
    best: tuple[str, int, int] | None = None
    low, high = 0, len(content)
    while low <= high:
        keep = (low + high) // 2
        head, tail = content[: (keep + 1) // 2], content[len(content) - keep // 2 :] if keep // 2 else ""
        marker = _truncation_marker(item, len(content) - keep, session_load=session_load)
        candidate = f"{PLACEHOLDER_TAG} {head}\n{marker}\n{tail}"
        if tokenizer.count_text(candidate) <= limit:
            best, low = (candidate, len(head), len(tail)), keep + 1
        else:
            high = keep - 1
    return best


def _replace(
    item: ProjectedItem, content: str, which: CompactionPass, tokenizer: Tokenizer
) -> tuple[ProjectedItem, int]:
    before = tokenizer.count_message(item.message)
    message = dataclasses.replace(item.message, content=content)
    saved = before - tokenizer.count_message(message)
    return (
        dataclasses.replace(item, message=message, compaction=which, original_tokens=item.original_tokens or before),
        saved,
    )


def elision_frontier(
    items: Sequence[ProjectedItem],
    *,
    unit_order: Sequence[str],
    protected: frozenset[str],
    eligible: Callable[[ProjectedItem], bool],
    clear_at_least: int,
    tokenizer: Tokenizer,
) -> frozenset[str]:
    """The units Pass 1 may elide under batching (C4): read oldest first up to the first
    protected unit, the frontier jumps to the unit at which the tokens of `eligible`
    results since the last jump reach `clear_at_least`. Everything up to the frontier
    is elidable; what waits behind it stays verbatim until the batch is full.

    Each jump depends only on the units before it, so appending units (a new request)
    adds jumps but never moves one; the set changes only when a batch fills.
    """
    weight: dict[str, int] = {}
    for item in items:
        if item.event is not None and eligible(item):
            unit = compaction_unit(item.event)
            weight[unit] = weight.get(unit, 0) + tokenizer.count_text(item.message.content)
    frontier: list[str] = []
    pending: list[str] = []
    waiting = 0
    for unit in unit_order:
        if unit in protected:
            break  # a batch never reaches past the oldest protected unit
        pending.append(unit)
        waiting += weight.get(unit, 0)
        if waiting >= clear_at_least:
            frontier.extend(pending)
            pending, waiting = [], 0
    return frozenset(frontier)


def compact_tool_results(
    items: Sequence[ProjectedItem],
    *,
    config: CompactionConfig,
    current_unit: str,
    unit_order: Sequence[str],
    completed_units: Iterable[str],
    session_load: bool,
    tokenizer: Tokenizer,
    memo: RequestMemo | None = None,
) -> tuple[list[ProjectedItem], CompactionStats]:
    """Run the enabled passes in order (0, 1, 2) over a copy of `items`.

    With `memo` (the kept projection's, issue 18) the outcome is the same, but each item's
    passes run once per item object and protection status of its unit (`_compact_kept`).
    """
    out = list(items)
    if not config.enabled:
        return out, CompactionStats()
    protected = protected_units(
        unit_order, completed_units, current_unit=current_unit, keep_recent_requests=config.keep_recent_requests
    )
    if memo is not None:
        return _compact_kept(
            out,
            config=config,
            current_unit=current_unit,
            unit_order=unit_order,
            protected=protected,
            session_load=session_load,
            tokenizer=tokenizer,
            memo=memo,
        )
    counts: dict[str, int] = {"pass0": 0, "pass1": 0, "pass2": 0}
    saved_total = 0

    def results(*, include_protected: bool) -> Iterable[tuple[int, ProjectedItem]]:
        for index, item in enumerate(out):
            message = item.message
            if message.role != "tool" or message.tool_call_id is None or is_compacted(message.content):
                continue
            if (message.tool_name or "") in config.keep_tools:
                continue
            if not include_protected and (item.event is None or compaction_unit(item.event) in protected):
                continue
            yield index, item

    if config.force_clean_tools:
        for index, item in list(results(include_protected=False)):
            if (item.message.tool_name or "") in config.force_clean_tools:
                out[index], saved = _replace(item, policy_note(), "pass0", tokenizer)
                counts["pass0"] += 1
                saved_total += max(0, saved)
    if config.tool_result_max_tokens > 0 and current_unit:

        def over(item: ProjectedItem) -> bool:
            return tokenizer.count_text(item.message.content) > config.tool_result_max_tokens

        batch: frozenset[str] | None = None
        if config.clear_at_least > 0:
            eligible = {id(item) for _, item in results(include_protected=False) if over(item)}
            batch = elision_frontier(
                out,
                unit_order=unit_order,
                protected=protected,
                eligible=lambda i: id(i) in eligible,
                clear_at_least=config.clear_at_least,
                tokenizer=tokenizer,
            )
        for index, item in list(results(include_protected=False)):
            if not over(item):
                continue
            if batch is not None and (item.event is None or compaction_unit(item.event) not in batch):
                continue  # waits for its batch (C4)
            replaced, saved = _replace(item, placeholder(item, session_load=session_load), "pass1", tokenizer)
            if saved > 0:
                out[index] = replaced
                counts["pass1"] += 1
                saved_total += saved
    limit = config.oversized_tool_result_max_tokens
    if limit > 0:
        for index, item in list(results(include_protected=True)):
            if item.message.tool_name == SESSION_LOAD_TOOL or tokenizer.count_text(item.message.content) <= limit:
                continue
            cut = _truncate(item, limit, tokenizer, session_load=session_load)
            if cut is None:
                continue
            replaced, saved = _replace(item, cut[0], "pass2", tokenizer)
            if saved > 0:
                out[index] = dataclasses.replace(replaced, truncation=(cut[1], cut[2], len(item.message.content)))
                counts["pass2"] += 1
                saved_total += saved
    return out, CompactionStats(tokens_saved=saved_total, **counts)


@dataclass(frozen=True, slots=True)
class _Reading:
    """What the passes read of one item alone (see `_compact_kept`)."""

    unit: str | None
    """Its compaction unit; None for an item with no event (never "unprotected")."""
    candidate: bool
    """A tool result a pass may touch: a call id, not compacted yet, not a kept tool."""
    forced: bool
    """Pass 0 applies to it when unprotected."""
    eligible: bool
    """Pass 1 applies to it when unprotected (and in a batch): over the limit, not forced."""
    weight: int
    """Its tokens, for the batch frontier (eligible results only)."""


def _read(item: ProjectedItem, config: CompactionConfig, tokenizer: Tokenizer) -> _Reading:
    message = item.message
    unit = compaction_unit(item.event) if item.event is not None else None
    candidate = (
        message.role == "tool"
        and message.tool_call_id is not None
        and not is_compacted(message.content)
        and (message.tool_name or "") not in config.keep_tools
    )
    if not candidate:
        return _Reading(unit=unit, candidate=False, forced=False, eligible=False, weight=0)
    forced = bool(config.force_clean_tools) and (message.tool_name or "") in config.force_clean_tools
    tokens = tokenizer.count_text(message.content) if config.tool_result_max_tokens > 0 else 0
    eligible = not forced and config.tool_result_max_tokens > 0 and tokens > config.tool_result_max_tokens
    return _Reading(unit=unit, candidate=True, forced=forced, eligible=eligible, weight=tokens if eligible else 0)


def _compact_one(
    item: ProjectedItem,
    reading: _Reading,
    *,
    unprotected: bool,
    in_batch: bool,
    config: CompactionConfig,
    current_unit: str,
    session_load: bool,
    tokenizer: Tokenizer,
) -> tuple[ProjectedItem, str | None, int]:
    """Passes 0, 1 and 2 on one item, as `compact_tool_results` runs them over all:
    (the item after them, the last pass that replaced it, the tokens that saved)."""
    which: str | None = None
    saved_total = 0
    if reading.forced and unprotected:
        item, saved = _replace(item, policy_note(), "pass0", tokenizer)
        which, saved_total = "pass0", max(0, saved)
    elif reading.eligible and unprotected and in_batch and current_unit:
        replaced, saved = _replace(item, placeholder(item, session_load=session_load), "pass1", tokenizer)
        if saved > 0:
            item, which, saved_total = replaced, "pass1", saved
    limit = config.oversized_tool_result_max_tokens
    message = item.message
    if (
        limit > 0
        and message.role == "tool"
        and message.tool_call_id is not None
        and not is_compacted(message.content)
        and (message.tool_name or "") not in config.keep_tools
        and message.tool_name != SESSION_LOAD_TOOL
        and tokenizer.count_text(message.content) > limit
    ):
        cut = _truncate(item, limit, tokenizer, session_load=session_load)
        if cut is not None:
            replaced, saved = _replace(item, cut[0], "pass2", tokenizer)
            if saved > 0:
                item = dataclasses.replace(replaced, truncation=(cut[1], cut[2], len(message.content)))
                which, saved_total = "pass2", saved_total + saved
    return item, which, saved_total


def _compact_kept(
    out: list[ProjectedItem],
    *,
    config: CompactionConfig,
    current_unit: str,
    unit_order: Sequence[str],
    protected: frozenset[str],
    session_load: bool,
    tokenizer: Tokenizer,
    memo: RequestMemo,
) -> tuple[list[ProjectedItem], CompactionStats]:
    """`compact_tool_results` over items a kept projection hands out again and again.

    Each pass decides an item from the item alone and its unit's standing (protected or
    not, in Pass 1's batch or not): Pass 0 and 1 skip protected units, Pass 1 waits for
    the batch frontier (C4), Pass 2 reads only the item. The batch frontier depends on the
    eligible results' weights, which are per item too. So an item's outcome is kept per
    item object and standing, and a request recomputes only new items and items whose
    unit changed standing (a run that completes moves the protection on).
    """
    key = (config, session_load, id(tokenizer), tokenizer)
    if memo.compaction_key != key:
        memo.compaction_key = key
        memo.units.clear()
        memo.outcomes.clear()
    readings = memo.units
    memo.trim(readings)
    read: list[_Reading] = []
    for item in out:
        hit = readings.get(id(item))
        if hit is not None and hit[0] is item:
            read.append(hit[1])
            continue
        reading = _read(item, config, tokenizer)
        readings[id(item)] = (item, reading)
        read.append(reading)
    batch: frozenset[str] | None = None
    if config.tool_result_max_tokens > 0 and current_unit and config.clear_at_least > 0:
        weight: dict[str, int] = {}
        for reading in read:
            if reading.eligible and reading.unit is not None and reading.unit not in protected:
                weight[reading.unit] = weight.get(reading.unit, 0) + reading.weight
        batch = _frontier(weight, unit_order=unit_order, protected=protected, clear_at_least=config.clear_at_least)
    counts: dict[str, int] = {"pass0": 0, "pass1": 0, "pass2": 0}
    saved_total = 0
    outcomes = memo.outcomes
    memo.trim(outcomes)
    passes = config.force_clean_tools or config.tool_result_max_tokens > 0 or config.oversized_tool_result_max_tokens
    for index, item in enumerate(out):
        reading = read[index]
        if not reading.candidate or not passes:
            continue
        unprotected = reading.unit is not None and reading.unit not in protected
        in_batch = batch is None or (reading.unit is not None and reading.unit in batch)
        standing = (unprotected, in_batch, current_unit == "")
        hit = outcomes.get(id(item))
        if hit is not None and hit[0] is item and hit[1] == standing:
            _, _, compacted, which, saved = hit
        else:
            compacted, which, saved = _compact_one(
                item,
                reading,
                unprotected=unprotected,
                in_batch=in_batch,
                config=config,
                current_unit=current_unit,
                session_load=session_load,
                tokenizer=tokenizer,
            )
            outcomes[id(item)] = (item, standing, compacted, which, saved)
        if which is not None:  # one pass at most: a replaced text is never compacted again
            out[index] = compacted
            saved_total += saved
            counts[which] += 1
    return out, CompactionStats(tokens_saved=saved_total, **counts)


def _frontier(
    weight: dict[str, int], *, unit_order: Sequence[str], protected: frozenset[str], clear_at_least: int
) -> frozenset[str]:
    """`elision_frontier` from the units' weights."""
    frontier: list[str] = []
    pending: list[str] = []
    waiting = 0
    for unit in unit_order:
        if unit in protected:
            break
        pending.append(unit)
        waiting += weight.get(unit, 0)
        if waiting >= clear_at_least:
            frontier.extend(pending)
            pending, waiting = [], 0
    return frozenset(frontier)


def shorten_arguments(item: ProjectedItem, limit: int, tokenizer: Tokenizer) -> ProjectedItem | None:
    """SPEC 4.5: the resume tail's call message with every call's arguments over `limit`
    tokens replaced by a note naming the event (None when none is over)."""
    event_id = item.event.id if item.event is not None else ""
    note = json.dumps(
        {
            ARGS_NOTE_KEY: "tool arguments omitted; the call completed before the summary",
            "event_id": event_id,
        }
    )
    calls = tuple(
        dataclasses.replace(call, arguments=note) if tokenizer.count_text(call.arguments) > limit else call
        for call in item.message.tool_calls
    )
    if calls == item.message.tool_calls:
        return None
    before = tokenizer.count_message(item.message)
    return dataclasses.replace(
        item,
        message=dataclasses.replace(item.message, tool_calls=calls),
        compaction="args",
        original_tokens=item.original_tokens or before,
    )


def compact_resume_tail(
    items: Sequence[ProjectedItem], *, config: CompactionConfig, session_load: bool, tokenizer: Tokenizer
) -> tuple[list[ProjectedItem], CompactionStats]:
    """SPEC 4.5: the resume tail's results over `tool_result_max_tokens` become placeholders
    (reason `current_invocation_summary`) and its oversized call arguments a note.

    Unlike SPEC 4.5, results the model has not answered yet (no assistant message of the
    run follows the tail: the summary was made right before this call) stay verbatim: a
    placeholder would withhold exactly what the model is about to read, and make it call
    `session_load` for it. If they do not fit, the pre-call fit cuts them.
    """
    out = list(items)
    limit = config.tool_result_max_tokens
    if not config.enabled or limit <= 0:
        return out, CompactionStats()
    tail = [i for i, item in enumerate(out) if item.resume_tail]
    unread = bool(tail) and not any(item.active and item.message.role == "assistant" for item in out[tail[-1] + 1 :])
    count = saved_total = 0
    for index in tail:
        item = out[index]
        message = item.message
        if (
            message.role == "tool"
            and not unread
            and not is_compacted(message.content)
            and tokenizer.count_text(message.content) > limit
        ):
            text = placeholder(item, session_load=session_load, reason=CURRENT_INVOCATION_REASON)
            replaced, saved = _replace(item, text, "pass1", tokenizer)
        elif message.tool_calls and (shortened := shorten_arguments(item, limit, tokenizer)) is not None:
            replaced, saved = shortened, tokenizer.count_message(message) - tokenizer.count_message(shortened.message)
        else:
            continue
        if saved > 0:
            out[index] = replaced
            count += 1
            saved_total += saved
    return out, CompactionStats(resume_tail=count, tokens_saved=saved_total)


def fit_current_invocation(
    items: Sequence[ProjectedItem],
    *,
    over_by: int,
    hard_over_by: int,
    session_load: bool,
    tokenizer: Tokenizer,
    min_tokens: int = 256,
) -> tuple[list[ProjectedItem], CompactionStats]:
    """The last resort for a request still over its budget (no summary, one that failed,
    or a run whose own rounds outgrow the window). User messages are never touched.

    1. Until `over_by` tokens are saved: the running invocation's tool results, oldest
       first, never the latest round's (the model has not read it), become recoverable
       placeholders.
    2. Until `hard_over_by` is saved (the request would not fit the window at all): the
       largest remaining results are cut, head and tail kept, each only as far as needed
       and never below `min_tokens`.
    """
    out = list(items)
    count = saved_total = 0
    results = [
        i
        for i, item in enumerate(out)
        if item.active
        and item.message.role == "tool"
        and item.message.tool_call_id is not None
        and not is_compacted(item.message.content)
    ]
    latest_call = max((i for i, item in enumerate(out) if item.active and item.message.tool_calls), default=len(out))
    for index in results:
        if saved_total >= over_by:
            break
        if index > latest_call:
            continue
        item = out[index]
        replaced, saved = _replace(
            item, placeholder(item, session_load=session_load, reason=CURRENT_INVOCATION_REASON), "pass1", tokenizer
        )
        if saved > 0:
            out[index], count, saved_total = replaced, count + 1, saved_total + saved
    largest = sorted(
        (i for i in results if not is_compacted(out[i].message.content)),
        key=lambda i: -tokenizer.count_text(out[i].message.content),
    )
    for index in largest:
        if saved_total >= hard_over_by:
            break
        item = out[index]
        size = tokenizer.count_text(item.message.content)
        cut = _truncate(
            item, max(min_tokens, size - (hard_over_by - saved_total)), tokenizer, session_load=session_load
        )
        if cut is None:
            continue
        replaced, saved = _replace(item, cut[0], "pass2", tokenizer)
        if saved > 0:
            out[index] = dataclasses.replace(replaced, truncation=(cut[1], cut[2], len(item.message.content)))
            count, saved_total = count + 1, saved_total + saved
    return out, CompactionStats(fallback=count, tokens_saved=saved_total)
