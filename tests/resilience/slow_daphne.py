"""Daphne with the demo graph's `draft_report` node slowed down: `python -m
tests.resilience.slow_daphne <daphne arguments>`.

A fault test kills the web process while a graph run sits in that node, after the
supersteps before it were checkpointed. The pause is AGENTSITE_TEST_SLOW_NODE_S seconds.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    django.setup()
    from agentsite.demo import graph

    original = graph.draft_report
    pause = float(os.environ.get("AGENTSITE_TEST_SLOW_NODE_S", "30"))

    async def slow_draft_report(state: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(pause)
        return await original(state, ctx)

    # Read when the runner builds the graph, on the first request: after this patch.
    graph.draft_report = slow_draft_report  # type: ignore[assignment]  # same signature, slower

    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *sys.argv[1:]]
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
