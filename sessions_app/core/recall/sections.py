"""Session recall: which summary sections to follow for a question (issue 24, item 4).

A summary section names the range of events it condenses (`[events F-L]`). Following a
section's pointer with a scoped `session_search` finds that range's evidence; which
sections to follow decides what is reached. The section's text alone is a weak guide: an
extractive or model summary keeps a few sentences of the range, and the one with the best
words is often not where the answer sits. `rank_sections` therefore fuses two orders of the
sections, each as 1 / (RRF_K + rank), the constant the hybrid ranking already uses (nothing
is fitted here):

- the summary order: the share of the question's content terms the section text holds
  (`answer_confidence`, the score abstention uses);
- the probe order: where one search over the whole hidden part put its hits, a section
  scoring the best fused rank of a hit inside its range (the same index, one call).

When none of the probe's hits lies in a chosen section the sections hold no lexical
evidence for the question, and `SectionChoice.weak` tells the caller to search the whole
hidden part instead of the sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessions_app.core.recall.defaults import DEFAULT_TOP_K, HISTORY_NOTE, NO_MATCH_NOTE, RRF_K
from sessions_app.core.recall.index import RecallIndex
from sessions_app.core.recall.scoring import answer_confidence
from sessions_app.core.recall.search import session_search
from sessions_app.core.session import Session, select_summary
from sessions_app.core.summary import summary_sections

DEFAULT_SECTIONS = 3


@dataclass(frozen=True, kw_only=True)
class SectionRef:
    """A summary section as a pointer: its event range and its text."""

    first_seq: int
    last_seq: int
    text: str = ""

    def holds(self, seq: int) -> bool:
        """Whether the event with this seq lies in the section's range."""
        return self.first_seq <= seq <= self.last_seq

    @property
    def range(self) -> str:
        """The range as `session_search(section=...)` takes it."""
        return f"{self.first_seq}-{self.last_seq}"


@dataclass(frozen=True, kw_only=True)
class SectionChoice:
    """The sections to follow, best first, and whether their evidence is weak (no probe
    hit inside any of them: search the whole hidden part instead)."""

    sections: tuple[SectionRef, ...]
    weak: bool


def rank_sections(
    query: str, sections: Sequence[SectionRef], probe_seqs: Sequence[int], *, top: int = DEFAULT_SECTIONS
) -> SectionChoice:
    """The `top` sections to follow for `query`, by the fused summary and probe orders.

    `probe_seqs` are the seqs of one search's hits over the hidden part, best first.
    Ties go to the newer section (a later range), as a reader of a summary would. Sections
    with an empty range are never chosen.
    """
    usable = [i for i, s in enumerate(sections) if s.first_seq <= s.last_seq]
    if not usable or top <= 0:
        return SectionChoice(sections=(), weak=True)
    match = {i: answer_confidence(query, sections[i].text) for i in usable}
    by_summary = sorted(usable, key=lambda i: (-match[i], -i))
    first_hit: dict[int, int] = {}
    for rank, seq in enumerate(probe_seqs):
        for i in usable:
            if i not in first_hit and sections[i].holds(seq):
                first_hit[i] = rank
    fused: dict[int, float] = {}
    for rank, i in enumerate(by_summary):
        probe = 1.0 / (RRF_K + first_hit[i]) if i in first_hit else 0.0
        summary = 1.0 / (RRF_K + rank) if match[i] > 0 else 0.0
        fused[i] = summary + probe
    chosen = sorted(usable, key=lambda i: (-fused[i], -i))[:top]
    return SectionChoice(sections=tuple(sections[i] for i in chosen), weak=not any(i in first_hit for i in chosen))


PROBE_K = 10
"""Hits of the probe search (the most one search returns)."""


async def search_sections(
    index: RecallIndex, *, session: Session, query: str, top_k: int = 2 * DEFAULT_TOP_K, filter_key: str = ""
) -> dict[str, Any]:
    """Follow the summary's section pointers for `query`: the sections `rank_sections`
    picks (summary text and a probe search), searched one by one with
    `session_search(section=...)` and their hits merged by confidence, then score; the
    best `top_k` are the answer, which names the `sections` followed. When the summary has
    no sections or their evidence is weak, the answer is a plain `current_hidden` search
    with `sections: []`: the pointer must not hide what search finds."""
    chosen = select_summary(await index.summaries(session.key), filter_key)
    refs = [SectionRef(first_seq=s.first_seq, last_seq=s.last_seq, text=s.text) for s in summary_sections(chosen)]
    probe = await session_search(
        index, session=session, query=query, top_k=PROBE_K, min_confidence=0, filter_key=filter_key
    )
    choice = rank_sections(query, refs, [r["seq"] for r in probe["results"] if r.get("seq") is not None])
    if choice.weak:
        plain = await session_search(index, session=session, query=query, top_k=top_k, filter_key=filter_key)
        return {**plain, "sections": []}
    found = [
        (await session_search(index, session=session, query=query, top_k=top_k, section=s.range, filter_key=filter_key))
        for s in choice.sections
    ]
    hits = sorted(
        (r for answer in found for r in answer["results"]), key=lambda r: (r["confidence"], r["score"]), reverse=True
    )
    results = hits[:top_k]
    answer: dict[str, Any] = {
        "query": probe["query"],
        "scope": "section",
        "sections": [s.range for s in choice.sections],
        "results": results,
        "count": len(results),
    }
    if not results:
        answer.update(no_match=True, note=NO_MATCH_NOTE)
    else:
        answer["note"] = HISTORY_NOTE
    return answer
