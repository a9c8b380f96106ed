"""The demo's agents as agent-registry factories (the default AGENTSITE_AGENTS).

Each takes the composition root's `AgentContext` (agentsite/agents.py) and builds one agent
with the pieces it wants: the support agent takes the service tools, memory preload and the
configured skills; the general agent only the model; the troubleshoot graph its checkpoints.
"""

from __future__ import annotations

from agentsite.agents import AgentContext
from agentsite.demo.agents import build_general_agent, build_support_agent
from agentsite.demo.graph import build_troubleshoot_agent
from runs.core.agents.graph import GraphAgent
from runs.core.agents.llm import LLMAgent


def support_agent(context: AgentContext) -> LLMAgent:
    """The support agent: demo tools, the service tools, skills, and the process's context
    policy (the demo profile, agentsite/demo/profile.py, while AGENTSITE_DEMO_GOVERNANCE is on)."""
    return build_support_agent(
        context.model,
        context.governance,
        extra_tools=context.service_tools,
        extra_instruction=context.service_instruction,
        memory_preload=context.memory_preload,
        skills=context.skills,
        session_recall=context.session_recall,
    )


def general_agent(context: AgentContext) -> LLMAgent:
    """A plain assistant without tools."""
    return build_general_agent(context.model, context.governance)


def troubleshoot_agent(context: AgentContext) -> GraphAgent:
    """The troubleshooting graph (issue 8), checkpointed where the context says (the
    database in the site, so any process can resume a paused run, also after a restart)."""
    return build_troubleshoot_agent(checkpoints=context.checkpoints)
