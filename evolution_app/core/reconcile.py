"""The reconciler (SPEC 9.4): a reviewer's decision against the library, deterministically.

In order: new skills deduplicated within the batch; a new skill whose name equals an
existing one or extends it with a variant suffix (`-`, `:`, `(`, ` v2`, ...) becomes an
update of it; a count-specific name ("3-cities") becomes an update of its generic sibling;
a name sharing at least half of its significant words (Jaccard >= 0.5, >= 2 words) with an
existing skill becomes an update of that skill. Updates of a skill that does not exist
become creates. Deletions are never applied by evolution: they are reported for a person.

Conflicts are flagged, never resolved here: an update of a skill a person wrote (a folder
skill or one edited in the admin), or of a skill that already has a candidate waiting.
A flagged proposal always waits for the human gate.

User facts never enter a skill (`personal_facts`): a proposal whose text holds a
personal statement ("my name is ..."), an e-mail address or phone number, the user's
own names, or one of the user's memories is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from evolution_app.core.review import ReviewDecision
from evolution_app.core.spec import LibraryEntry, SkillSpec
from sessions_app.core.text import FUNCTION_WORDS, words

Action = Literal["create", "update"]
_VARIANT = re.compile(r"^(?:[-:(\[/|_.]| v\d+)")
_COUNT = re.compile(r"\b\d+\b")
# A skill name's words that say nothing of its topic: the shared function words, and the
# words every skill name may carry.
_STOP = FUNCTION_WORDS | frozenset("skill skills multi multiple using use via".split())
JACCARD_MIN = 0.5


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """What the library would become: a create, or an update of `base`."""

    action: Action
    spec: SkillSpec
    base: LibraryEntry | None = None
    conflict: str = ""
    reason: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, kw_only=True)
class Reconciled:
    proposals: tuple[Proposal, ...] = ()
    notes: tuple[str, ...] = ()  # what was dropped or refused, and why


@dataclass(frozen=True, kw_only=True)
class UserFacts:
    """What is known about the session's user: names and identifiers, and memories."""

    terms: tuple[str, ...] = ()
    memories: tuple[str, ...] = ()


_PERSONAL = re.compile(
    r"\b(?:my name is|my name's|call me|i live in|i'm based in|i work (?:at|for)|my (?:e-?mail|phone|address|"
    r"wife|husband|son|daughter|boss) (?:is|are)|the user'?s (?:name|e-?mail|phone|address|employer) is)\b",
    re.I,
)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_PHONE = re.compile(r"(?<![\w-])\+?\d[\d ()-]{8,}\d\b")
_MEMORY_VALUE = re.compile(r"^(?:name is|lives in|works (?:at|for)|is an? )\s*(.+)$", re.I)


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def personal_facts(text: str, facts: UserFacts) -> list[str]:
    """Why `text` holds facts about a person ([] when it holds none)."""
    found: list[str] = []
    if (m := _PERSONAL.search(text)) is not None:
        found.append(f"personal statement {m.group(0)!r}")
    if (m := _EMAIL.search(text)) is not None:
        found.append(f"e-mail address {m.group(0)!r}")
    if (m := _PHONE.search(text)) is not None:
        found.append(f"phone number {m.group(0)!r}")
    normal = _normal(text)
    terms = set(facts.terms)
    for memory in facts.memories:
        if len(memory) >= 12 and _normal(memory) in normal:
            found.append(f"the user's memory {memory!r}")
        value = _MEMORY_VALUE.match(memory.strip())
        if value is not None:
            terms.add(value.group(1).strip().rstrip("."))
    for term in sorted(terms):
        if len(term) >= 3 and re.search(rf"(?<!\w){re.escape(term.lower())}(?!\w)", normal):
            found.append(f"the user's identifier {term!r}")
    return found


def _words(name: str) -> set[str]:
    return {w for w in words(name) if len(w) >= 3 and w not in _STOP and not w.isdigit()}


def _superset_of(name: str, existing: str) -> bool:
    return name == existing or (name.startswith(existing) and bool(_VARIANT.match(name[len(existing) :])))


def _sibling(name: str, existing: str) -> bool:
    """A count-specific name ("trip-3-cities") and its generic sibling ("multi-city-trip")."""
    if not _COUNT.search(name.replace("-", " ")) or _COUNT.search(existing.replace("-", " ")):
        return False
    stem = {w.rstrip("s") for w in _words(name)}
    other = {w.rstrip("s").removesuffix("ie") for w in _words(existing)}
    stem = {w.removesuffix("ie") for w in stem}
    return bool(stem) and stem <= other


def _closest(name: str, library: Sequence[LibraryEntry]) -> tuple[LibraryEntry | None, str]:
    for entry in library:
        if _superset_of(name, entry.name):
            return entry, "same name" if name == entry.name else f"extends the name {entry.name!r}"
    for entry in library:
        if _sibling(name, entry.name):
            return entry, f"a count-specific sibling of {entry.name!r}"
    words = _words(name)
    if len(words) < 2:
        return None, ""
    best: tuple[float, LibraryEntry | None] = (0.0, None)
    for entry in library:
        if entry.name.startswith(name) or name.startswith(entry.name):
            continue  # prefix relations are the superset rule's business
        other = _words(entry.name)
        shared = words & other
        score = len(shared) / len(words | other) if other else 0.0
        if len(shared) >= 2 and score > best[0]:
            best = (score, entry)
    if best[1] is not None and best[0] >= JACCARD_MIN:
        return best[1], f"shares {best[0]:.0%} of its words with {best[1].name!r}"
    return None, ""


def reconcile(
    decision: ReviewDecision,
    library: Sequence[LibraryEntry],
    *,
    facts: UserFacts | None = None,
    waiting: Iterable[str] = (),
) -> Reconciled:
    """Proposals from a decision (see the module docstring). `waiting`: names of skills
    that already have a candidate waiting for a person."""
    facts = facts or UserFacts()
    waiting = set(waiting)
    by_name = {e.name: e for e in library}
    notes: list[str] = list(decision.dropped)
    notes += [f"deletion of {name!r} left to a person (evolution never deletes)" for name in decision.deletions]
    proposals: list[Proposal] = []
    seen_names: set[str] = set()
    seen_shapes: set[tuple[str, tuple[str, ...]]] = set()

    def add(proposal: Proposal) -> None:
        spec = proposal.spec
        if proposal.name in seen_names:
            notes.append(f"{proposal.name!r} proposed twice in one review; the first kept")
            return
        shape = (_normal(spec.when_to_use), tuple(_normal(s) for s in spec.steps))
        if proposal.action == "create" and shape in seen_shapes:
            notes.append(f"{proposal.name!r} repeats another new skill of this review; dropped")
            return
        refused = personal_facts(spec.text, facts)
        if refused:
            notes.append(f"{proposal.name!r} refused: user facts never enter a skill ({'; '.join(refused)})")
            return
        conflict = proposal.conflict
        if proposal.base is not None and proposal.base.origin != "evolution":
            conflict = conflict or f"updates {proposal.base.name!r}, written by a person ({proposal.base.origin})"
        if proposal.name in waiting:
            conflict = conflict or f"{proposal.name!r} already has a candidate waiting for review"
        seen_names.add(proposal.name)
        if proposal.action == "create":
            seen_shapes.add(shape)
        proposals.append(replace(proposal, conflict=conflict))

    for update in decision.updates:
        base = by_name.get(update.name)
        spec = replace(update.spec, name=update.name)
        if base is None:
            add(
                Proposal(action="create", spec=spec, reason=f"update of an unknown skill {update.name!r} made a create")
            )
        else:
            add(Proposal(action="update", spec=spec, base=base, reason=update.reason or "reviewer's update"))
    for spec in decision.skills:
        base, why = _closest(spec.name, library)
        if base is None:
            add(Proposal(action="create", spec=spec, reason="new skill"))
        else:
            add(
                Proposal(
                    action="update", spec=replace(spec, name=base.name), base=base, reason=f"near-duplicate: {why}"
                )
            )
    return Reconciled(proposals=tuple(proposals), notes=tuple(notes))
