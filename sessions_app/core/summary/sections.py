"""Summaries: provenance-anchored sections (issue 12, C1), the `[events F-L]` ranges of a summary."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from sessions_app.core.session import (
    Summary,
)


@dataclass(frozen=True, kw_only=True)
class SummarySection:
    """One piece of a summary: its text and the ledger seqs it was built from (C1)."""

    first_seq: int
    last_seq: int
    text: str

    @property
    def header(self) -> str:
        return section_header(self.first_seq, self.last_seq)


# -- provenance-anchored sections (issue 12, C1) -----------------------------------------------
#
# A stored summary is a run of sections, each opened by a header line `[events F-L]`: the
# ledger seqs F..L (inclusive) it stands for. The ranges of one summary are contiguous,
# oldest first, and cover every seq from 1 to the boundary, so any hidden event lies in
# exactly one section and `session_load(section="F-L")` is the way back to its raw text.
# The header lives in the text itself: nothing new is stored, and a model can quote it.

_HEADER = re.compile(r"^\[events (\d+)-(\d+)\]$")
_HEADER_LIKE = re.compile(r"^\s*\[events \d+\s*[-\u2013]\s*\d+\]\s*$")


def section_header(first_seq: int, last_seq: int) -> str:
    """The header line of the section covering seqs `first_seq`..`last_seq`."""
    return f"[events {first_seq}-{last_seq}]"


def strip_section_headers(text: str) -> str:
    """`text` without header-like lines (a model that copied the previous summary's
    headers into its prose must not make new, unchecked ranges)."""
    return "\n".join(line for line in text.splitlines() if not _HEADER_LIKE.match(line)).strip()


def render_sections(sections: Iterable[SummarySection]) -> str:
    """The summary text of `sections`: a header line, then the section's text, blank line
    between sections. A text line that looks like a header is indented one space, so that
    the parser never takes it for one."""
    blocks = []
    for section in sections:
        body = "\n".join(f" {line}" if _HEADER_LIKE.match(line) else line for line in section.text.strip().splitlines())
        blocks.append(f"{section.header}\n{body}")
    return "\n\n".join(blocks)


def parse_sections(text: str) -> tuple[SummarySection, ...]:
    """The sections of a stored summary text, oldest first; () when it has no header (a
    summary written before C1). Text before the first header joins the first section."""
    sections: list[SummarySection] = []
    preamble: list[str] = []
    current: tuple[int, int] | None = None
    lines: list[str] = []
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match is None:
            (lines if current is not None else preamble).append(line)
            continue
        if current is not None:
            sections.append(SummarySection(first_seq=current[0], last_seq=current[1], text="\n".join(lines).strip()))
        current, lines = (int(match.group(1)), int(match.group(2))), []
    if current is None:
        return ()
    sections.append(SummarySection(first_seq=current[0], last_seq=current[1], text="\n".join(lines).strip()))
    if any(line.strip() for line in preamble):
        first = sections[0]
        sections[0] = dataclasses.replace(first, text="\n".join([*preamble, first.text]).strip())
    return tuple(sections)


def summary_sections(summary: Summary | None) -> tuple[SummarySection, ...]:
    """The sections of a stored summary; a summary without headers is one section from
    seq 1 to its boundary (so its range is never lost when the next one rolls it in)."""
    if summary is None or not summary.text.strip():
        return ()
    parsed = parse_sections(summary.text)
    if parsed:
        return parsed
    return (SummarySection(first_seq=1, last_seq=max(1, summary.last_seq), text=summary.text.strip()),)


def anchor_sections(sections: Sequence[SummarySection], *, last_seq: int) -> tuple[SummarySection, ...]:
    """`sections` made into a partition of seqs 1..`last_seq`: oldest first, each starting
    right after the one before (the first at 1), the last ending at `last_seq`.

    A gap (events with nothing to summarize: completion markers, other branches) joins the
    section after it; a section left with no seq of its own, or with no text, joins the
    one before it, so its range is kept as part of a union and never dropped."""
    out: list[SummarySection] = []
    for section in sorted(sections, key=lambda s: (s.first_seq, s.last_seq)):
        text = section.text.strip()
        end = min(section.last_seq, last_seq)
        if not out:
            if text:
                out.append(SummarySection(first_seq=1, last_seq=max(1, end), text=text))
            continue
        start = out[-1].last_seq + 1
        if end < start or not text:
            merged = "\n".join(t for t in (out[-1].text, text) if t)
            out[-1] = SummarySection(first_seq=out[-1].first_seq, last_seq=max(out[-1].last_seq, end), text=merged)
            continue
        out.append(SummarySection(first_seq=start, last_seq=end, text=text))
    if out and out[-1].last_seq < last_seq:
        out[-1] = dataclasses.replace(out[-1], last_seq=last_seq)
    return tuple(out)


def section_cost(section: SummarySection, count_text: Callable[[str], int]) -> int:
    """Tokens a section adds to the summary text: its header, its text, the line breaks.
    Digits and brackets tokenise poorly, so the header counts at least half its characters
    (an estimate by characters / 4 would undercount it under tiktoken)."""
    header = max(count_text(section.header), len(section.header) // 2)
    return header + count_text(section.text) + 2


SectionMerge = Callable[[Sequence[SummarySection], int | None], Awaitable[str]]
"""Writes one text for a group of sections (oldest first), within a token limit when given."""


async def fit_sections(
    sections: Sequence[SummarySection],
    *,
    budget: int,
    count_text: Callable[[str], int],
    merge: SectionMerge,
    group_room: int | None = None,
) -> list[SummarySection]:
    """`sections` within `budget` tokens by merging the oldest ones: the oldest group (at
    least two, at most `group_room` tokens when given) becomes one section whose range is
    the union of theirs and whose text is `merge(group, None)`. The newest detail stays
    finest. A single section still over the budget is merged alone once, with the limit
    the budget leaves it."""
    level = list(sections)

    def total() -> int:
        return sum(section_cost(s, count_text) for s in level)

    while len(level) > 1 and total() > budget:
        excess = total() - budget
        size = 2
        group_cost = section_cost(level[0], count_text) + section_cost(level[1], count_text)
        # Take more of the oldest while merging only two would not bring the summary under
        # budget (a merged section costs about what one section does), and the group fits.
        while size < len(level):
            more = group_cost + section_cost(level[size], count_text)
            if group_cost - group_cost // size >= excess or (group_room is not None and more > group_room):
                break
            group_cost, size = more, size + 1
        group = level[:size]
        text = strip_section_headers(await merge(group, None)) or "\n".join(s.text for s in group)
        merged = SummarySection(first_seq=group[0].first_seq, last_seq=group[-1].last_seq, text=text)
        level = [merged, *level[size:]]
    if len(level) == 1 and total() > budget:
        limit = max(1, budget - (section_cost(dataclasses.replace(level[0], text=""), count_text)))
        text = strip_section_headers(await merge(level, limit))
        if text:
            level = [dataclasses.replace(level[0], text=text)]
    return level
