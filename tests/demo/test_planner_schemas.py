"""Issue 21: the offline planner never emits a tool call that the tool's own JSON schema
refuses, over every tool the demo's agents are given (support tools, recall, memory,
artifacts, skills in the `full` profile) and the prompts the README and the demo use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentsite.demo.tools import support_tools
from runs.core.llm.base import ModelRequest, ToolSpec
from runs.core.llm.offline import OfflineModel, plan_tool_calls
from sessions_app.core.events import Message
from skills_app.core.repository import FolderSkillRepository
from skills_app.core.tools import SkillsConfig, SkillToolset
from skills_app.core.workspace import WorkspaceConfig, WorkspaceExecutor

DEMO_SKILLS = Path(__file__).resolve().parents[2] / "agentsite" / "demo" / "skills"

PROMPTS = [
    # The README's tour and skill-learning prompt.
    "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com "
    "and search the logs and tickets",
    "Why does auth.example.com fail TLS? Inspect its certificate",
    "Check every certificate of the fleet",
    "generate the report",
    "Show me ticket INC-1042 and search the logs of checkout-api for errors",
    "restart the payments service",
    "approve restart_service payments",
    "what did we find in our last session about the payments certificate?",
    "load the session",
    "remember that I prefer short answers",
    "save the report as an artifact named report.md",
    "list the documents of the diagnostic-report skill",
    "search the logs",
    "session",
    "",
    "支付服务 TLS 握手失败，检查 payments.internal.example.com 的证书，并搜索日志和工单",
    "证书过期了吗？",
]


async def demo_tool_specs(tmp_path: Path) -> list[ToolSpec]:
    from sessions_app.artifact_backends import artifact_function_tools
    from sessions_app.memory_backends import memory_function_tools
    from sessions_app.recall_tools import recall_tools

    skills = SkillToolset(
        FolderSkillRepository([DEMO_SKILLS]),
        config=SkillsConfig(profile="full"),
        executor=WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "workspaces")),
    )
    await skills.prepare()
    tools: list[Any] = [
        *support_tools(),
        *recall_tools(),
        *memory_function_tools(mode="agentic"),
        *artifact_function_tools(),
        *skills.tools(),
    ]
    return [tool.spec() for tool in tools]


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_every_planned_call_of_a_demo_tool_is_valid_for_its_schema(prompt: str, tmp_path: Path) -> None:
    specs = await demo_tool_specs(tmp_path)
    by_name = {spec.name: spec for spec in specs}
    assert {"search_logs", "session_load", "memory_search", "artifact_save", "skill_run"} <= set(by_name)

    calls, blocked = plan_tool_calls(prompt, specs)

    for plan in calls:
        spec = by_name[plan.tool]
        errors = [e.message for e in jsonschema.Draft202012Validator(dict(spec.parameters)).iter_errors(plan.arguments)]
        assert errors == [], (plan.tool, plan.arguments)
        if spec.requires_one_of:
            assert any(set(group) <= set(plan.arguments) for group in spec.requires_one_of), (plan.tool, plan.arguments)
    assert all(p.missing or p.invalid for p in blocked)


async def test_a_value_the_schema_refuses_blocks_the_call_and_the_answer_says_what_does_not_fit() -> None:
    spec = ToolSpec(
        name="lookup_order",
        description="Look up an order by its order number.",
        parameters={
            "type": "object",
            "properties": {"number": {"type": "integer", "minimum": 100000, "description": "the order number"}},
            "required": ["number"],
        },
    )
    calls, blocked = plan_tool_calls("look up order number 42", [spec])

    assert calls == []
    [plan] = blocked
    assert plan.invalid and "100000" in plan.invalid[0]
    answer = OfflineModel().respond(
        ModelRequest(messages=[Message(role="user", content="look up order number 42")], tools=[spec])
    )
    assert not answer.tool_calls
    assert "lookup_order" in answer.content and "100000" in answer.content
    # A valid number goes through.
    [call], _ = plan_tool_calls("look up order number 123456", [spec])
    assert call.arguments == {"number": 123456}


async def test_a_matching_skill_is_loaded_without_crowding_out_the_tools_the_request_names(tmp_path: Path) -> None:
    """The issue's regression: with a learned skill whose description names the demo's tools,
    the README prompt spent two of its four calls on the skill (load and run) and the ticket
    lookup vanished. Loading it is fine; the tools the request names come first."""
    from skills_app.core.repository import ChainedSkillRepository, InMemorySkillRepository, skill_from_files

    learned = skill_from_files(
        {
            "SKILL.md": (
                "---\nname: search-logs-inspect-certificate-lookup-ticket\n"
                "description: Investigate with search_logs, inspect_certificate, lookup_ticket in that order, then report "
                "with evidence.\n---\n# search-logs-inspect-certificate-lookup-ticket\n\n## Steps\n"
                "1. Call `search_logs` with query.\n2. Call `inspect_certificate` with host.\n3. Call `lookup_ticket`.\n"
            )
        },
        source="db",
    )
    skills = SkillToolset(
        ChainedSkillRepository([InMemorySkillRepository([learned]), FolderSkillRepository([DEMO_SKILLS])]),
        config=SkillsConfig(profile="full"),
        executor=WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "ws")),
    )
    await skills.prepare()
    specs = [t.spec() for t in [*support_tools(), *skills.tools()]]

    calls, _ = plan_tool_calls(PROMPTS[0], specs)

    names = [p.tool for p in calls]
    assert {"search_logs", "inspect_certificate", "lookup_ticket"} <= set(names)
    assert "skill_run" not in names
    # "generate the report" still loads and runs the report skill in one step.
    report, _ = plan_tool_calls("generate the report", specs)
    assert [(p.tool, p.arguments.get("skill")) for p in report] == [
        ("skill_load", "diagnostic-report"),
        ("skill_run", "diagnostic-report"),
    ]
