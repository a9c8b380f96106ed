"""Tool progress (issue 21): a long tool says how far it got while it runs.

A tool calls `ToolContext.report_progress(done, total, note)`; that builds a `tool.progress`
event (partial, no message, no state delta, so it is never persisted: the ledger stays lean
and the tool's result is the record of what it did) and hands it to the progress sink of
the run it belongs to. The runner installs that sink (`PROGRESS_SINK`, a context variable,
so every tool task and a sync tool's worker thread inherit it) and emits the event to the
run's listeners and sinks like any other live event, without holding or writing it.

Outside a runner (a tool called directly, in a unit test) there is no sink and a report is
a no-op. The event's `extensions["tool_progress"]` is a `ToolProgress.to_dict()`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeGuard

from sessions_app.core.events import Event

OBJECT_TOOL_PROGRESS = "tool.progress"
"""`Event.object` of a progress report."""
PROGRESS_EXTENSION = "tool_progress"
"""Event extension key holding the report (`ToolProgress.to_dict()`)."""
MAX_NOTE_CHARS = 200

ProgressSink = Callable[[Event], None]
"""Takes a progress event; must be safe to call from any thread and must not block."""

PROGRESS_SINK: ContextVar[ProgressSink | None] = ContextVar("agentsite_progress_sink", default=None)


@dataclass(frozen=True, kw_only=True)
class ToolProgress:
    """How far one tool call got: `done` of `total` units (total None: unknown), a note."""

    tool_call_id: str
    tool_name: str
    done: float
    total: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.done) or (self.total is not None and not math.isfinite(self.total)):
            raise ValueError(f"progress needs finite numbers, got {self.done}/{self.total}")  # JSON has no NaN
        if self.done < 0 or (self.total is not None and (self.total <= 0 or self.done > self.total)):
            raise ValueError(f"progress needs 0 <= done <= total and total > 0, got {self.done}/{self.total}")

    @property
    def fraction(self) -> float | None:
        """0..1, or None when the total is unknown."""
        return None if self.total is None else self.done / self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "done": self.done,
            "total": self.total,
            "note": self.note,
        }

    @classmethod
    def from_event(cls, event: Event) -> ToolProgress | None:
        """The report an event carries, or None when it is not a (well-formed) progress event."""
        data = event.extensions.get(PROGRESS_EXTENSION)
        if event.object != OBJECT_TOOL_PROGRESS or not isinstance(data, Mapping):
            return None
        done, total = data.get("done"), data.get("total")
        # Numbers stay as given (an int stays an int on the wire); anything else is no report.
        if not _is_number(done) or not (total is None or _is_number(total)) or "tool_call_id" not in data:
            return None
        try:
            return cls(
                tool_call_id=str(data["tool_call_id"]),
                tool_name=str(data.get("tool_name") or ""),
                done=done,
                total=total,
                note=str(data.get("note") or ""),
            )
        except ValueError:
            return None


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def progress_event(progress: ToolProgress, *, author: str, invocation_id: str) -> Event:
    """The live, never-persisted event of one report."""
    return Event(
        author=author,
        invocation_id=invocation_id,
        object=OBJECT_TOOL_PROGRESS,
        partial=True,
        extensions={PROGRESS_EXTENSION: progress.to_dict()},
    )


def publish_progress(event: Event) -> bool:
    """Hand a progress event to the current run's sink; False when there is none."""
    sink = PROGRESS_SINK.get()
    if sink is None:
        return False
    sink(event)
    return True
