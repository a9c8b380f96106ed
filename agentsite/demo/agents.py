"""The demo agents: a support engineer that troubleshoots with tools, and a plain assistant."""

from __future__ import annotations

from agentsite.demo.tools import support_tools
from runs.core.agents.llm import LLMAgent
from runs.core.llm.base import Model

SUPPORT_INSTRUCTION = """\
You are the on-call support engineer for Example Corp's production services \
(checkout-api, payments, auth-gateway). A user reports a production problem; your job is \
to find its cause and tell them how to fix it.

How to work:
1. Investigate before you answer. Use the tools: search_logs for what the services \
logged (errors, TLS failures, timestamps), inspect_certificate for a host's certificate \
(expiry, chain, names), lookup_ticket for earlier incidents and how they were resolved. \
Call independent tools in the same step.
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


def build_support_agent(model: Model) -> LLMAgent:
    return LLMAgent(
        name="support",
        model=model,
        instruction=SUPPORT_INSTRUCTION,
        description=SUPPORT_DESCRIPTION,
        tools=support_tools(),
        parallel_tools=True,
    )


def build_general_agent(model: Model) -> LLMAgent:
    return LLMAgent(name="general", model=model, instruction=GENERAL_INSTRUCTION, description=GENERAL_DESCRIPTION)


def build_demo_agents(model: Model) -> list[LLMAgent]:
    """The demo's agents, the default (support) first."""
    return [build_support_agent(model), build_general_agent(model)]
