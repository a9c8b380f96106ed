"""The troubleshooting graph: a deterministic route with a human approval (issue 8).

    plan ──┬── collect_logs ──────┐
           └── check_certificate ─┴─(join)── decide ──┬── draft_report ── approve ──┬── publish
                                                       └── all_clear                 └── discard

`plan` picks the service and host from the user's message; the logs and the certificate
are read at once (one superstep, two tool calls); `decide` waits for both, then either
drafts an incident report or says all is well; `approve` pauses the run until a human
approves or rejects the draft (`POST /api/runs/<id>/resume/`, the buttons in the chat, or
the next message on the session, e.g. "approve", on any surface: docs/routing.md), also
after a server restart: the pause lives in the database checkpoint.

Every step is plain code over the demo tools: the route, the evidence and the report are
the same with or without a language model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentsite.demo.tools import inspect_certificate, known_hosts, known_services, search_logs
from runs.core.agents.graph import END, CheckpointStore, GraphAgent, NodeContext, StateGraph, StateSchema
from runs.core.context.governance import ContextGovernance
from runs.core.tools.function import FunctionTool

GRAPH_NAME = "troubleshoot"
DESCRIPTION = (
    "A fixed troubleshooting route: reads the service logs and inspects the TLS certificate in "
    "parallel, decides, drafts an incident report and waits for your approval before it is final."
)
DEFAULT_SERVICE = "payments"
# Which host serves which service in the demo data (`data/certs/hosts`).
SERVICE_HOSTS = {
    "payments": "payments.internal.example.com",
    "auth-gateway": "auth.example.com",
    "checkout-api": "checkout.example.com",
}
LOG_QUERY = "certificate tls ssl handshake expired x509 issuer"
APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "send", "lgtm"})


def schema() -> StateSchema:
    return StateSchema.of(
        messages="append",
        user_input="overwrite",
        service="overwrite",
        host="overwrite",
        logs="overwrite",
        certificate="overwrite",
        diagnosis="overwrite",
        report="overwrite",
        decision="overwrite",
    )


# -- nodes --------------------------------------------------------------------------------------


def plan(state: Mapping[str, Any]) -> dict[str, Any]:
    """The service and host the user talks about (a host wins over a service name)."""
    text = str(state.get("user_input") or "").lower()
    host = next((h for h in known_hosts() if h in text), None)
    service = next((s for s, h in SERVICE_HOSTS.items() if h == host), None) if host else None
    if service is None:
        # A service name, or its first word ("checkout", "auth"), picks the service.
        service = next(
            (s for s in known_services() if re.search(rf"\b{re.escape(s)}\b", text) or s.split("-")[0] in text.split()),
            DEFAULT_SERVICE,
        )
    return {"service": service, "host": host or SERVICE_HOSTS.get(service, SERVICE_HOSTS[DEFAULT_SERVICE])}


def decide(state: Mapping[str, Any]) -> dict[str, Any]:
    """A verdict from the evidence: the certificate's problem first, else log errors."""
    certificate = state.get("certificate") or {}
    logs = state.get("logs") or {}
    findings: list[str] = []
    if isinstance(certificate, Mapping) and certificate.get("error"):
        findings.append(f"the certificate could not be inspected: {certificate['error']}")
    elif isinstance(certificate, Mapping) and certificate.get("status") == "problem":
        findings.append(f"certificate of {certificate.get('host')}: {certificate.get('problem')}")
    errors = int((logs.get("by_level") or {}).get("ERROR", 0)) if isinstance(logs, Mapping) else 0
    warnings = int((logs.get("by_level") or {}).get("WARN", 0)) if isinstance(logs, Mapping) else 0
    if errors:
        findings.append(f"{errors} TLS/certificate error line(s) in the {state.get('service')} log")
    verdict = "problem" if findings else "healthy"
    return {"diagnosis": {"verdict": verdict, "findings": findings, "errors": errors, "warnings": warnings}}


def route_after_decide(state: Mapping[str, Any]) -> str:
    return "problem" if (state.get("diagnosis") or {}).get("verdict") == "problem" else "healthy"


def _evidence_lines(state: Mapping[str, Any]) -> list[str]:
    certificate = state.get("certificate") or {}
    logs = state.get("logs") or {}
    lines: list[str] = []
    if isinstance(certificate, Mapping) and not certificate.get("error"):
        lines.append(
            f"- inspect_certificate({state.get('host')}): status {certificate.get('status')}, valid "
            f"{certificate.get('not_before')} to {certificate.get('not_after')} "
            f"({certificate.get('days_remaining')} days remaining), chain complete: {certificate.get('chain_complete')}"
        )
    if isinstance(logs, Mapping) and not logs.get("error"):
        lines.append(
            f"- search_logs({state.get('service')}): {logs.get('total_matches', 0)} matching line(s) from "
            f"{logs.get('first_seen')} to {logs.get('last_seen')}"
        )
        lines.extend(f"  - `{line}`" for line in list(logs.get("lines") or [])[:3])
    return lines


def _fix_steps(certificate: Mapping[str, Any]) -> list[str]:
    steps: list[str] = []
    if certificate.get("expired") or (certificate.get("days_remaining") or 99) < 7:
        steps.append(f"Renew the certificate for {certificate.get('host')} and deploy it with its full chain.")
    if certificate.get("chain_complete") is False:
        steps.append("Serve the missing intermediate certificate with the leaf (full chain bundle).")
    if certificate.get("hostname_matches") is False:
        steps.append("Reissue the certificate with the service's hostname among its names.")
    steps.append("Reload the service and verify with `openssl s_client -connect <host>:443 -showcerts`.")
    steps.append("Add expiry and chain checks to monitoring and to the deploy pipeline.")
    return steps


async def draft_report(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """An incident report from the evidence, shown to the user as the draft."""
    diagnosis = state.get("diagnosis") or {}
    certificate = state.get("certificate") if isinstance(state.get("certificate"), Mapping) else {}
    findings = list(diagnosis.get("findings") or [])
    report = "\n".join(
        [
            f"**Draft incident report: {state.get('service')} ({state.get('host')})**",
            "",
            f"Summary: {findings[0] if findings else 'no problem found'}.",
            "",
            "Evidence:",
            *_evidence_lines(state),
            "",
            "Root cause: " + ("; ".join(findings) if findings else "unknown") + ".",
            "",
            "Fix:",
            *(f"{i}. {step}" for i, step in enumerate(_fix_steps(certificate or {}), start=1)),
        ]
    )
    await ctx.say(report)
    return {"report": report}


def approve(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Pause for a human: approve or reject the draft (asked first: nothing runs twice)."""
    answer = ctx.interrupt(
        {
            "question": "Approve this incident report? Approve to make it final, reject to discard it.",
            "kind": "approval",
            "options": ["approve", "reject"],
            "report": state.get("report"),
        }
    )
    return {"decision": _decision(answer)}


def _decision(answer: Any) -> dict[str, Any]:
    """`{"approved": bool, "comment"?: str}` or a word such as "approve" / "reject"."""
    if isinstance(answer, Mapping):
        return {"approved": answer.get("approved") is True, "comment": str(answer.get("comment") or "")}
    if isinstance(answer, bool):
        return {"approved": answer, "comment": ""}
    text = str(answer).strip()
    return {"approved": text.lower().rstrip(".!") in APPROVE_WORDS, "comment": text}


def route_after_approval(state: Mapping[str, Any]) -> str:
    return "approved" if (state.get("decision") or {}).get("approved") else "rejected"


async def publish(state: Mapping[str, Any], ctx: NodeContext) -> None:
    report = str(state.get("report") or "").replace("**Draft incident report:", "**Incident report:", 1)
    await ctx.say(f"{report}\n\nApproved: this report is final.")


async def discard(state: Mapping[str, Any], ctx: NodeContext) -> None:
    comment = (state.get("decision") or {}).get("comment")
    reason = (
        f" Reason given: {comment}"
        if comment and comment.lower() not in APPROVE_WORDS | {"reject", "rejected", "no"}
        else ""
    )
    await ctx.say(f"Rejected: the draft report was discarded and nothing was filed.{reason}")


async def all_clear(state: Mapping[str, Any], ctx: NodeContext) -> None:
    await ctx.say(
        f"No certificate or TLS problem found for {state.get('service')} ({state.get('host')}): the certificate "
        "is valid with a complete chain and the log shows no TLS errors. Nothing needs approval."
    )


# -- the graph ----------------------------------------------------------------------------------


def build_troubleshoot_graph() -> StateGraph:
    graph = StateGraph(GRAPH_NAME, schema())
    graph.add_node("plan", plan, description="pick the service and host")
    graph.add_tool_node(
        "collect_logs",
        FunctionTool(search_logs),
        output_key="logs",
        args=lambda s: {"service": s["service"], "query": LOG_QUERY, "level": "WARN", "limit": 20},
        description="search the service's log for TLS and certificate trouble",
    )
    graph.add_tool_node(
        "check_certificate",
        FunctionTool(inspect_certificate),
        output_key="certificate",
        args=lambda s: {"host": s["host"]},
        description="inspect the host's certificate",
    )
    graph.add_node("decide", decide, description="weigh the evidence")
    graph.add_node("draft_report", draft_report, description="write the incident report")
    graph.add_node("approve", approve, description="wait for a human to approve the report")
    graph.add_node("publish", publish, description="make the approved report final")
    graph.add_node("discard", discard, description="drop the rejected report")
    graph.add_node("all_clear", all_clear, description="report that nothing is wrong")
    graph.set_entry_point("plan")
    graph.add_edge("plan", "collect_logs").add_edge("plan", "check_certificate")
    graph.add_edge(["collect_logs", "check_certificate"], "decide")
    graph.add_conditional_edges("decide", route_after_decide, {"problem": "draft_report", "healthy": "all_clear"})
    graph.add_edge("draft_report", "approve")
    graph.add_conditional_edges("approve", route_after_approval, {"approved": "publish", "rejected": "discard"})
    for last in ("publish", "discard", "all_clear"):
        graph.add_edge(last, END)
    return graph


def build_troubleshoot_agent(
    *, checkpoints: CheckpointStore | None = None, governance: ContextGovernance | None = None
) -> GraphAgent:
    """The demo graph agent; `checkpoints` should be the database store in the site.

    Its approval pause routes the session's next message back to it (docs/routing.md): a
    reply such as "approve" answers it on every surface, besides the resume endpoint."""
    return GraphAgent(
        name=GRAPH_NAME,
        graph=build_troubleshoot_graph(),
        description=DESCRIPTION,
        checkpoints=checkpoints,
        governance=governance,
        await_user_reply=True,
    )
