"""Context policy as code (issue 22, item 3): a typed ContextPolicy, the process-wide default
from the settings, the demo's named profile, and the governance an agent takes from a policy."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentsite.config import BY_NAME
from agentsite.context_policy import ContextPolicy, governance
from agentsite.demo.profile import demo_profile
from sessions_app.core.summary import SummaryEngine


def test_the_policy_defaults_are_the_declared_defaults_of_the_variables() -> None:
    for field in dataclasses.fields(ContextPolicy):
        declared = BY_NAME[f"AGENTSITE_{field.name.upper()}"].default
        default = ContextPolicy().__getattribute__(field.name)
        assert default == (tuple(declared) if isinstance(declared, list) else declared), field.name


def test_with_nothing_set_the_settings_policy_is_the_default_policy() -> None:
    assert ContextPolicy.from_settings() == ContextPolicy()


def test_a_setting_reaches_the_policy_by_its_own_name(settings: Any) -> None:
    settings.AGENTSITE_COMPACTION_KEEP_TOOLS = ["search_logs"]
    settings.AGENTSITE_PINNED_BUDGET_RATIO = 0.1
    policy = ContextPolicy.from_settings()
    assert policy.compaction_keep_tools == ("search_logs",) and policy.pinned_budget_ratio == 0.1


def test_the_demo_profile_replaces_eight_thresholds_and_keeps_the_rest() -> None:
    base = ContextPolicy(compaction_clear_at_least=4096, summary_injection="user")
    demo = demo_profile(base)
    changed = {f.name for f in dataclasses.fields(ContextPolicy) if getattr(demo, f.name) != getattr(base, f.name)}
    assert len(changed) == 8 and "tool_result_max_tokens" in changed and demo.tool_result_max_tokens == 120
    assert demo.compaction_clear_at_least == 4096 and demo.summary_injection == "user"


def test_the_process_policy_is_the_demo_profile_while_demo_governance_is_on(settings: Any) -> None:
    from agentsite.composition import context_policy

    settings.AGENTSITE_DEMO_GOVERNANCE = True
    assert context_policy() == demo_profile(ContextPolicy())
    settings.AGENTSITE_DEMO_GOVERNANCE = False
    assert context_policy() == ContextPolicy()


def test_an_agent_builds_its_governance_from_its_own_policy() -> None:
    policy = ContextPolicy(
        compaction_soft=False,
        pinned_intent=False,
        tool_result_max_tokens=64,
        compaction_force_clean_tools=("scan_fleet",),
    )
    built = governance(policy, engine=SummaryEngine(summarizer=None), context_window=4096)
    assert built.background is None and built.pinned is None and built.summaries is None
    assert built.compaction.tool_result_max_tokens == 64 and built.compaction.force_clean_tools == {"scan_fleet"}
    assert built.context_window == 4096 and built.precall.ratio == policy.compaction_ratio
