"""Request building: the processors that turn an invocation into a model request.

Order (SPEC 4.1, the subset this release needs): instruction (the *pre-content snapshot*
that pre-call compaction rebuilds from) -> content: the pinned block of the user's
standing instructions (issue 12, C2; it changes only when they do, so it sits before the
summary), the summary block, a notice for events not loaded, and the projected history
(`projection`: events after the boundary, active turn, anchors, paired tool calls) ->
tool-result compaction (`compaction`). `BuiltRequest` keeps what each part contributed,
in tokens, for the per-call stats and the context inspector, and the projection manifest
(`manifest`, C3): how the request carries every ledger event.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runs.core.attachments import describe_part, with_attached_note
from runs.core.context.compaction import (
    CompactionStats,
    compact_resume_tail,
    compact_tool_results,
    fit_current_invocation,
)
from runs.core.context.governance import TIKTOKEN, ContextGovernance, hard_limit, tools_tokens
from runs.core.context.incremental import PROJECTIONS, IncrementalProjection
from runs.core.context.manifest import (
    Manifest,
    build_manifest,
    check_manifest,
    gap_notice,
    missing_after_boundary,
)
from runs.core.context.pinned import PinnedBlock, PinnedState, fold_pins, pinned_block
from runs.core.context.projection import ProjectedItem, Projection, SummaryInjection, project
from runs.core.context.seeding import SEED_EXTENSION
from runs.core.invocation import Invocation
from runs.core.llm.base import ModelRequest, ToolSpec
from sessions_app.core.events import ContentPart, Message
from sessions_app.core.session import Session
from sessions_app.core.summary import ForkParent, Tokenizer

NEXT_UNIT = "req:(next)"
"""The compaction unit of a request not made yet (the inspector's "next call")."""
_PREVIEW_CHARS = 280


def sanitize(messages: Sequence[Message]) -> list[Message]:
    """Make a plain message list the OpenAI protocol accepts: start at the first user
    message and keep a tool-call message only with all its results right after it."""
    start = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    out: list[Message] = []
    i = start
    while i < len(messages):
        message = messages[i]
        if message.role == "tool":
            i += 1  # a result whose call was not kept
            continue
        if message.tool_calls:
            wanted = {call.id for call in message.tool_calls}
            j = i + 1
            results: list[Message] = []
            while j < len(messages) and messages[j].role == "tool":
                if messages[j].tool_call_id in wanted:
                    results.append(messages[j])
                j += 1
            if {r.tool_call_id for r in results} == wanted:
                out.append(message)
                out.extend(results)
            elif message.content:
                out.append(Message(role="assistant", content=message.content))
            i = j
            continue
        out.append(message)
        i += 1
    return out


@dataclass(frozen=True, kw_only=True)
class BuiltRequest:
    """A model request and how it was made: the pre-content prefix, the projection, the
    history items after compaction and the compaction stats."""

    request: ModelRequest
    prefix: tuple[Message, ...]
    projection: Projection
    items: tuple[ProjectedItem, ...]
    summary_message: Message | None
    summary_injection: SummaryInjection
    compaction: CompactionStats
    window: int
    tokenizer: Tokenizer = TIKTOKEN
    manifest: Manifest | None = None
    pinned: PinnedBlock | None = None
    pinned_message: Message | None = None
    gap_message: Message | None = None

    @functools.cached_property
    def sent_tokens(self) -> int:
        """Tokens of the messages sent (tool schemas apart: see `tools_tokens`)."""
        return self.tokenizer.count_messages(self.request.messages)

    @functools.cached_property
    def tools_tokens(self) -> int:
        return tools_tokens(self.request.tools, self.tokenizer)

    @functools.cached_property
    def raw_tokens(self) -> int:
        """What the messages would weigh without governance: the prefix, the raw ledger a
        summary stands for, and every event after it uncompacted."""
        summary = self.projection.summary
        if (
            summary is None
            and self.summary_message is None
            and self.pinned_message is None
            and all(i.kind == "event" and i.compaction is None for i in self.items)
        ):
            return self.sent_tokens  # nothing governed: the request is the raw ledger
        raw = self.tokenizer.count_messages(self.prefix) + (summary.covered_tokens if summary is not None else 0)
        return raw + self.projection.visible_tokens(self.tokenizer)

    @property
    def covered_last_seq(self) -> int:
        return max((e.seq or 0 for i in self.items for e in i.events), default=0)

    def fork_parent(self) -> ForkParent:
        """This request as the parent of a cache-safe summary fork (SPEC 3.6)."""
        summary = self.projection.summary
        return ForkParent(
            messages=self.request.messages,
            tools=self.request.tools,
            tools_tokens=self.tools_tokens,
            summary_last_seq=summary.last_seq if summary is not None else 0,
            covered_last_seq=self.covered_last_seq,
        )

    def stats(self) -> dict[str, Any]:
        """Per-call context stats (JSON-safe), kept in the answer event's `extensions["context"]`."""
        summary = self.projection.summary
        history = tail = seeded = 0
        for item in self.items:  # one pass: every model call records these
            history += item.kind == "event"
            tail += item.resume_tail
            if item.event is not None and item.event.extensions.get(SEED_EXTENSION):
                seeded += 1
            seeded += sum(1 for e in item.merged if e.extensions.get(SEED_EXTENSION))
        return {
            "window": self.window,
            "sent_tokens": self.sent_tokens,
            "raw_tokens": self.raw_tokens,
            "tools_tokens": self.tools_tokens,
            "messages": len(self.request.messages),
            "history_events": history,
            "hidden_events": self.projection.hidden_events,
            "intra_run_summary": self.projection.intra_run,
            "resume_tail": tail,
            "seeded_events": seeded,
            "projection": self.projection.origin,
            "summary": None
            if summary is None
            else {
                "version": summary.version,
                "last_seq": summary.last_seq,
                "tokens": self.tokenizer.count_text(self.projection.summary_block(self.summary_injection) or ""),
                "covered_events": summary.covered_events,
            },
            "compaction": self.compaction.to_dict(),
            "manifest": self.manifest.to_dict() if self.manifest is not None else None,
            "pinned": None
            if self.pinned is None
            else {
                "tokens": self.pinned.tokens,
                "shown": len(self.pinned.shown),
                "omitted": len(self.pinned.omitted),
            },
        }

    def blocks(self) -> list[dict[str, Any]]:
        """The request as inspector blocks (JSON-safe): instruction, summary, history."""
        count = self.tokenizer.count_message
        blocks: list[dict[str, Any]] = [
            {"kind": "instruction", "role": m.role, "tokens": count(m), "preview": _preview(m.content)}
            for m in self.prefix
        ]
        if self.pinned is not None and self.pinned_message is not None:
            blocks.append(
                {
                    "kind": "pinned",
                    "role": "system",
                    "tokens": count(self.pinned_message),
                    "preview": _preview(self.pinned.text),
                    "pins": [r.to_dict() for r in self.pinned.shown],
                    "omitted": [r.to_dict() for r in self.pinned.omitted],
                }
            )
        summary = self.projection.summary
        if summary is not None:
            text = self.projection.summary_block(self.summary_injection) or ""
            blocks.append(
                {
                    "kind": "summary",
                    "role": self.summary_injection,
                    "tokens": self.tokenizer.count_text(text) + (3 if self.summary_message is not None else 0),
                    "version": summary.version,
                    "last_seq": summary.last_seq,
                    "covered_events": summary.covered_events,
                    "covered_tokens": summary.covered_tokens,
                    "intra_run": self.projection.intra_run,
                    "preview": _preview(summary.text),
                }
            )
        if self.gap_message is not None:
            blocks.append(
                {
                    "kind": "gap",
                    "role": "system",
                    "tokens": count(self.gap_message),
                    "preview": _preview(self.gap_message.content),
                }
            )
        for item in self.items:
            message, event = item.message, item.event
            kind = {"pass0": "placeholder", "pass1": "placeholder", "pass2": "truncated"}.get(
                item.compaction or "", item.kind
            )
            block = {
                "kind": kind,
                "role": message.role,
                "tokens": count(message),
                "seq": event.seq if event is not None else None,
                "event_id": event.id if event is not None else None,
                "author": event.author if event is not None else None,
                "active": item.active,
                "preview": _preview(message.content),
            }
            if message.attachments:
                block["attachments"] = [_attachment_block(p) for p in message.attachments]
            if message.tool_calls:
                block["tool_calls"] = [{"id": c.id, "name": c.name} for c in message.tool_calls]
            if message.tool_call_id:
                block["tool_call_id"] = message.tool_call_id
                block["tool_name"] = message.tool_name
            if item.compaction is not None:
                block["compaction"] = item.compaction
                block["original_tokens"] = item.original_tokens
            if item.resume_tail:
                block["resume_tail"] = True
            if any(e.extensions.get(SEED_EXTENSION) for e in item.events):
                block["seeded"] = True
            if item.merged:
                block["merged_events"] = len(item.events)
            blocks.append(block)
        return blocks


def _attachment_block(part: ContentPart) -> dict[str, Any]:
    """An image or file as the inspector shows it: name, type, size, the artifact (the
    page links it for download) or the URL, and the fixed token estimate."""
    return {
        "type": part.type,
        "name": part.name,
        "mime": part.mime,
        "size": part.size,
        "tokens": part.token_estimate,
        "artifact": part.artifact.to_dict() if part.artifact is not None else None,
        "url": part.url,
        "label": describe_part(part),
    }


def _preview(text: str) -> str:
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"


def build_context(
    session: Session,
    *,
    filter_key: str,
    instruction: str,
    tools: Sequence[ToolSpec],
    governance: ContextGovernance | None,
    window: int,
    active_invocation_id: str | None = None,
    current_unit: str = NEXT_UNIT,
    agent_name: str | None = None,
    fit_to: int | None = None,
    projections: IncrementalProjection | None = PROJECTIONS,
) -> BuiltRequest:
    """Instruction, summary block and projected history, with tool results compacted.

    Without `governance`, the history is shown uncompacted (a stored summary still
    replaces what it covers: the events before it may not even be loaded). With `fit_to`
    (governed requests only), a request still over that many tokens has the running
    invocation's older tool results replaced by placeholders and, past
    `hard_limit(window)`, its results cut (`fit_current_invocation`). The history comes
    from `projections` (kept up to date between calls, issue 18), or with None from the
    whole loaded ledger.
    """
    tokenizer = governance.tokenizer if governance is not None else TIKTOKEN
    mode: SummaryInjection = governance.summary_injection if governance is not None else "system"
    prefix = (Message(role="system", content=instruction),) if instruction else ()
    projection = (projections.project if projections is not None else project)(
        session, filter_key=filter_key, active_invocation_id=active_invocation_id, agent_name=agent_name
    )
    # SPEC 4.3 step 6: a user message with images or files names them in a text part.
    items = [
        dataclasses.replace(item, message=with_attached_note(item.message))
        if item.message.parts and item.message.attachments
        else item
        for item in projection.items
    ]
    stats = CompactionStats()
    if governance is not None:
        items, tail_stats = compact_resume_tail(
            items,
            config=governance.compaction,
            session_load=any(t.name == "session_load" for t in tools),
            tokenizer=tokenizer,
        )
        items, stats = compact_tool_results(
            items,
            config=governance.compaction,
            current_unit=current_unit,
            unit_order=projection.unit_order,
            completed_units=projection.completed_units,
            session_load=any(t.name == "session_load" for t in tools),
            tokenizer=tokenizer,
            memo=projection.memo,
        )
        stats = stats.plus(tail_stats)
    block = projection.summary_block(mode)
    summary_message: Message | None = None
    if block is not None and mode == "user":
        # SPEC 4.3 step 7: user-mode blocks open the first user message of the history.
        first = next((i for i, item in enumerate(items) if item.message.role == "user"), None)
        if first is not None:
            item = items[first]
            items[first] = dataclasses.replace(
                item, message=dataclasses.replace(item.message, content=f"{block}\n\n{item.message.content}")
            )
        else:
            summary_message = Message(role="user", content=block)
    elif block is not None:
        summary_message = Message(role="system", content=block)
    pinned, pinned_message = _pinned(session, governance, window, tokenizer)
    last_seq = max([session.last_seq, *(e.seq or 0 for e in session.events)])
    gaps = missing_after_boundary(session.events, last_seq=last_seq, boundary_seq=projection.boundary_seq)
    # Only governed requests announce unloaded events; an ungoverned one shows its history as loaded.
    notice = gap_notice(gaps) if governance is not None else None
    gap_message = Message(role="system", content=notice) if notice is not None else None
    head = [*prefix, *(m for m in (pinned_message, summary_message, gap_message) if m is not None)]
    if governance is not None and fit_to is not None:
        size = tokenizer.count_messages([*head, *(i.message for i in items)]) + tools_tokens(tools, tokenizer)
        if size > fit_to:
            items, fitted = fit_current_invocation(
                items,
                over_by=size - fit_to,
                hard_over_by=size - hard_limit(window),
                session_load=any(t.name == "session_load" for t in tools),
                tokenizer=tokenizer,
            )
            stats = stats.plus(fitted)
    manifest = build_manifest(
        session.events,
        filter_key=filter_key,
        last_seq=last_seq,
        projection=projection,
        items=items,
        gaps=gaps,
        memo=projection.memo,
    )
    if governance is not None and governance.manifest_check:
        check_manifest(manifest, gap_notice_text=notice)
    messages = [*head, *(i.message for i in items)]
    return BuiltRequest(
        request=ModelRequest(messages=tuple(messages), tools=tuple(tools)),
        prefix=prefix,
        projection=projection,
        items=tuple(items),
        summary_message=summary_message,
        summary_injection=mode,
        compaction=stats,
        window=window,
        tokenizer=tokenizer,
        manifest=manifest,
        pinned=pinned,
        pinned_message=pinned_message,
        gap_message=gap_message,
    )


def pinned_state(session: Session) -> PinnedState:
    """The session's pinned intent: its stored state with the loaded events not yet folded in."""
    return fold_pins(PinnedState.of_session_state(session.state), session.events)


def _pinned(
    session: Session, governance: ContextGovernance | None, window: int, tokenizer: Tokenizer
) -> tuple[PinnedBlock | None, Message | None]:
    if governance is None or governance.pinned is None:
        return None, None
    block = pinned_block(
        pinned_state(session), budget_tokens=governance.pinned.budget(window), count_text=tokenizer.count_text
    )
    return block, (Message(role="system", content=block.text) if block is not None else None)


def build_for_invocation(
    invocation: Invocation,
    *,
    instruction: str,
    tools: Sequence[ToolSpec],
    governance: ContextGovernance | None,
    window: int,
    fit_to: int | None = None,
) -> BuiltRequest:
    """The request of the running invocation's next model call (see `build_context`)."""
    return build_context(
        invocation.session,
        filter_key=invocation.filter_key,
        instruction=instruction,
        tools=tools,
        governance=governance,
        window=window,
        active_invocation_id=invocation.invocation_id,
        current_unit=f"req:{invocation.request_id}" if invocation.request_id else f"inv:{invocation.invocation_id}",
        agent_name=invocation.agent_name,
        fit_to=fit_to,
    )
