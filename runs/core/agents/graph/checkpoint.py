"""Checkpoints: the graph's state after every superstep, and where it pauses (SPEC 10.3).

A checkpoint holds everything needed to continue a run in another process: the state,
the nodes of the next superstep, the join barriers filled so far and, for a step that
paused, the writes of the tasks that did finish plus the pending interrupt. A resumed
run writes its checkpoints under its own run id, each pointing at its parent, so the
lineage of a conversation with several pauses stays readable.

`claim` is how a pause is answered at most once: a conditional write that succeeds for
one caller only (the resume API claims before it starts the resuming run).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import new_id, utcnow


@dataclass(frozen=True, kw_only=True)
class PendingInterrupt:
    """A node asked for human input: `payload` is what it asked, `index` which call of
    `interrupt` inside the node it was (a node may ask more than once)."""

    id: str
    node: str
    payload: Any
    index: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "payload": self.payload, "index": self.index}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingInterrupt:
        return cls(
            id=str(data["id"]), node=str(data["node"]), payload=data.get("payload"), index=int(data.get("index", 0))
        )


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """The graph after `step` supersteps (or paused inside superstep `step`)."""

    id: str = ""
    run_id: str
    graph: str
    step: int
    state: Mapping[str, Any]
    next_nodes: tuple[str, ...] = ()
    barriers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    writes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resume_values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    interrupt: PendingInterrupt | None = None
    parent_id: str | None = None
    resumed_by: str = ""
    created_at: datetime = field(default_factory=utcnow)

    @property
    def waiting(self) -> bool:
        """Paused for a human and not answered yet."""
        return self.interrupt is not None and not self.resumed_by

    @property
    def finished(self) -> bool:
        return not self.next_nodes and self.interrupt is None

    def replace(self, **changes: Any) -> Checkpoint:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "graph": self.graph,
            "step": self.step,
            "state": dict(self.state),
            "next_nodes": list(self.next_nodes),
            "barriers": {k: list(v) for k, v in self.barriers.items()},
            "writes": {k: dict(v) for k, v in self.writes.items()},
            "resume_values": {k: list(v) for k, v in self.resume_values.items()},
            "interrupt": self.interrupt.to_dict() if self.interrupt is not None else None,
            "parent_id": self.parent_id,
            "resumed_by": self.resumed_by,
            "created_at": self.created_at.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Checkpoint:
        interrupt = data.get("interrupt")
        created = data.get("created_at")
        return cls(
            id=str(data.get("id") or ""),
            run_id=str(data["run_id"]),
            graph=str(data.get("graph") or ""),
            step=int(data["step"]),
            state=dict(data.get("state") or {}),
            next_nodes=tuple(data.get("next_nodes") or ()),
            barriers={k: tuple(v) for k, v in (data.get("barriers") or {}).items()},
            writes={k: dict(v) for k, v in (data.get("writes") or {}).items()},
            resume_values={k: tuple(v) for k, v in (data.get("resume_values") or {}).items()},
            interrupt=PendingInterrupt.from_dict(interrupt) if interrupt else None,
            parent_id=data.get("parent_id"),
            resumed_by=str(data.get("resumed_by") or ""),
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else (created or utcnow()),
        )


@runtime_checkable
class CheckpointStore(Protocol):
    """Where checkpoints live (in memory for tests, the database in the site)."""

    async def put(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a new checkpoint; returns it with its id."""
        ...

    async def get(self, checkpoint_id: str) -> Checkpoint | None: ...

    async def latest(self, run_id: str) -> Checkpoint | None:
        """The newest checkpoint a run wrote, or None."""
        ...

    async def list(self, run_id: str) -> list[Checkpoint]:
        """A run's checkpoints, oldest first."""
        ...

    async def claim(self, checkpoint_id: str, *, by: str) -> bool:
        """Mark the checkpoint as resumed by `by` if nobody has; True for the one winner."""
        ...

    async def release(self, checkpoint_id: str, *, by: str) -> None:
        """Undo `by`'s claim (the resuming run could not start)."""
        ...


class InMemoryCheckpointStore:
    def __init__(self) -> None:
        self._items: dict[str, Checkpoint] = {}
        self._lock = asyncio.Lock()

    async def put(self, checkpoint: Checkpoint) -> Checkpoint:
        stored = checkpoint.replace(id=checkpoint.id or new_id())
        self._items[stored.id] = stored
        return stored

    async def get(self, checkpoint_id: str) -> Checkpoint | None:
        return self._items.get(checkpoint_id)

    async def latest(self, run_id: str) -> Checkpoint | None:
        found = await self.list(run_id)
        return found[-1] if found else None

    async def list(self, run_id: str) -> list[Checkpoint]:
        # Insertion order is creation order (dicts keep it).
        return [c for c in self._items.values() if c.run_id == run_id]

    async def claim(self, checkpoint_id: str, *, by: str) -> bool:
        async with self._lock:
            found = self._items.get(checkpoint_id)
            if found is None or found.resumed_by:
                return False
            self._items[checkpoint_id] = found.replace(resumed_by=by)
            return True

    async def release(self, checkpoint_id: str, *, by: str) -> None:
        async with self._lock:
            found = self._items.get(checkpoint_id)
            if found is not None and found.resumed_by == by:
                self._items[checkpoint_id] = found.replace(resumed_by="")
