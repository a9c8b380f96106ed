"""The demo's named context profile (AGENTSITE_DEMO_GOVERNANCE, on by default).

Thresholds small enough that a few turns of the support scenario show a summary,
placeholders for old tool results and, now and then, a pre-call compaction: with the
offline model (window 8,192) the summary trigger is ~1,200 tokens. They replace eight values
of the process-wide policy (`ContextPolicy.from_settings()`); the rest is kept.
"""

from __future__ import annotations

import dataclasses

from agentsite.context_policy import ContextPolicy


def demo_profile(base: ContextPolicy) -> ContextPolicy:
    """`base` with the demo's small thresholds in place of its own."""
    return dataclasses.replace(
        base,
        summary_trigger_ratio=0.15,
        summary_trigger_min_tokens=1000,
        summary_budget_tokens=300,
        compaction_ratio=0.35,
        compaction_min_tokens=1500,
        compaction_soft_ratio=0.25,
        compaction_soft_min_tokens=1000,
        tool_result_max_tokens=120,
    )
