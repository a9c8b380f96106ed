"""The demo agents: a support engineer that troubleshoots with tools, and a plain assistant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentsite.demo.extensions import ApprovalPolicy, Redactor
from agentsite.demo.tools import DESTRUCTIVE_TOOLS, support_tools
from runs.core.agents.llm import LLMAgent
from runs.core.callbacks import Callbacks
from runs.core.context.governance import ContextGovernance
from runs.core.context.recall_preload import SessionRecallPreload
from runs.core.llm.base import Model
from runs.core.tools.base import Tool
from skills_app.core.agent import SkillsLLMAgent
from skills_app.core.tools import SkillToolset

SUPPORT_INSTRUCTION = """\
You are the on-call support engineer for Example Corp's production services \
(checkout-api, payments, auth-gateway). A user reports a production problem; your job is \
to find its cause and tell them how to fix it.

How to work:
1. Investigate before you answer. Use the tools: search_logs for what the services \
logged (errors, TLS failures, timestamps), inspect_certificate for a host's certificate \
(expiry, chain, names), scan_fleet to check every host's certificate at once (slow, \
about 10 s: only when asked about the whole fleet), lookup_ticket for earlier incidents and \
how they were resolved. Call independent tools in the same step.
2. Base every claim on evidence. Quote the log lines, dates, ticket ids and certificate \
fields you rely on; never invent a value a tool did not return. If a tool fails, say so \
and work with what you have.
3. Answer as a short incident report:
   - Summary: what is broken and since when, in one or two sentences.
   - Evidence: the facts that show it, each with its source.
   - Root cause: the most likely cause, and how sure you are.
   - Fix: concrete steps, in order (for example: renew and deploy the certificate with \
its full chain, reload the service, verify with `openssl s_client -showcerts`), and how \
to prevent a repeat (expiry alerts, chain checks in deploys).
4. If the request lacks something you need (a host, a service, a time range), ask for it \
in one short question instead of guessing.
Keep the report brief and factual. Answer in the user's language.
"""

SUPPORT_DESCRIPTION = (
    "Troubleshoots production errors: searches service logs, inspects TLS certificates and "
    "looks up past incident tickets, then writes a short report with evidence and fixes."
)

GENERAL_INSTRUCTION = "You are a helpful, concise assistant. Say so plainly when you do not know something."
GENERAL_DESCRIPTION = "A plain assistant without tools."


def demo_runner_callbacks() -> Callbacks:
    """Run-wide extensions of the demo (issue 20): the redactor before every model call of
    every agent, each masking recorded on the step's assistant event."""
    return Callbacks(before_model=[Redactor()])


def build_support_agent(
    model: Model,
    governance: ContextGovernance | None = None,
    *,
    extra_tools: Sequence[Tool] = (),
    extra_instruction: str = "",
    memory_preload: int = 0,
    skills: SkillToolset | None = None,
    session_recall: SessionRecallPreload | None = None,
) -> LLMAgent:
    """The support agent; `extra_tools` (recall, memory, artifacts), `skills` and the
    recall preload (SPEC 5.4) come from the composition root, which knows the services
    behind them."""
    common: dict[str, Any] = {
        "name": "support",
        "model": model,
        "instruction": "\n\n".join(part for part in (SUPPORT_INSTRUCTION, extra_instruction) if part),
        "description": SUPPORT_DESCRIPTION,
        "tools": [*support_tools(), *extra_tools],
        "memory_preload": memory_preload,
        "session_recall": session_recall,
        "parallel_tools": True,
        "governance": governance,
        # Issue 20: a destructive tool runs only once the user approved it in their message.
        "callbacks": Callbacks(before_tool=[ApprovalPolicy(DESTRUCTIVE_TOOLS)]),
    }
    return SkillsLLMAgent(skills=skills, **common) if skills is not None else LLMAgent(**common)


def build_general_agent(model: Model, governance: ContextGovernance | None = None) -> LLMAgent:
    return LLMAgent(
        name="general",
        model=model,
        instruction=GENERAL_INSTRUCTION,
        description=GENERAL_DESCRIPTION,
        governance=governance,
    )


def build_demo_agents(
    model: Model,
    governance: ContextGovernance | None = None,
    *,
    extra_tools: Sequence[Tool] = (),
    extra_instruction: str = "",
    memory_preload: int = 0,
    skills: SkillToolset | None = None,
) -> list[LLMAgent]:
    """The demo's agents, the default (support) first, both governed by `governance`;
    `skills` go to the support agent."""
    support = build_support_agent(
        model,
        governance,
        extra_tools=extra_tools,
        extra_instruction=extra_instruction,
        memory_preload=memory_preload,
        skills=skills,
    )
    return [support, build_general_agent(model, governance)]
