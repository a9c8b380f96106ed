"""Work the websockets of one process share when they relay the same events (issue 23).

Every socket of a session in a process receives the same channel-layer message (the Redis
lists layer hands each of its channels the very object it deserialized once; the pub/sub
layer deserializes it per channel, into equal dicts). `SharedFrames` keeps, for recent
events, the `Event` parsed from an item of such a message and the JSON text of the AG-UI
frames made from it, so the second and later sockets parse nothing and serialize nothing. The translation itself stays per socket: it
holds what that client has been shown (runs started, messages streamed or whole, results
sent), which differs between a socket that joined mid-run and one that saw it all; a frame
is reused only when it equals the cached one, so a socket whose translation differs renders
its own.

Bounded: the newest `size` events of each kind, per process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ag_ui.core import BaseEvent

from sessions_app.core.events import Event

DEFAULT_SIZE = 4096


class SharedFrames:
    """Parsed events and rendered frames of recent events, shared by a process's sockets."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        # event id -> (the item dict it was parsed from, the event)
        self._events: OrderedDict[str, tuple[dict[str, Any], Event]] = OrderedDict()
        self._frames: OrderedDict[str, list[tuple[BaseEvent, str]]] = OrderedDict()

    def event(self, data: dict[str, Any]) -> Event:
        """The `Event` of an item of a live message, parsed once per process."""
        key = str(data.get("id"))
        hit = self._events.get(key)
        if hit is not None and (hit[0] is data or hit[0] == data):
            return hit[1]
        event = Event.from_dict(data)
        self._events[key] = (data, event)
        if len(self._events) > self.size:
            self._events.popitem(last=False)
        return event

    def render(self, event: Event, items: Sequence[BaseEvent]) -> list[str]:
        """The JSON text of each AG-UI frame translated from `event` (camelCase), reusing the
        text rendered for another socket when its frame is the same."""
        cached = self._frames.get(event.id)
        out: list[str] = []
        for index, item in enumerate(items):
            if cached is not None and index < len(cached) and cached[index][0] == item:
                out.append(cached[index][1])
            else:
                out.append(item.model_dump_json(by_alias=True))
        if cached is None and items:
            self._frames[event.id] = list(zip(items, out, strict=True))
            if len(self._frames) > self.size:
                self._frames.popitem(last=False)
        return out


SHARED = SharedFrames()
"""The process's cache (sockets of a process share it; each process has its own)."""
