"""Memory update policies of auto memory (SPEC 6.3): a prompt block for the extractor and
the worker's post-processing of the operations it returns.

- `merge_similar` (default): operations pass as they are; every add goes through the
  similarity tiers (`Reconcile` "similar"), which may drop it or turn it into an update.
- `preserve_history`: an update stands only when the new text is the same memory with
  extra, non-conflicting detail: the old text's material words (at least 95 % of them),
  every number, every negation, the event day, participants and location must survive.
  Otherwise the update becomes an add, so a correction or a change of state is a new
  memory beside the old one. Deletes and clears pass (the prompt allows them only on the
  user's explicit request). Adds drop only exact duplicates.
- `append_only`: updates become adds, deletes and clears are dropped; adds drop only exact
  duplicates of stored memories or of earlier adds of the same batch.

Exact-duplicate dropping happens where the memories are, inside `MemoryManager.apply`
(`Reconcile` "exact"), so duplicates of memories the prompt did not show are caught too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from sessions_app.core.memory import MAX_TOPICS, MemoryDraft, MemoryEntry, MemoryOperation, Reconcile, analyze

UpdatePolicy = Literal["merge_similar", "preserve_history", "append_only"]
UPDATE_POLICIES: tuple[UpdatePolicy, ...] = ("merge_similar", "preserve_history", "append_only")

# Share of the old memory's material words an update must keep to count as "the same fact
# with more detail". A conservative heuristic, not fitted on a benchmark.
PRESERVED_TOKEN_SHARE = 0.95

POLICY_PROMPTS: dict[UpdatePolicy, str] = {
    "merge_similar": (
        "Update policy (merge similar): prefer updating a memory about the same thing to adding a second one."
    ),
    "preserve_history": (
        "Update policy (preserve history): update a memory only to add detail that does not contradict it "
        "(the same fact, more precisely). A correction or a change (a new employer, another date, a new "
        "value) is a new memory: add it and keep the old one. Delete only when the user explicitly asks "
        "to forget something; clear only when the user asks to forget everything. Never add an exact "
        "duplicate."
    ),
    "append_only": (
        "Update policy (append only): only add memories; never update or delete one. Never add an exact "
        "duplicate of an existing memory."
    ),
}

RECONCILE: dict[UpdatePolicy, Reconcile] = {
    "merge_similar": "similar",
    "preserve_history": "exact",
    "append_only": "exact",
}

_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|cannot)\b|n't\b", re.I)


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def _negated(text: str) -> bool:
    return _NEGATION.search(text) is not None


def preserves(old: MemoryEntry, new: MemoryDraft) -> bool:
    """Whether `new` keeps everything material of `old` (and so may replace it)."""
    if new.kind != old.kind:
        return False
    if old.event_time is not None and (new.event_time is None or new.event_time.date() != old.event_time.date()):
        return False
    if old.location and new.location.casefold() != old.location.casefold():
        return False
    new_participants = {p.casefold() for p in new.participants}
    if any(p.casefold() not in new_participants for p in old.participants):
        return False
    if not _numbers(old.text) <= _numbers(new.text) or _negated(old.text) != _negated(new.text):
        return False
    old_tokens = set(analyze(old.text))
    if not old_tokens:
        return True
    kept = len(old_tokens & set(analyze(new.text))) / len(old_tokens)
    return kept >= PRESERVED_TOKEN_SHARE


def apply_update_policy(
    policy: UpdatePolicy, operations: Sequence[MemoryOperation], *, current: Mapping[str, MemoryEntry]
) -> list[MemoryOperation]:
    """The operations the worker executes under `policy` (see the module docstring).

    `current` holds the stored memories that updates name, by id; an update of a memory not
    in it is left to `apply`, which turns it into an add.
    """
    if policy == "merge_similar":
        return list(operations)
    result: list[MemoryOperation] = []
    for operation in operations:
        if operation.op in ("delete", "clear"):
            if policy == "preserve_history":
                result.append(operation)
            continue
        if operation.op == "add" or operation.draft is None:
            result.append(operation)
            continue
        old = current.get(operation.memory_id)
        if policy == "append_only" or old is None or not preserves(old, operation.draft):
            result.append(MemoryOperation(op="add", draft=operation.draft))
            continue
        topics = tuple(dict.fromkeys((*old.topics, *operation.draft.topics)))[:MAX_TOPICS]
        result.append(replace(operation, draft=replace(operation.draft, topics=topics)))
    return result
