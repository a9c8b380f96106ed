"""An agent's context policy as code: when to summarize, how to compact (DESIGN 6).

`ContextPolicy` is a plain value: an agent factory builds its own (`ContextPolicy(
compaction_ratio=0.5)`, or `dataclasses.replace(context.policy, ...)`), and
`AgentContext.governance_for(policy)` (through `governance(policy, ...)` here) turns it into
the `ContextGovernance` its `LLMAgent` takes. `ContextPolicy.from_settings()`
is the process-wide default, from the `AGENTSITE_*` context-policy variables
(docs/settings.md), each read by its own name; summary jobs run per session, not per agent,
so their trigger and summarizer follow that process-wide policy. The demo's named profile is
`agentsite.demo.profile.DEMO_PROFILE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from runs.core.context.compaction import CompactionConfig
from runs.core.context.governance import (
    TIKTOKEN,
    BackgroundCompactionConfig,
    ContextGovernance,
    PinnedConfig,
    PrecallConfig,
)
from sessions_app.core.summary import SummaryEngine


@dataclass(frozen=True, kw_only=True)
class ContextPolicy:
    """What an agent does about its context. The defaults are the declared defaults of the
    matching `AGENTSITE_*` variables (a test keeps them equal)."""

    summaries: bool = True
    summarizer: str = "auto"
    """`auto` (extractive on the offline model, else the summary model) or `module:factory`."""
    summary_trigger_ratio: float = 0.5
    summary_trigger_min_tokens: int = 2000
    summary_event_threshold: int = 0
    summary_max_words: int = 0
    summary_budget_tokens: int = 512
    summary_cache_safe_fork: bool = False
    summary_chunked: bool = True
    summary_injection: Literal["system", "user"] = "system"
    sync_summary_intra_run: bool = False
    compaction: bool = True
    compaction_ratio: float = 0.7
    compaction_min_tokens: int = 2000
    compaction_soft: bool = True
    compaction_soft_ratio: float = 0.55
    compaction_soft_min_tokens: int = 1500
    compaction_clear_at_least: int = 0
    keep_recent_requests: int = 1
    tool_result_max_tokens: int = 1024
    oversized_tool_result_max_tokens: int = 0
    compaction_force_clean_tools: tuple[str, ...] = ()
    compaction_keep_tools: tuple[str, ...] = ()
    context_manifest_check: bool = True
    pinned_intent: bool = True
    pinned_budget_ratio: float = 0.05

    @classmethod
    def from_settings(cls) -> ContextPolicy:
        """The process-wide default policy, from the settings (read when called, so a test's
        settings override applies)."""
        return cls(
            summaries=settings.AGENTSITE_SUMMARIES,
            summarizer=settings.AGENTSITE_SUMMARIZER,
            summary_trigger_ratio=settings.AGENTSITE_SUMMARY_TRIGGER_RATIO,
            summary_trigger_min_tokens=settings.AGENTSITE_SUMMARY_TRIGGER_MIN_TOKENS,
            summary_event_threshold=settings.AGENTSITE_SUMMARY_EVENT_THRESHOLD,
            summary_max_words=settings.AGENTSITE_SUMMARY_MAX_WORDS,
            summary_budget_tokens=settings.AGENTSITE_SUMMARY_BUDGET_TOKENS,
            summary_cache_safe_fork=settings.AGENTSITE_SUMMARY_CACHE_SAFE_FORK,
            summary_chunked=settings.AGENTSITE_SUMMARY_CHUNKED,
            summary_injection=settings.AGENTSITE_SUMMARY_INJECTION,
            sync_summary_intra_run=settings.AGENTSITE_SYNC_SUMMARY_INTRA_RUN,
            compaction=settings.AGENTSITE_COMPACTION,
            compaction_ratio=settings.AGENTSITE_COMPACTION_RATIO,
            compaction_min_tokens=settings.AGENTSITE_COMPACTION_MIN_TOKENS,
            compaction_soft=settings.AGENTSITE_COMPACTION_SOFT,
            compaction_soft_ratio=settings.AGENTSITE_COMPACTION_SOFT_RATIO,
            compaction_soft_min_tokens=settings.AGENTSITE_COMPACTION_SOFT_MIN_TOKENS,
            compaction_clear_at_least=settings.AGENTSITE_COMPACTION_CLEAR_AT_LEAST,
            keep_recent_requests=settings.AGENTSITE_KEEP_RECENT_REQUESTS,
            tool_result_max_tokens=settings.AGENTSITE_TOOL_RESULT_MAX_TOKENS,
            oversized_tool_result_max_tokens=settings.AGENTSITE_OVERSIZED_TOOL_RESULT_MAX_TOKENS,
            compaction_force_clean_tools=tuple(settings.AGENTSITE_COMPACTION_FORCE_CLEAN_TOOLS),
            compaction_keep_tools=tuple(settings.AGENTSITE_COMPACTION_KEEP_TOOLS),
            context_manifest_check=settings.AGENTSITE_CONTEXT_MANIFEST_CHECK,
            pinned_intent=settings.AGENTSITE_PINNED_INTENT,
            pinned_budget_ratio=settings.AGENTSITE_PINNED_BUDGET_RATIO,
        )


def governance(policy: ContextPolicy, *, engine: SummaryEngine | None, context_window: int | None) -> ContextGovernance:
    """The `ContextGovernance` an LLMAgent takes for `policy`; `engine` summarizes when the
    pre-call path or an intra-run summary needs one (None: no synchronous summaries)."""
    return ContextGovernance(
        summaries=engine if engine is not None and engine.summarizer is not None else None,
        summary_injection=policy.summary_injection,
        compaction=CompactionConfig(
            enabled=policy.compaction,
            keep_recent_requests=policy.keep_recent_requests,
            tool_result_max_tokens=policy.tool_result_max_tokens,
            oversized_tool_result_max_tokens=policy.oversized_tool_result_max_tokens,
            force_clean_tools=frozenset(policy.compaction_force_clean_tools),
            keep_tools=frozenset(policy.compaction_keep_tools),
            clear_at_least=policy.compaction_clear_at_least,
        ),
        precall=PrecallConfig(
            enabled=policy.compaction, ratio=policy.compaction_ratio, min_tokens=policy.compaction_min_tokens
        ),
        background=BackgroundCompactionConfig(
            ratio=policy.compaction_soft_ratio, min_tokens=policy.compaction_soft_min_tokens
        )
        if policy.compaction and policy.compaction_soft
        else None,
        sync_summary_intra_run=policy.sync_summary_intra_run,
        context_window=context_window,
        tokenizer=TIKTOKEN,
        manifest_check=policy.context_manifest_check,
        pinned=PinnedConfig(budget_ratio=policy.pinned_budget_ratio) if policy.pinned_intent else None,
    )
