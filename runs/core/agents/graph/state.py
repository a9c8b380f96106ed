"""Graph state: a schema of named fields, each with a reducer (SPEC 10.1).

A node never writes the shared state directly: it returns an update (a mapping of field
names to values) and the executor folds every update of a superstep into the state with
each field's reducer, in task order, so the outcome does not depend on which concurrent
task finished first.

Reducers:

- `overwrite` (the default): the update replaces the value;
- `append`: lists concatenate (a single non-list value is appended as one item);
- `merge`: mappings merge shallowly, the update's keys winning.

A custom reducer is any `(current, update) -> new` function. State values must be JSON
(they are checkpointed after every superstep).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Reducer = Callable[[Any, Any], Any]
ReducerName = Literal["overwrite", "append", "merge"]


def overwrite(current: Any, update: Any) -> Any:
    """The update replaces the current value."""
    return update


def append(current: Any, update: Any) -> list[Any]:
    """Lists concatenate; a single item is appended."""
    base = list(current) if current is not None else []
    if isinstance(update, list | tuple):
        return [*base, *update]
    return [*base, update]


def merge(current: Any, update: Any) -> dict[str, Any]:
    """Mappings merge shallowly; the update's keys win."""
    if update is None:
        return dict(current or {})
    if not isinstance(update, Mapping):
        raise TypeError(f"the merge reducer needs a mapping, got {type(update).__name__}")
    return {**dict(current or {}), **dict(update)}


REDUCERS: dict[str, Reducer] = {"overwrite": overwrite, "append": append, "merge": merge}


@dataclass(frozen=True, kw_only=True)
class StateField:
    """One field of the state: how updates combine, and its value before any update.

    `default` is a factory (`list`, `dict`, `lambda: 0`) or a plain value (copied deeply
    for each run, so runs never share a mutable default).
    """

    reducer: ReducerName | Reducer = "overwrite"
    default: Any = None

    @property
    def reduce(self) -> Reducer:
        if callable(self.reducer):
            return self.reducer
        return REDUCERS[self.reducer]

    def initial(self) -> Any:
        if callable(self.default):
            return self.default()
        return copy.deepcopy(self.default)


@dataclass(frozen=True, kw_only=True)
class StateSchema:
    """The fields a graph's state has. Updates to other keys are refused."""

    fields: Mapping[str, StateField] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, spec in self.fields.items():
            if not isinstance(spec.reducer, str):
                if not callable(spec.reducer):
                    raise ValueError(f"field {name!r}: reducer must be a name or a function, got {spec.reducer!r}")
            elif spec.reducer not in REDUCERS:
                raise ValueError(f"field {name!r}: unknown reducer {spec.reducer!r}; use one of {sorted(REDUCERS)!r}")

    @classmethod
    def of(cls, **fields: StateField | ReducerName) -> StateSchema:
        """`StateSchema.of(messages="append", report="overwrite", facts=StateField(reducer="merge", default=dict))`."""
        built = {
            name: spec if isinstance(spec, StateField) else StateField(reducer=spec, default=_default_for(spec))
            for name, spec in fields.items()
        }
        return cls(fields=built)

    def initial(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every field at its default, then `values` (which must name known fields) on top."""
        state = {name: spec.initial() for name, spec in self.fields.items()}
        for key, value in (values or {}).items():
            self.check_key(key, who="the initial state")
            state[key] = value
        return state

    def check_key(self, key: str, *, who: str) -> None:
        if key not in self.fields:
            raise KeyError(f"{who} writes {key!r}, which is not a field of the state; fields: {sorted(self.fields)!r}")

    def apply(
        self, state: Mapping[str, Any], updates: list[tuple[str, Mapping[str, Any]]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Fold `(writer, update)` pairs into `state`, in order.

        Returns the new state and the delta: each changed field with its new value.
        """
        new = dict(state)
        changed: set[str] = set()
        for writer, update in updates:
            for key, value in update.items():
                self.check_key(key, who=writer)
                new[key] = self.fields[key].reduce(new.get(key), value)
                changed.add(key)
        delta = {key: new[key] for key in self.fields if key in changed and new[key] != state.get(key)}
        return new, delta


def _default_for(reducer: ReducerName) -> Any:
    return {"append": list, "merge": dict}.get(reducer)
