"""What ADK's RemoteA2aAgent stores in its session for one Agentsite A2A exchange (issue 25,
item 7): run by hand, outside CI and outside the project's environment.

    python -m venv /tmp/adk && /tmp/adk/bin/pip install "google-adk[a2a]==2.13.0" "a2a-sdk[http-server]==1.3.0"
    # a live server (offline model), a token, then:
    /tmp/adk/bin/python bench/interop/adk_a2a_sessions.py http://127.0.0.1:8000 $TOKEN support send "Why does TLS fail?"
    /tmp/adk/bin/python bench/interop/adk_a2a_sessions.py http://127.0.0.1:8000 $TOKEN troubleshoot stream \
        "payments TLS handshake failures" approve

Prints a summary line (events stored, the agent's text parts, thoughts) and one line per
stored part. Results are in docs/a2a-conformance.md.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
from a2a.client import ClientConfig, ClientFactory
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types


def _kind(part: types.Part) -> str:
    if part.thought:
        return "thought"
    if part.text:
        return "text"
    if part.function_call:
        return f"function_call:{part.function_call.name}"
    return "function_response" if part.function_response else "other"


async def main(url: str, token: str, agent_name: str, mode: str, *messages: str) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=mode == "stream"))
        agent = RemoteA2aAgent(
            name="remote", agent_card=f"{url}/a2a/{agent_name}/.well-known/agent-card.json", a2a_client_factory=factory
        )
        sessions = InMemorySessionService()
        runner = Runner(app_name="check", agent=agent, session_service=sessions)
        session = await sessions.create_session(app_name="check", user_id="u")
        for text in messages:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                pass
        stored = await sessions.get_session(app_name="check", user_id="u", session_id=session.id)
    assert stored is not None
    rows = [
        (event.author, _kind(part), (part.text or "")[:70].replace("\n", " "))
        for event in stored.events
        for part in ((event.content.parts if event.content else None) or [])
    ]
    print(
        json.dumps(
            {
                "mode": mode,
                "events": len(stored.events),
                "agent_text_parts": sum(1 for a, k, _ in rows if a == "remote" and k == "text"),
                "thoughts": sum(1 for _, k, _ in rows if k == "thought"),
            }
        )
    )
    for row in rows:
        print("  ", row)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
