"""One model step's events, written to the ledger together (issue 18, item 6).

An agent marks each event of a step but the last with `STEP_CONTINUES` (`continued`); the
runner holds marked events and persists them with the next unmarked one in one
`append_events` call, then emits them in order. An agent marks the last event it yields
with `AGENT_ENDS` (`ending`): when that agent is the run's own (not a sub-agent, whose
parent goes on), the runner holds the event and writes it with the completion event, which
follows at once. The marks are instructions to the runner, not data: the runner takes them
off (`take_mark`) before anything is persisted or emitted.

Events stay events: composite agents, graph nodes and anyone who iterates `agent.run`
pass them on unchanged, and an agent that marks nothing is persisted event by event. A
step is marked only when its tools have already finished (runs.core.agents.llm), so a
held event waits for work already done, never for a slow tool.
"""

from __future__ import annotations

from dataclasses import replace

from sessions_app.core.events import Event

STEP_CONTINUES = "step_continues"
AGENT_ENDS = "agent_ends"
_MARKS = (STEP_CONTINUES, AGENT_ENDS)


def continued(event: Event) -> Event:
    """`event`, marked: more events of its step follow, to be persisted with it."""
    return replace(event, extensions={**event.extensions, STEP_CONTINUES: True})


def ending(event: Event) -> Event:
    """`event`, marked: its agent yields nothing after it."""
    return replace(event, extensions={**event.extensions, AGENT_ENDS: True})


def take_mark(event: Event) -> tuple[Event, bool, bool]:
    """`event` without its marks, whether more of its step follows, whether its agent ends."""
    if not any(mark in event.extensions for mark in _MARKS):
        return event, False, False
    extensions = {k: v for k, v in event.extensions.items() if k not in _MARKS}
    return replace(event, extensions=extensions), STEP_CONTINUES in event.extensions, AGENT_ENDS in event.extensions
