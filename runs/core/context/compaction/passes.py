"""The passes over a request's history: protected units, Pass 0-2 with the batch frontier
(C4), the resume tail (SPEC 4.5) and the pre-call fallback fit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from runs.core.context.compaction.config import CompactionConfig, CompactionStats
from runs.core.context.compaction.kept import _compact_kept
from runs.core.context.compaction.placeholders import (
    CURRENT_INVOCATION_REASON,
    SESSION_LOAD_TOOL,
    _replace,
    _truncate,
    is_compacted,
    placeholder,
    policy_note,
    shorten_arguments,
)
from runs.core.context.memo import RequestMemo
from runs.core.context.projection import ProjectedItem, compaction_unit
from sessions_app.core.summary import Tokenizer


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
