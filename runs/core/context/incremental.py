"""The projection kept up to date as events arrive (issue 18, item 6; non-negotiable 7).

`project` derives a request's history from every loaded event after the summary, on every
model call. `IncrementalProjection` keeps what it derived for one (session, filter key,
agent) and the summary it was made under, and on the next call only adds the events
appended since: within a run (the loaded session grows by the step's events) and across
the runs of one process (the session cache hands out the same event objects).

Why appending is enough. New events have higher seqs than every kept one, so they lie
after the summary boundary and are shown; pairing (`pair_tool_calls`) and merging
(`merge_context`) read the items left to right, and the items up to the last point where
every call shown so far has its results (the *cut*) can never change again: a later
result binds to the most recent open call, and there is none before the cut. So the
items before the cut are kept paired and merged, and only those after it are paired
again (the last kept item is merged again, since a "For context:" message may absorb the
next one). A run's items carry `active`, which the kept state stores as False and sets
on the way out.

What the state cannot vouch for, it does not guess:

- the session, the summary (a summary advanced, another key's joined in), or the loaded
  events before the kept ones changed (a window loaded anew): *rebuilt* from the ledger;
- a new event reaches behind the boundary: a result for a call the summary hides (a
  restored call), a message of a turn whose user message the summary hides (a user
  anchor appears or goes), an event the summary covers: *rebuilt*;
- the running invocation has events behind the boundary (an intra-run summary: the
  resume tail and the run's user messages depend on it): *fallback*, the plain `project`;
- a new user message regenerates or edits an earlier one (issue 21): the earlier turn
  leaves the history, items already kept among them: *rebuilt* (once per redo; the
  events after it are added one by one again, since a redo can only hide turns before it).

`Projection.origin` says which happened, and the request stats carry it. The property
test (tests/runs/test_projection_incremental.py) checks the result equals `project`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from runs.core.context.memo import RequestMemo
from runs.core.context.projection import (
    ProjectedItem,
    Projection,
    as_context,
    compaction_unit,
    merge_context,
    open_with_user,
    pair_results,
    project,
    project_parts,
    visible_tokens,
)
from sessions_app.core.events import Event, Message, filter_matches
from sessions_app.core.redo import redo_target
from sessions_app.core.session import Session, Summary, select_summary
from sessions_app.core.summary import Tokenizer, model_message

DEFAULT_MAX_STATES = 256


def _same_summary(a: Summary | None, b: Summary | None) -> bool:
    return a is b or (a is not None and b is not None and a == b)


@dataclass(kw_only=True)
class _State:
    """What one projection keeps between calls (see the module docstring)."""

    summary: Summary | None
    seen: int
    """How many of the session's loaded events were read."""
    first: Event | None
    last: Event | None
    raw: list[ProjectedItem]
    """Every history item in ledger order, before pairing, with `active` False."""
    cut: int
    """`raw[:cut]` is paired and merged into `frozen` and never changes."""
    frozen: list[ProjectedItem]
    user_seen: bool
    by_invocation: dict[str, list[int]]
    """Invocation id -> positions in `frozen` of the items that show its events."""
    hidden: int
    last_at: dict[str, None]
    """Compaction units, oldest last event first (a unit moves to the end on each event)."""
    completed: set[str]
    visible: list[Event]
    open_calls: dict[str, list[bool]]
    """Call id -> for each still unanswered call with that id, whether the summary hides it
    (a result bound to a hidden call would restore it: the state cannot vouch for that)."""
    covered_turns: set[str]
    """Invocations with events the summary hides."""
    hidden_user_turns: set[str]
    shown_user_turns: set[str]
    shown_other_turns: set[str]
    superseded: frozenset[str] = frozenset()
    visible_sums: dict[int, tuple[Tokenizer, int, int]] = field(default_factory=dict)
    """id(tokenizer) -> (tokenizer, events of `visible` counted, their tokens)."""
    frozen_units: tuple[str, ...] | None = None
    frozen_completed: frozenset[str] | None = None
    frozen_visible: tuple[Event, ...] | None = None
    memo: RequestMemo = field(default_factory=RequestMemo)
    """Per-item work of the requests built on this state (a rebuilt state starts afresh)."""


@dataclass
class ProjectionCounters:
    """How the projections of one `IncrementalProjection` were made (for benches and tests)."""

    incremental: int = 0
    rebuilt: int = 0
    fallback: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class IncrementalProjection:
    """Projections kept per (session, filter key, agent), bounded (least recently used
    dropped first). `project` answers exactly what `projection.project` would."""

    def __init__(self, *, max_states: int = DEFAULT_MAX_STATES) -> None:
        self._states: OrderedDict[tuple[str, str, str, str, str | None], _State] = OrderedDict()
        self._max_states = max_states
        self.counters = ProjectionCounters()
        # One process-wide instance serves the event loop and any thread a sync caller
        # builds a request on (an inspector view); a state is extended by one at a time.
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every kept state."""
        with self._lock:
            self._states.clear()

    def project(
        self,
        session: Session,
        *,
        filter_key: str,
        active_invocation_id: str | None = None,
        agent_name: str | None = None,
    ) -> Projection:
        """The projection of `session` for `filter_key` (see `projection.project`), from
        the kept state plus the events appended since whenever the state can vouch for it."""
        with self._lock:
            return self._project(
                session, filter_key=filter_key, active_invocation_id=active_invocation_id, agent_name=agent_name
            )

    def _project(
        self, session: Session, *, filter_key: str, active_invocation_id: str | None, agent_name: str | None
    ) -> Projection:
        key = (session.app, session.user_id, session.id, filter_key, agent_name)
        state = self._states.get(key)
        reason = _stale(state, session, filter_key)
        if state is not None and reason is None:
            reason = self._extend(state, session, filter_key, agent_name)
        if reason is not None:
            state = _build(session, filter_key=filter_key, agent_name=agent_name)
            self._count("rebuilt", reason)
        assert state is not None
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self._max_states:
            self._states.popitem(last=False)
        if active_invocation_id is not None and active_invocation_id in state.covered_turns:
            # Intra-run summary: the run's hidden rounds decide its resume tail and which of
            # its user messages come back; `project` knows how.
            self._count("fallback", "intra_run")
            built = project(
                session, filter_key=filter_key, active_invocation_id=active_invocation_id, agent_name=agent_name
            )
            return dataclasses.replace(built, origin="fallback:intra_run")
        if reason is None:
            self._count("incremental", None)
        origin = "incremental" if reason is None else f"rebuilt:{reason}"
        return _projection(state, filter_key=filter_key, active_invocation_id=active_invocation_id, origin=origin)

    def _count(self, kind: str, reason: str | None) -> None:
        counters = self.counters
        setattr(counters, kind, getattr(counters, kind) + 1)
        if reason is not None:
            label = f"{kind}:{reason}"
            counters.reasons[label] = counters.reasons.get(label, 0) + 1

    def _extend(self, state: _State, session: Session, filter_key: str, agent_name: str | None) -> str | None:
        """Add the events loaded since; the reason to rebuild instead, if any."""
        events = session.events
        summary = state.summary
        for position in range(state.seen, len(events)):
            event = events[position]
            if not filter_matches(event.filter_key, filter_key):
                continue
            message = model_message(event)
            unit = compaction_unit(event)
            if message is not None and redo_target(event, message) is not None:
                return "superseded"
            if message is not None and summary is not None and summary.covers(event):
                return "covered_event"
            if message is not None:
                reason = _reaches_back(state, event, message)
                if reason is not None:
                    return reason
            if unit:
                state.last_at.pop(unit, None)
                state.last_at[unit] = None
                state.frozen_units = None
                if event.done and unit not in state.completed:
                    state.completed.add(unit)
                    state.frozen_completed = None
            if message is None:
                continue
            state.visible.append(event)
            state.frozen_visible = None
            item = ProjectedItem(message=message, kind="event", event=event)
            if agent_name is not None and event.author not in ("user", agent_name) and message.role != "user":
                item = as_context(item, orphan=False)  # another agent's message, as `project` shows it
            state.raw.append(item)
        state.seen = len(events)
        state.last = events[-1] if events else None
        _advance_cut(state)
        return None


def _reaches_back(state: _State, event: Event, message: Message) -> str | None:
    """Track calls and turns for a new shown event; a reason when it changes what the
    summary hides (a restored call, a user anchor that appears or goes)."""
    if message.role == "tool" and message.tool_call_id is not None:
        waiting = state.open_calls.get(message.tool_call_id)
        if waiting and waiting.pop():
            return "restored_call"
    else:
        for call in message.tool_calls:
            state.open_calls.setdefault(call.id, []).append(False)
    turn = event.invocation_id
    if turn and turn in state.hidden_user_turns and turn not in state.shown_user_turns:
        if message.role == "user" and turn in state.shown_other_turns:
            return "anchor_gone"
        if message.role != "user" and turn not in state.shown_other_turns:
            return "anchor_added"
    if message.role == "user":
        if turn is not None:
            state.shown_user_turns.add(turn)
    elif turn:
        state.shown_other_turns.add(turn)
    return None


def _stale(state: _State | None, session: Session, filter_key: str) -> str | None:
    """Why `state` cannot be extended to `session`, or None."""
    if state is None:
        return "new"
    if not _same_summary(state.summary, select_summary(session.summaries, filter_key)):
        return "summary"
    events = session.events
    if len(events) < state.seen or (events[0] if events else None) is not state.first:
        return "window"
    if state.seen and events[state.seen - 1] is not state.last:
        return "window"
    return None


def _build(session: Session, *, filter_key: str, agent_name: str | None) -> _State:
    """A state made from the ledger: `project_parts` without an active invocation (the
    state's items are stored inactive), plus the bookkeeping `_extend` needs."""
    parts = project_parts(session, filter_key=filter_key, agent_name=agent_name)
    open_calls: dict[str, list[bool]] = {}
    hidden_user: set[str] = set()
    shown_user: set[str] = set()
    shown_other: set[str] = set()
    covered_turns: set[str] = set()
    for (event, message), covered in zip(parts.eligible, parts.covered, strict=True):
        turn = event.invocation_id
        if message.role == "tool" and message.tool_call_id is not None:
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                waiting.pop()
        else:
            for call in message.tool_calls:
                open_calls.setdefault(call.id, []).append(covered)
        if covered:
            if turn:
                covered_turns.add(turn)
            if message.role == "user" and turn:
                hidden_user.add(turn)
        elif message.role == "user":
            if turn is not None:
                shown_user.add(turn)
        elif turn:
            shown_other.add(turn)
    events = session.events
    state = _State(
        summary=parts.summary,
        seen=len(events),
        first=events[0] if events else None,
        last=events[-1] if events else None,
        raw=parts.items,
        cut=0,
        frozen=[],
        user_seen=False,
        by_invocation={},
        hidden=parts.hidden,
        last_at=dict.fromkeys(sorted(parts.last_at, key=parts.last_at.__getitem__)),
        completed=parts.completed,
        visible=[e for (e, _), b in zip(parts.eligible, parts.beyond, strict=True) if b],
        open_calls=open_calls,
        covered_turns=covered_turns,
        hidden_user_turns=hidden_user,
        shown_user_turns=shown_user,
        shown_other_turns=shown_other,
        superseded=parts.superseded,
    )
    _advance_cut(state)
    return state


def _advance_cut(state: _State) -> None:
    """Move the cut to the last point after which no item can change any more: every
    call shown before it has all its results before it (results bind to the most recent
    open call with their id, so none after the cut can reach back)."""
    raw = state.raw
    open_ids: dict[str, int] = {}
    closed_at = state.cut
    for index in range(state.cut, len(raw)):
        message = raw[index].message
        if message.role == "tool" and message.tool_call_id is not None:
            left = open_ids.get(message.tool_call_id)
            if left:
                if left == 1:
                    del open_ids[message.tool_call_id]
                else:
                    open_ids[message.tool_call_id] = left - 1
        else:
            for call in message.tool_calls:
                open_ids[call.id] = open_ids.get(call.id, 0) + 1
        if not open_ids:
            closed_at = index + 1
    if closed_at == state.cut:
        return
    pending = pair_results(raw[state.cut : closed_at])
    paired = open_with_user(pending, user_seen=state.user_seen)
    state.user_seen = state.user_seen or any(i.message.role == "user" for i in pending)
    frozen = state.frozen
    had = len(frozen)
    start = had - 1 if had else 0
    # The last kept item is merged again: a "For context:" message absorbs the next one.
    merged = merge_context([*frozen[start:], *paired])
    del frozen[start:]
    frozen.extend(merged)
    for position in range(had, len(frozen)):  # the re-merged item keeps its first event
        event = frozen[position].event
        if event is not None and event.invocation_id:
            state.by_invocation.setdefault(event.invocation_id, []).append(position)
    state.cut = closed_at


def _activate(items: Sequence[ProjectedItem], active_invocation_id: str | None) -> list[ProjectedItem]:
    if active_invocation_id is None:
        return list(items)
    return [
        dataclasses.replace(i, active=True)
        if i.event is not None and i.event.invocation_id == active_invocation_id
        else i
        for i in items
    ]


def _projection(state: _State, *, filter_key: str, active_invocation_id: str | None, origin: str) -> Projection:
    frozen = state.frozen
    head = frozen[:-1] if frozen else []
    tail = merge_context(
        [*frozen[-1:], *open_with_user(pair_results(state.raw[state.cut :]), user_seen=state.user_seen)]
    )
    items = [*head, *_activate(tail, active_invocation_id)]
    if active_invocation_id is not None:
        # The run's kept items are copied with `active` set once, so that the next call
        # hands out the same copies and the memo's per-item work holds for them too.
        activated = state.memo.activated
        state.memo.trim(activated)
        for position in state.by_invocation.get(active_invocation_id, ()):
            if position < len(head):
                kept = items[position]
                hit = activated.get(id(kept))
                if hit is None or hit[0] is not kept:
                    hit = activated[id(kept)] = (kept, dataclasses.replace(kept, active=True))
                items[position] = hit[1]
    if state.frozen_units is None:
        state.frozen_units = tuple(state.last_at)
    if state.frozen_completed is None:
        state.frozen_completed = frozenset(state.completed)
    if state.frozen_visible is None:
        state.frozen_visible = tuple(state.visible)
    return Projection(
        filter_key=filter_key,
        summary=state.summary,
        items=tuple(items),
        hidden_events=state.hidden,
        unit_order=state.frozen_units,
        completed_units=state.frozen_completed,
        visible_after_boundary=state.frozen_visible,
        superseded=state.superseded,
        intra_run=False,
        origin=origin,
        visible_counter=functools.partial(_count_visible, state, len(state.visible)),
        memo=state.memo,
    )


def _count_visible(state: _State, shown: int, tokenizer: Tokenizer) -> int:
    """Tokens of `state.visible[:shown]`, adding to the running count only what is new."""
    hit = state.visible_sums.get(id(tokenizer))
    counted, total = (hit[1], hit[2]) if hit is not None and hit[0] is tokenizer else (0, 0)
    if counted > shown:  # the state moved on since that projection was made
        return visible_tokens(state.visible[:shown], tokenizer)
    total += visible_tokens(state.visible[counted:shown], tokenizer)
    state.visible_sums[id(tokenizer)] = (tokenizer, shown, total)
    return total


PROJECTIONS = IncrementalProjection()
"""The process's kept projections (the request builder's default)."""
