"""Waiting on the channel layer instead of sleeping: a listener has joined a group once its
`group_add` has returned, on any layer (in memory or Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


def group_joined(layer: Any, group: str, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set when a `group_add(group, ...)` on `layer` has returned (patched for the test)."""
    joined = asyncio.Event()
    original = layer.group_add

    async def group_add(name: str, channel: str) -> None:
        await original(name, channel)
        if name == group:
            joined.set()

    monkeypatch.setattr(layer, "group_add", group_add)
    return joined
