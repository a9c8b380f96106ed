"""The browser chat page (DESIGN 5: `/` and `/chat/<session_id>/`).

The page is rendered here with everything that does not move (the user's sessions, the
agents and the model badge); `static/agentsite/chat.js` loads the ledger of the chosen
session over the REST API and streams new runs over the session's websocket.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext, gettext_noop

from agentsite.runtime import run_manager
from runs.surfaces.apis import agent_model_fields
from sessions_app import selectors as session_selectors

SIDEBAR_SESSIONS = 100
OFFLINE_PROVIDER = "offline"
# Marked for the catalog here, translated per request (issue 21).
OFFLINE_BADGE = gettext_noop("Offline planner: deterministic rules, not a language model")

# Shown on an empty conversation; each one exercises a different tool of the demo agent.
SUGGESTIONS = (
    gettext_noop("Why does payments.internal.example.com fail TLS handshakes?"),
    gettext_noop("Look up ticket INC-1042 and tell me how it was resolved."),
    gettext_noop("Search the checkout-api logs for TLS errors."),
)


def model_badge(agent: dict[str, Any]) -> str:
    """What the header says about the model: plainly so when it is the offline planner."""
    if agent.get("model_provider") == OFFLINE_PROVIDER:
        return gettext(OFFLINE_BADGE)
    if not agent.get("model") and agent.get("kind") == "graph":
        return gettext("Graph: deterministic steps, no model")
    name = agent.get("model") or gettext("no model")
    provider = agent.get("model_provider")
    return gettext("Model: %(name)s") % {"name": name} + (f" ({provider})" if provider else "")


def agent_catalog() -> list[dict[str, Any]]:
    """The agents as `GET /api/agents/` lists them, each with its badge text."""
    runner = run_manager().runner
    agents = []
    for agent in runner.agents.values():
        entry: dict[str, Any] = {
            "name": agent.name,
            "description": agent.description,
            "kind": agent.kind,
            "model": agent.model_name,
            "default": agent.name == runner.default_agent,
            **agent_model_fields(agent),
        }
        entry["badge"] = model_badge(entry)
        agents.append(entry)
    return agents


def sidebar_sessions(*, user: Any) -> QuerySet[Any]:
    """The user's newest sessions, each with the text of its first user message."""
    return session_selectors.session_list_with_first_message(user=user, limit=SIDEBAR_SESSIONS)


@login_required
def chat(request: HttpRequest, session_id: str | None = None) -> HttpResponse:
    session = None
    if session_id is not None:
        session = session_selectors.session_get(user=request.user, session_id=session_id)
        if session is None:
            raise Http404("no such session")
    agents = agent_catalog()
    default = next((a for a in agents if a["default"]), agents[0])
    selected = next((a for a in agents if session is not None and a["name"] == session.agent), default)
    config = {
        "sessionId": session.id if session is not None else None,
        "agent": selected["name"],
        "agents": agents,
        "urls": {
            "sessions": reverse("session-list"),
            "agents": reverse("agent-list"),
            "chat": reverse("chat"),
            "chatSession": reverse("chat-session", args=["SESSION_ID"]),
            "events": reverse("session-events", args=["SESSION_ID"]),
            "ledger": reverse("session-ledger", args=["SESSION_ID"]),
            "runs": reverse("run-create"),
            "runCancel": reverse("run-cancel", args=["RUN_ID"]),
            "runMessages": reverse("run-messages", args=["RUN_ID"]),
            "runDetail": reverse("run-detail", args=["RUN_ID"]),
            "websocket": "/ws/sessions/SESSION_ID/",
        },
    }
    return render(
        request,
        "chat/chat.html",
        {
            "session": session,
            "session_first_message": session_selectors.first_user_message(session=session)
            if session is not None
            else "",
            "sessions": sidebar_sessions(user=request.user),
            "agents": agents,
            "selected_agent": selected,
            "suggestions": [gettext(text) for text in SUGGESTIONS],
            "chat_config": config,
        },
    )
