"""History projection (SPEC 4.3-4.5): which ledger events a model call shows, and how.

The projection of a session for a filter key is its summary block plus the events after
the summary's boundary, with these repairs:

- the active turn (the running invocation's events) is shown after the boundary; a
  summary made during the run (intra-run) hides the run's earlier rounds, but the run's
  user messages are always shown verbatim and the latest complete tool round before the
  boundary comes back as the *resume tail* (SPEC 4.5), so the model sees where it was;
- events of other agents (another author than the user and the agent the request is
  for) become "For context:" user messages, adjacent ones merged into one (SPEC 4.5);
- a turn whose user message the boundary hid, but whose later messages are shown, gets
  that user message back in front of them (user anchor);
- a tool call hidden by the boundary whose results are shown comes back as a minimal call
  message carrying only those call ids, so calls and results stay paired;
- results are moved to follow their call; a call without its results, or a result
  without its call (a run cancelled in between, a window cut), turns into a plain
  "For context:" user message that keeps its payload;
- a superseded turn is not shown (issue 21, `runs.turns`, `sessions_app.core.redo`): when a later user message
  regenerates or edits message X (`regenerates: X`, `edit_of: X` in its extensions), X
  and every event after it up to the next user message are left out, the way the chat
  shows only the newest version of a turn. An edit of an older message hides that
  message's turn only, not the turns after it. The ledger keeps them (append-only), the
  manifest calls them `superseded`.

The projection reads `session.events` and `session.summaries` and writes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from runs.core.context.memo import RequestMemo
from sessions_app.core.events import Event, Message, filter_matches
from sessions_app.core.redo import superseded_positions
from sessions_app.core.session import Session, Summary, select_summary
from sessions_app.core.summary import Tokenizer, model_message

ItemKind = Literal["event", "anchor", "restored_call", "context"]
SummaryInjection = Literal["system", "user"]

_SUMMARY_OPEN = "<summary_of_previous_interactions>"
_SUMMARY_CLOSE = "</summary_of_previous_interactions>"


def format_summary(text: str, mode: SummaryInjection) -> str:
    """The summary block (SPEC 4.4): as system context, or as user-side background."""
    if mode == "user":
        lead = (
            "Background from earlier in this conversation. Treat it as context only; where it "
            "disagrees with the conversation below, the conversation is right:"
        )
    else:
        lead = (
            "A short summary of the earlier part of this conversation follows. It may be out of "
            "date: when it disagrees with the messages after it, those messages are right."
        )
    return f"{lead}\n{_SUMMARY_OPEN}\n{text}\n{_SUMMARY_CLOSE}"


def compaction_unit(event: Event) -> str:
    """SPEC 4.6: the request an event belongs to (`req:<id>`, else `inv:<id>`, else "")."""
    if event.request_id:
        return f"req:{event.request_id}"
    if event.invocation_id:
        return f"inv:{event.invocation_id}"
    return ""


@dataclass(frozen=True, kw_only=True)
class ProjectedItem:
    """One history message of a request and where it comes from.

    `event` is the ledger event it shows (also for anchors, restored calls and context
    messages); `compaction` names the pass that replaced its content, if any, and
    `original_tokens` what it weighed before.
    """

    message: Message
    kind: ItemKind
    event: Event | None
    active: bool = False
    compaction: str | None = None
    original_tokens: int | None = None
    truncation: tuple[int, int, int] | None = None
    """Pass 2 only: (head characters, tail characters, original characters) kept of the
    result, so the projection manifest can say exactly which bytes the model saw."""
    resume_tail: bool = False
    """Shown although the intra-run summary covers it: the latest complete tool round
    before the boundary (SPEC 4.5 resume tail)."""
    merged: tuple[Event, ...] = ()
    """Further events this (context) message carries: adjacent "For context:" messages are
    merged into the first one's item."""

    @property
    def events(self) -> tuple[Event, ...]:
        """Every ledger event this message shows."""
        return ((self.event,) if self.event is not None else ()) + self.merged


@dataclass(frozen=True, kw_only=True)
class Projection:
    """The history part of a request: summary and items, plus what compaction needs."""

    filter_key: str
    summary: Summary | None
    items: tuple[ProjectedItem, ...]
    hidden_events: int
    unit_order: tuple[str, ...]
    completed_units: frozenset[str]
    visible_after_boundary: tuple[Event, ...]
    """The events after the boundary a model would see raw (for the raw-ledger token count)."""
    superseded: frozenset[str] = frozenset()
    """Ids of the loaded events left out because a later turn regenerates or edits theirs."""
    intra_run: bool = False
    """The summary covers events of the running invocation (an intra-run summary)."""
    origin: str = dataclasses.field(default="full", compare=False)
    """How it was made (issue 18): `full` (from the ledger), `incremental` (kept state plus
    the new events), `rebuilt:<reason>` (state made again from the ledger) or
    `fallback:<reason>` (a case the kept state cannot vouch for; made from the ledger)."""
    visible_counter: Callable[[Tokenizer], int] | None = dataclasses.field(default=None, compare=False, repr=False)
    """The incremental projection's running count of `visible_tokens` (counted once per event)."""
    memo: RequestMemo | None = dataclasses.field(default=None, compare=False, repr=False)
    """The incremental projection's per-item work for the requests built on it (`memo`)."""

    @property
    def boundary_seq(self) -> int:
        return self.summary.last_seq if self.summary is not None else 0

    def visible_tokens(self, tokenizer: Tokenizer) -> int:
        """Tokens of the messages of `visible_after_boundary` (the raw ledger after the boundary)."""
        if self.visible_counter is not None:
            return self.visible_counter(tokenizer)
        return visible_tokens(self.visible_after_boundary, tokenizer)

    def summary_block(self, mode: SummaryInjection) -> str | None:
        return format_summary(self.summary.text, mode) if self.summary is not None else None


def visible_tokens(events: Iterable[Event], tokenizer: Tokenizer) -> int:
    """Tokens of the model messages of `events`."""
    return sum(tokenizer.count_message(m) for e in events if (m := model_message(e)) is not None)


def _context_text(event: Event, message: Message, *, orphan: bool) -> list[str]:
    author = event.author or "unknown"
    if message.role == "tool":
        return [
            f"For context: [{author}] tool `{message.tool_name or 'tool'}` (call {message.tool_call_id}) returned: {message.content}"
        ]
    lines = [f"For context: [{author}] said: {message.content}"] if message.content else []
    note = "; no result of it is recorded." if orphan else "."
    lines.extend(
        f"For context: [{author}] called tool `{call.name}` with arguments {call.arguments}{note}"
        for call in message.tool_calls
    )
    return lines


def as_context(item: ProjectedItem, message: Message | None = None, *, orphan: bool = True) -> ProjectedItem:
    """`item` as a "For context:" user message (SPEC 4.5): another agent's message, or an
    orphan call or result (`orphan` says no result of the calls is recorded)."""
    assert item.event is not None
    text = "\n".join(_context_text(item.event, message or item.message, orphan=orphan))
    return dataclasses.replace(item, kind="context", message=Message(role="user", content=text))


def _bind_results(messages: Sequence[Message]) -> dict[int, int]:
    """Result index -> index of the call message it answers: the most recent earlier call
    with its id still unanswered. Ids are only unique within a request, not a ledger (a
    provider may reuse `call_1`), so results are bound by position, not by id alone."""
    open_calls: dict[str, list[int]] = {}
    owner: dict[int, int] = {}
    for index, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id is not None:
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                owner[index] = waiting.pop()
            continue
        for call in message.tool_calls:
            open_calls.setdefault(call.id, []).append(index)
    return owner


def pair_tool_calls(items: Sequence[ProjectedItem]) -> list[ProjectedItem]:
    """Keep each tool call directly followed by its results; orphans become context.

    Results are moved up to their call (SPEC 4.3 step 6). A call message keeps the calls
    whose results exist; the others become a context message after it. A result with no
    call before it becomes a context message where it stands. Messages before the first
    user message become context too, so that a history always opens with the user.
    """
    return open_with_user(pair_results(items), user_seen=False)


def open_with_user(items: Sequence[ProjectedItem], *, user_seen: bool) -> list[ProjectedItem]:
    """Messages before the first user-role one become context, so that a history opens
    with the user; with `user_seen`, `items` continue a history that already has one
    (the incremental projection pairs its new items on their own)."""
    first_user = (
        0 if user_seen else next((i for i, item in enumerate(items) if item.message.role == "user"), len(items))
    )
    return [
        as_context(item, orphan=False) if i < first_user and item.kind != "context" else item
        for i, item in enumerate(items)
    ]


def pair_results(items: Sequence[ProjectedItem]) -> list[ProjectedItem]:
    """`pair_tool_calls` without opening with the user message."""
    owner = _bind_results([item.message for item in items])
    results_of: dict[int, dict[str, int]] = {}
    for result, call in owner.items():
        results_of.setdefault(call, {}).setdefault(items[result].message.tool_call_id or "", result)
    out: list[ProjectedItem] = []
    for index, item in enumerate(items):
        message = item.message
        if message.role == "tool" and message.tool_call_id is not None:
            if index not in owner:
                out.append(as_context(item))
            continue  # emitted right after its call
        if not message.tool_calls:
            out.append(item)
            continue
        answered = results_of.get(index, {})
        kept = tuple(call for call in message.tool_calls if call.id in answered)
        orphans = tuple(call for call in message.tool_calls if call.id not in answered)
        if not kept:
            out.append(as_context(item))
            continue
        out.append(
            item if not orphans else dataclasses.replace(item, message=dataclasses.replace(message, tool_calls=kept))
        )
        out.extend(items[answered[call.id]] for call in kept)
        if orphans:
            out.append(as_context(item, Message(role="assistant", tool_calls=orphans)))
    return out


def merge_context(items: Sequence[ProjectedItem]) -> list[ProjectedItem]:
    """SPEC 4.3 step 6: adjacent "For context:" messages become one user message (the
    first item's, carrying the others' events so the manifest still accounts for them)."""
    out: list[ProjectedItem] = []
    for item in items:
        previous = out[-1] if out else None
        if item.kind == "context" and previous is not None and previous.kind == "context":
            out[-1] = dataclasses.replace(
                previous,
                message=dataclasses.replace(
                    previous.message, content=f"{previous.message.content}\n{item.message.content}"
                ),
                merged=previous.merged + item.events,
            )
        else:
            out.append(item)
    return out


def _resume_tail(
    eligible: Sequence[tuple[Event, Message]], active: Sequence[bool], beyond: Sequence[bool], owner: dict[int, int]
) -> set[int]:
    """SPEC 4.5 resume tail: when the summary covers events of the running invocation, the
    latest tool round of it (a call and all its results) that lies wholly before the
    boundary, as positions in `eligible`; empty when there is none."""
    if not any(a and not b and m.role != "user" for (_, m), a, b in zip(eligible, active, beyond, strict=True)):
        return set()
    results_of: dict[int, list[int]] = {}
    for result, call in owner.items():
        results_of.setdefault(call, []).append(result)
    for index in range(len(eligible) - 1, -1, -1):
        message = eligible[index][1]
        if not (active[index] and not beyond[index] and message.tool_calls):
            continue
        results = [r for r in results_of.get(index, []) if active[r] and not beyond[r]]
        if {eligible[r][1].tool_call_id for r in results} >= {c.id for c in message.tool_calls}:
            return {index, *results}
    return set()


@dataclass(kw_only=True)
class ProjectionParts:
    """What `project` derives from the ledger before pairing and merging: the eligible
    events (those of the filter key with a model message, less the superseded ones), which
    the summary covers, the bindings of results to calls, and the history items in ledger
    order. The incremental
    projection (`runs.core.context.incremental`) starts from these and extends them."""

    summary: Summary | None
    eligible: list[tuple[Event, Message]]
    beyond: list[bool]
    covered: list[bool]
    owner: dict[int, int]
    items: list[ProjectedItem]
    hidden: int
    last_at: dict[str, int]
    completed: set[str]
    intra_run: bool
    superseded: frozenset[str] = frozenset()


def project(
    session: Session,
    *,
    filter_key: str,
    active_invocation_id: str | None = None,
    agent_name: str | None = None,
) -> Projection:
    """The history a model call for `filter_key` sees (see the module docstring).

    With `agent_name`, events of any other author but the user are shown as context.
    """
    parts = project_parts(
        session, filter_key=filter_key, active_invocation_id=active_invocation_id, agent_name=agent_name
    )
    return Projection(
        filter_key=filter_key,
        summary=parts.summary,
        items=tuple(merge_context(pair_tool_calls(parts.items))),
        hidden_events=parts.hidden,
        unit_order=tuple(sorted(parts.last_at, key=parts.last_at.__getitem__)),
        completed_units=frozenset(parts.completed),
        visible_after_boundary=tuple(e for (e, _), b in zip(parts.eligible, parts.beyond, strict=True) if b),
        superseded=parts.superseded,
        intra_run=parts.intra_run,
    )


def project_parts(
    session: Session,
    *,
    filter_key: str,
    active_invocation_id: str | None = None,
    agent_name: str | None = None,
) -> ProjectionParts:
    """The projection's intermediate results (see `ProjectionParts`)."""
    summary = select_summary(session.summaries, filter_key)
    eligible: list[tuple[Event, Message]] = []
    last_at: dict[str, int] = {}  # compaction unit -> position of its newest event
    completed: set[str] = set()
    for position, event in enumerate(session.events):
        if not filter_matches(event.filter_key, filter_key):
            continue
        unit = compaction_unit(event)
        if unit:
            last_at[unit] = position
            if event.done:
                completed.add(unit)
        message = model_message(event)
        if message is not None:
            eligible.append((event, message))
    # Issue 21: a regenerated or edited turn leaves the history before anything else is
    # derived, so it neither anchors, restores calls nor counts as visible.
    dropped = superseded_positions(eligible)
    superseded = frozenset(eligible[i][0].id for i in dropped)
    if dropped:
        eligible = [pair for i, pair in enumerate(eligible) if i not in dropped]
    active = [active_invocation_id is not None and e.invocation_id == active_invocation_id for e, _ in eligible]
    beyond = [summary is None or not summary.covers(e) for e, _ in eligible]
    owner = _bind_results([m for _, m in eligible])
    tail = _resume_tail(eligible, active, beyond, owner)
    # SPEC 4.5 rule 3: the running invocation's user messages are shown even behind the boundary.
    covered = [
        not (b or (a and m.role == "user") or i in tail)
        for i, ((_, m), b, a) in enumerate(zip(eligible, beyond, active, strict=True))
    ]

    # Hidden calls whose results are shown come back with just those call ids.
    needed_calls: dict[int, set[str]] = {}
    for result, call in owner.items():
        if not covered[result] and covered[call]:
            needed_calls.setdefault(call, set()).add(eligible[result][1].tool_call_id or "")
    # Turns with shown messages but no shown user message of their own need an anchor.
    anchored_turns = {
        e.invocation_id
        for (e, m), c in zip(eligible, covered, strict=True)
        if not c and e.invocation_id and m.role != "user"
    }
    anchored_turns -= {
        e.invocation_id for (e, m), c in zip(eligible, covered, strict=True) if not c and m.role == "user"
    }
    last_hidden_user = {
        e.invocation_id: e.id
        for (e, m), c in zip(eligible, covered, strict=True)
        if c and m.role == "user" and e.invocation_id in anchored_turns
    }

    def foreign(event: Event) -> bool:
        return agent_name is not None and event.author not in ("user", agent_name)

    items: list[ProjectedItem] = []
    hidden = 0
    for index, (event, message) in enumerate(eligible):
        if not covered[index]:
            item = ProjectedItem(
                message=message, kind="event", event=event, active=active[index], resume_tail=index in tail
            )
        elif message.role == "user" and last_hidden_user.get(event.invocation_id) == event.id:
            item = ProjectedItem(message=message, kind="anchor", event=event)
        elif index in needed_calls:
            needed = tuple(c for c in message.tool_calls if c.id in needed_calls[index])
            item = ProjectedItem(
                message=Message(role="assistant", tool_calls=needed), kind="restored_call", event=event
            )
        else:
            hidden += 1
            continue
        items.append(as_context(item, orphan=False) if foreign(event) and message.role != "user" else item)
    return ProjectionParts(
        summary=summary,
        eligible=eligible,
        beyond=beyond,
        covered=covered,
        owner=owner,
        items=items,
        hidden=hidden,
        last_at=last_at,
        completed=completed,
        intra_run=any(a and not b for a, b in zip(active, beyond, strict=True)),
        superseded=superseded,
    )
