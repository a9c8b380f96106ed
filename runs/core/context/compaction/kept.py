"""Compaction over a kept projection (issue 18): each item's passes run once per item object
and standing of its unit, remembered in the request memo."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from runs.core.context.compaction.config import CompactionConfig, CompactionStats
from runs.core.context.compaction.placeholders import (
    SESSION_LOAD_TOOL,
    _replace,
    _truncate,
    is_compacted,
    placeholder,
    policy_note,
)
from runs.core.context.memo import RequestMemo
from runs.core.context.projection import ProjectedItem, compaction_unit
from sessions_app.core.summary import Tokenizer


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
