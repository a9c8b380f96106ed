"""Projection manifest (issue 12, C3): how one model request carries every ledger event.

For each event of the session's ledger, seq 1 to the newest, a request does exactly one
of these (a `Disposition`):

- `verbatim`: its message is in the request as recorded (a user anchor, a call message
  split around orphan calls and a "For context:" rewrite of an orphan keep the payload
  whole, so they count here too);
- `truncated`: a tool result whose head and tail are shown, with the characters kept
  (`head`, `tail` of `total`) and a marker naming the event and tool call;
- `placeholder`: a tool result replaced by a recoverable placeholder naming its event id
  and tool call id;
- `withheld`: a tool result the Pass 0 policy keeps out on purpose (SPEC 4.6: no ids, no
  hints; e.g. a secret-reading tool); recorded, never silent;
- `summarized`: at or before the summary boundary: the summary (`version`, `last_seq`)
  stands for it;
- `gap`: after the boundary but not loaded for this request (older than the history
  window); allowed only when the request says so in a notice naming the seq range;
- `silent`: an event with nothing to show a model (a completion marker, a state change);
- `foreign`: an event of another filter key (branch), which this request never shows;
- `superseded`: after the boundary, in a turn a later user message regenerated or edited
  (issue 21): the newer turn replaces it, on purpose (the ledger keeps it).

Anything else is a silent drop: `check_manifest` raises `ManifestError`. The manifest is
stored per model call in compact form (`Manifest.to_dict`: ranges of seqs per
disposition, plus the offsets of truncated results), so the context inspector can show,
for any past call, what the model saw of every event and how to get the rest back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runs.core.context.memo import RequestMemo
from runs.core.context.projection import ProjectedItem, Projection
from sessions_app.core.events import Event, filter_matches
from sessions_app.core.session import Summary
from sessions_app.core.summary import model_message

Disposition = Literal[
    "verbatim",
    "truncated",
    "placeholder",
    "withheld",
    "summarized",
    "gap",
    "silent",
    "foreign",
    "superseded",
]
DISPOSITIONS: tuple[Disposition, ...] = (
    "verbatim",
    "truncated",
    "placeholder",
    "withheld",
    "summarized",
    "gap",
    "silent",
    "foreign",
    "superseded",
)
HIDDEN: frozenset[str] = frozenset({"truncated", "placeholder", "withheld", "summarized", "gap"})
"""Dispositions whose content the request does not carry in full."""

_BY_PASS: dict[str, Disposition] = {
    "pass0": "withheld",
    "pass1": "placeholder",
    "pass2": "truncated",
    "args": "truncated",
}


class ManifestError(AssertionError):
    """A projection that would silently drop or mislabel ledger events; the message names them."""


@dataclass(frozen=True, kw_only=True)
class ManifestEntry:
    """One ledger event's disposition in one request."""

    seq: int
    event_id: str
    disposition: Disposition | Literal["dropped"]
    truncation: tuple[int, int, int] | None = None


@dataclass(frozen=True, kw_only=True)
class Gap:
    """Seqs after the boundary that were not loaded, and the notice the request carries."""

    first_seq: int
    last_seq: int


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """Every ledger event's disposition in one request, oldest first (see the module).

    Seqs 1..`summarized_through` (not loaded, at or before the boundary: the summary
    stands for them) are kept as that one number, so that building and checking a
    manifest costs the loaded events, not the whole ledger (issue 18); `entries` spells
    them out for readers that want every seq.
    """

    last_seq: int
    loaded: tuple[ManifestEntry, ...]
    """The entries of seqs after `summarized_through`, oldest first."""
    summarized_through: int = 0
    summary_version: int | None = None
    summary_last_seq: int = 0
    gaps: tuple[Gap, ...] = ()
    texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Event id -> the text that stands for a hidden tool result in the request (checked
    for its pointer back); not stored."""

    @property
    def entries(self) -> tuple[ManifestEntry, ...]:
        """One entry per seq 1..`last_seq`."""
        prefix = tuple(
            ManifestEntry(seq=seq, event_id="", disposition="summarized")
            for seq in range(1, self.summarized_through + 1)
        )
        return prefix + self.loaded

    def counts(self) -> dict[str, int]:
        counted: Counter[str] = Counter(e.disposition for e in self.loaded)
        counted["summarized"] += self.summarized_through
        return {d: counted[d] for d in (*DISPOSITIONS, "dropped") if counted[d]}

    @property
    def coverage(self) -> float:
        """Share of the ledger's seqs (1..last_seq) with a disposition other than dropped."""
        if self.last_seq == 0:
            return 1.0
        seqs = {e.seq for e in self.loaded if e.disposition != "dropped" and 0 < e.seq <= self.last_seq}
        return (len(seqs) + min(self.summarized_through, self.last_seq)) / self.last_seq

    @property
    def dropped(self) -> list[int]:
        return [e.seq for e in self.loaded if e.disposition == "dropped"]

    def of(self, seq: int) -> ManifestEntry | None:
        if 0 < seq <= self.summarized_through:
            return ManifestEntry(seq=seq, event_id="", disposition="summarized")
        return next((e for e in self.loaded if e.seq == seq), None)

    def ranges(self) -> list[list[Any]]:
        """`[disposition, first_seq, last_seq]` runs, oldest first."""
        out: list[list[Any]] = [["summarized", 1, self.summarized_through]] if self.summarized_through else []
        for entry in self.loaded:
            if out and out[-1][0] == entry.disposition and out[-1][2] == entry.seq - 1:
                out[-1][2] = entry.seq
            else:
                out.append([entry.disposition, entry.seq, entry.seq])
        return out

    def to_dict(self) -> dict[str, Any]:
        """The compact, JSON-safe form kept with each model call (`coverage`, `counts` and
        `ranges` in one pass over the entries: every model call records it)."""
        counted: Counter[str] = Counter()
        seqs: set[int] = set()
        ranges: list[list[Any]] = [["summarized", 1, self.summarized_through]] if self.summarized_through else []
        truncated: list[list[int]] = []
        last_seq = self.last_seq
        for entry in self.loaded:
            disposition, seq = entry.disposition, entry.seq
            counted[disposition] += 1
            if disposition != "dropped" and 0 < seq <= last_seq:
                seqs.add(seq)
            if ranges and ranges[-1][0] == disposition and ranges[-1][2] == seq - 1:
                ranges[-1][2] = seq
            else:
                ranges.append([disposition, seq, seq])
            if entry.truncation is not None:
                truncated.append([seq, *entry.truncation])
        counted["summarized"] += self.summarized_through
        coverage = 1.0 if last_seq == 0 else (len(seqs) + min(self.summarized_through, last_seq)) / last_seq
        return {
            "last_seq": self.last_seq,
            "coverage": round(coverage, 6),
            "counts": {d: counted[d] for d in (*DISPOSITIONS, "dropped") if counted[d]},
            "ranges": ranges,
            "truncated": truncated,
            "summary": None
            if self.summary_version is None
            else {
                "version": self.summary_version,
                "last_seq": self.summary_last_seq,
            },
            "gaps": [[g.first_seq, g.last_seq] for g in self.gaps],
        }


def missing_after_boundary(events: Sequence[Event], *, last_seq: int, boundary_seq: int) -> tuple[Gap, ...]:
    """Seq ranges after the boundary (up to `last_seq`) that `events` does not hold."""
    loaded = {e.seq for e in events if e.seq is not None}
    gaps: list[Gap] = []
    start: int | None = None
    for seq in range(boundary_seq + 1, last_seq + 2):
        absent = seq <= last_seq and seq not in loaded
        if absent and start is None:
            start = seq
        elif not absent and start is not None:
            gaps.append(Gap(first_seq=start, last_seq=seq - 1))
            start = None
    return tuple(gaps)


def gap_notice(gaps: Iterable[Gap]) -> str | None:
    """The request's note for events it does not carry because they were not loaded."""
    spans = ", ".join(f"{g.first_seq}-{g.last_seq}" if g.first_seq != g.last_seq else str(g.first_seq) for g in gaps)
    if not spans:
        return None
    return (
        f"[Events seq {spans} of this conversation are not in this request: they are older than the "
        "history loaded for it and no summary covers them yet. session_load with seq=<n> reads one of "
        "them; session_search with scope current_session finds them by content.]"
    )


def build_manifest(
    events: Sequence[Event],
    *,
    filter_key: str,
    last_seq: int,
    projection: Projection,
    items: Sequence[ProjectedItem],
    gaps: Sequence[Gap] = (),
    memo: RequestMemo | None = None,
) -> Manifest:
    """Classify every ledger seq 1..`last_seq` for the request made of `items` (after
    compaction) over the loaded `events`.

    With `memo` (the kept projection's, issue 18) what each item shows, and each event's
    entry given the item that shows it, are worked out once and looked up after.
    """
    summary = projection.summary
    boundary = summary.last_seq if summary is not None else 0
    # An event's first compacted item decides; else any item that shows it whole.
    compacted: dict[str, ProjectedItem] = {}
    whole: set[str] = set()
    marks = memo.marks if memo is not None else None
    if marks is not None:
        assert memo is not None
        memo.trim(marks)
    for item in items:
        hit = marks.get(id(item)) if marks is not None else None
        if hit is not None and hit[0] is item:
            shortened_ids, whole_ids = hit[1], hit[2]
        else:
            shortened_ids, whole_ids = _marks(item)
            if marks is not None:
                marks[id(item)] = (item, shortened_ids, whole_ids)
        for event_id in shortened_ids:
            compacted.setdefault(event_id, item)
        if whole_ids:
            whole.update(whole_ids)
    entries: dict[int, ManifestEntry] = {}
    texts: dict[str, str] = {}
    kept = memo.entries if memo is not None else None
    if kept is not None:
        assert memo is not None
        memo.trim(kept)
    for event in events:
        seq = event.seq
        if seq is None or seq > last_seq:
            continue
        shortened = compacted.get(event.id)
        shown = event.id in whole
        hit = kept.get(id(event)) if kept is not None else None
        if (
            hit is not None
            and hit[0] is event
            and hit[1] == filter_key
            and hit[2] is shortened
            and hit[3] == shown
            and hit[4] is summary
            and hit[5] is projection.superseded
        ):
            entries[seq] = hit[6]
            if hit[7] is not None:
                texts[event.id] = hit[7]
            continue
        entry, text = _classify(event, filter_key, shortened, shown, summary, projection.superseded)
        entries[seq] = entry
        if text is not None:
            texts[event.id] = text
        if kept is not None:
            kept[id(event)] = (event, filter_key, shortened, shown, summary, projection.superseded, entry, text)
    # Seqs before the first loaded one that the boundary covers: one number, not an entry
    # each (a long session's manifest would otherwise cost its whole ledger on every call).
    through = min(boundary, min(entries, default=last_seq + 1) - 1) if summary is not None else 0
    gap_seqs = {s for g in gaps for s in range(max(g.first_seq, through + 1), g.last_seq + 1)}
    if len(entries) < last_seq - through:
        for seq in range(through + 1, last_seq + 1):
            if seq in entries:
                continue
            if summary is not None and seq <= boundary:
                disposition: Disposition | Literal["dropped"] = "summarized"  # not loaded: the summary stands for it
            elif seq in gap_seqs:
                disposition = "gap"
            else:
                disposition = "dropped"
            entries[seq] = ManifestEntry(seq=seq, event_id="", disposition=disposition)
    ordered = tuple(entries[s] for s in sorted(entries) if s > through)
    return Manifest(
        last_seq=last_seq,
        loaded=ordered,
        summarized_through=through,
        summary_version=summary.version if summary is not None else None,
        # A legacy summary without a boundary covers by time (SPEC 2.4): its reach is what it hid.
        summary_last_seq=max([boundary, *(e.seq for e in ordered if e.disposition == "summarized")]),
        gaps=tuple(gaps),
        texts=texts,
    )


def _marks(item: ProjectedItem) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids of the events `item` shows compacted, and of those it shows whole."""
    if item.compaction in _BY_PASS:
        return tuple(e.id for e in item.events), ()
    if item.kind in ("event", "anchor", "context"):
        return (), tuple(e.id for e in item.events)
    return (), ()


def _classify(
    event: Event,
    filter_key: str,
    shortened: ProjectedItem | None,
    shown: bool,
    summary: Summary | None,
    superseded: frozenset[str],
) -> tuple[ManifestEntry, str | None]:
    """One loaded event's entry, and the text standing for it when compacted."""
    seq = event.seq or 0
    known = _known(event, filter_key)
    disposition: Disposition | Literal["dropped"]
    if known.fixed is not None:
        disposition = known.fixed
    elif shortened is not None:
        # A call whose arguments were shortened names its event in the arguments.
        text = shortened.message.content + "".join(c.arguments for c in shortened.message.tool_calls)
        entry = ManifestEntry(
            seq=seq,
            event_id=event.id,
            disposition=_BY_PASS[shortened.compaction or ""],
            truncation=shortened.truncation,
        )
        return entry, text
    elif shown:
        disposition = "verbatim"
    # Hidden, or only its still-needed calls restored: the summary must stand for it
    # (a summary made before a redo may tell of the replaced turn: it still does).
    elif summary is not None and summary.covers(event):
        disposition = "summarized"
    elif event.id in superseded:
        disposition = "superseded"
    else:
        disposition = "dropped"
    cached = known.entries.get(disposition)
    if cached is None:
        cached = known.entries[disposition] = ManifestEntry(seq=seq, event_id=event.id, disposition=disposition)
    return cached, None


@dataclass(frozen=True)
class _Known:
    """What a manifest learned about one event object for one filter key: its disposition
    when no request can change it (`foreign`, `silent`), and its entries so far."""

    event: Event
    filter_key: str
    fixed: Disposition | None
    entries: dict[str, ManifestEntry]


# Every model call classifies the whole loaded window again, mostly the same event
# objects with the same outcome (issue 18): what does not depend on the request is kept by
# object, like the memoized token counts, so a call costs a lookup per event.
_KNOWN: dict[int, _Known] = {}
_KNOWN_MAX = 16_384


def _known(event: Event, filter_key: str) -> _Known:
    hit = _KNOWN.get(id(event))
    if hit is not None and hit.event is event and hit.filter_key == filter_key:
        return hit
    fixed: Disposition | None = None
    if not filter_matches(event.filter_key, filter_key):
        fixed = "foreign"
    elif model_message(event) is None:
        fixed = "silent"
    if len(_KNOWN) >= _KNOWN_MAX:
        _KNOWN.clear()
    hit = _KNOWN[id(event)] = _Known(event=event, filter_key=filter_key, fixed=fixed, entries={})
    return hit


def check_manifest(manifest: Manifest, *, gap_notice_text: str | None = None) -> None:
    """Refuse a request that loses an event silently (issue 12, C3).

    Raises `ManifestError` when a seq has no disposition, a placeholder or truncated
    result does not name its event (no way back in one call), a summarized event lies
    after the boundary, or a gap is not announced in the request.
    """
    problems: list[str] = []
    if manifest.dropped:
        problems.append(f"events with seq {manifest.dropped!r} are neither shown, compacted nor summarized")
    for entry in manifest.loaded:  # the summarized prefix is at or before the boundary by construction
        if entry.disposition in ("placeholder", "truncated"):
            text = manifest.texts.get(entry.event_id, "")
            if entry.event_id not in text:
                problems.append(
                    f"the {entry.disposition} of event seq {entry.seq} does not name event_id {entry.event_id!r}"
                )
        elif entry.disposition == "summarized" and entry.seq > manifest.summary_last_seq:
            problems.append(
                f"event seq {entry.seq} is marked summarized after the boundary {manifest.summary_last_seq}"
            )
        elif entry.disposition == "gap" and (gap_notice_text is None or not _announced(entry.seq, manifest.gaps)):
            problems.append(f"event seq {entry.seq} was not loaded and the request does not say so")
    if problems:
        raise ManifestError("; ".join(problems))


def _announced(seq: int, gaps: Sequence[Gap]) -> bool:
    return any(g.first_seq <= seq <= g.last_seq for g in gaps)
