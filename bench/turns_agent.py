"""bench/turns.py's agent: three small tools and a scripted model, seven ledger events a turn."""

from __future__ import annotations

from typing import Any

APP = "bench"
AGENT = "oncall"
USERNAME = "bench-alice"
EVENTS_PER_TURN = 7  # user, assistant tool calls, 3 tool results, assistant answer, completion


def search_logs(query: str, hours: int = 24) -> dict[str, Any]:
    """Search the service logs.

    Args:
        query: words to look for.
        hours: how far back to search.
    """
    return {
        "query": query,
        "hours": hours,
        "matches": 3,
        "first": "2024-05-01T10:02:11Z ERROR upstream timeout after 30s (pool exhausted)",
    }


def lookup_ticket(ticket_id: str) -> dict[str, Any]:
    """Look up a support ticket by its id.

    Args:
        ticket_id: the ticket id, e.g. T-1042.
    """
    return {"id": ticket_id, "status": "open", "priority": "P2", "owner": "bob", "title": "checkout latency"}


def inspect_host(host: str) -> dict[str, Any]:
    """Show the health of one host.

    Args:
        host: the host name.
    """
    return {"host": host, "cpu": 0.41, "memory": 0.63, "disk": 0.72, "status": "healthy", "uptime_days": 12}


def _user_message(turn: int) -> str:
    return f"Turn {turn}: checkout is slow again. Check the logs, ticket T-{1000 + turn} and host web-{turn % 7}."


def _script(turn: int) -> list[Any]:
    """The model's two responses for one turn: three tool calls, then the answer."""
    from runs.core.llm.scripted import ScriptStep

    return [
        ScriptStep.calls(
            ("search_logs", {"query": f"checkout timeout turn {turn}", "hours": 6}),
            ("lookup_ticket", {"ticket_id": f"T-{1000 + turn}"}),
            ("inspect_host", {"host": f"web-{turn % 7}"}),
        ),
        ScriptStep.answer(_answer(turn)),
    ]


def _answer(turn: int) -> str:
    return f"Turn {turn}: 3 upstream timeouts in the logs, T-{1000 + turn} is open (P2), web-{turn % 7} is healthy."
