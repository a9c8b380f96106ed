"""The frameworks integrators use, calling a live Agentsite as they call OpenAI (issue 25).

Run in the interop virtualenv (tests/interop/.venv, tests/interop/requirements.txt), never in
the project's: `python tests/interop/clients.py <case>` with AGENTSITE_URL and
AGENTSITE_TOKEN set. Each case prints one JSON object (what the framework gave back) on its
last line; tests/interop/test_interop.py starts the server, scripts its model and checks
both what the framework got and what the server stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pydantic

URL = os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000")
TOKEN = os.environ.get("AGENTSITE_TOKEN", "")
MODEL = os.environ.get("AGENTSITE_AGENT", "support")


class Incident(pydantic.BaseModel):
    host: str
    expired: bool
    severity: str


class WeatherReport(pydantic.BaseModel):
    city: str
    celsius: int


def get_weather(city: str) -> str:
    """The weather in a city (the client's own function, run by the framework)."""
    return f"{city}: 18C and sunny"


def _chat_model(**options: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=f"{URL}/v1", api_key=TOKEN, **{"timeout": 60, **options})  # type: ignore[arg-type]


def langchain_chat() -> dict[str, Any]:
    """ChatOpenAI: invoke, stream, with_structured_output (json_schema)."""
    model = _chat_model(max_retries=0)
    invoked = model.invoke("What is INC-1042?")
    streamed = [chunk.content for chunk in model.stream("Why is payments down?")]
    structured = model.with_structured_output(Incident).invoke("Is the payments certificate expired?")
    # `use_responses_api`: the same model through /v1/responses.
    responses = _chat_model(max_retries=0, use_responses_api=True).invoke("And through the Responses API?")
    return {
        "invoke": invoked.content,
        "stream_chunks": len(streamed),
        "stream": "".join(map(str, streamed)),
        "structured": structured.model_dump() if isinstance(structured, Incident) else repr(structured),
        "responses": responses.text,
    }


def langgraph_react() -> dict[str, Any]:
    """A LangGraph ReAct loop whose tool runs in the client."""
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    agent = create_react_agent(_chat_model(max_retries=0), [tool(get_weather)])
    state = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
    return {
        "messages": [
            {
                "type": m.type,
                "content": m.content,
                "tool_calls": [c["name"] for c in getattr(m, "tool_calls", []) or []],
            }
            for m in state["messages"]
        ]
    }


def agents_sdk() -> dict[str, Any]:
    """The OpenAI Agents SDK on its default path (the Responses API): a local function tool
    and a structured `output_type`."""
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=f"{URL}/v1", api_key=TOKEN, max_retries=0), use_for_tracing=False)
    agent = Agent(
        name="weather",
        instructions="Report the weather as asked.",
        model=MODEL,
        tools=[function_tool(get_weather)],
        output_type=WeatherReport,
    )

    async def run() -> Any:
        return await Runner.run(agent, "What is the weather in Paris?")

    result = asyncio.run(run())
    return {"final_output": result.final_output.model_dump(), "items": [item.type for item in result.new_items]}


def agents_sdk_handoff() -> dict[str, Any]:
    """The Agents SDK, streamed: a triage agent (Agentsite's `general`) hands off to an agent
    whose model is Agentsite's `support`, which gets the history with the handoff's call."""
    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=f"{URL}/v1", api_key=TOKEN, max_retries=0), use_for_tracing=False)
    desk = Agent(name="support desk", instructions="Answer ticket questions.", model="support")
    triage = Agent(
        name="triage", instructions="Hand ticket questions to the support desk.", model="general", handoffs=[desk]
    )

    async def run() -> dict[str, Any]:
        result = Runner.run_streamed(triage, "What is INC-1042?")
        kinds = [event.type async for event in result.stream_events()]
        return {
            "final_output": result.final_output,
            "last_agent": result.last_agent.name,
            "stream_events": sorted(set(kinds)),
        }

    return asyncio.run(run())


def retried_failure() -> dict[str, Any]:
    """A run that fails, called with each SDK's default retries: ChatOpenAI (chat
    completions), then the Agents SDK (the Responses API)."""
    import openai
    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

    got: dict[str, Any] = {}
    try:
        _chat_model().invoke("Check the fleet.")
    except openai.APIStatusError as exc:
        got["langchain"] = {"status": exc.status_code, "should_retry": exc.response.headers.get("x-should-retry")}
    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=f"{URL}/v1", api_key=TOKEN), use_for_tracing=False)
    try:
        Runner.run_sync(Agent(name="fleet", model=MODEL), "Check the fleet again.")
    except openai.APIStatusError as exc:
        got["agents_sdk"] = {"status": exc.status_code, "should_retry": exc.response.headers.get("x-should-retry")}
    return got


def retried_timeout() -> dict[str, Any]:
    """A slow run: ChatOpenAI times out and retries (its default policy) under one
    `Idempotency-Key`, as an integrator sends it; each retry joins the run in flight."""
    import uuid

    model = _chat_model(timeout=2, max_retries=4, default_headers={"Idempotency-Key": str(uuid.uuid4())})
    return {"invoke": model.invoke("Renew the certificate?").content}


# --- Google ADK (over A2A) ---------------------------------------------------------------
# ADK's agents here use a model served by the test (the scripted OpenAI-compatible server)
# through ADK's own chat-completions client: LiteLlm, ADK's usual way to an OpenAI-compatible
# server, needs the litellm package, which is not installed.


def _adk_openai_model() -> Any:
    """ADK's own client of an OpenAI-compatible `/chat/completions` (`ApigeeLlm` with an
    `apigee/openai/` model: plain httpx, no LiteLLM), pointed at ADK_MODEL_URL."""
    from google.adk.models.apigee_llm import ApigeeLlm

    return ApigeeLlm(
        model="apigee/openai/gpt-4o-mini",
        proxy_url=os.environ["ADK_MODEL_URL"],
        custom_headers={"Authorization": "Bearer sk-test"},
    )


def adk_remote_sub_agent() -> dict[str, Any]:
    """ADK's `RemoteA2aAgent` pointing at Agentsite's A2A endpoint, as a sub-agent: the root
    agent's model (at ADK_MODEL_URL) transfers to it; Agentsite's agent answers over A2A.
    Once streamed and once not, each in its own ADK session: what each session stored."""
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from google.adk.agents import LlmAgent
    from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    async def run(http: httpx.AsyncClient, streaming: bool) -> list[dict[str, Any]]:
        remote = RemoteA2aAgent(
            name="agentsite",
            description="Answers questions about incidents.",
            agent_card=f"{URL}/a2a/{MODEL}/.well-known/agent-card.json",
            a2a_client_factory=ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)),
        )
        root = LlmAgent(
            name="triage",
            instruction="Hand incident questions to agentsite.",
            model=_adk_openai_model(),
            sub_agents=[remote],
        )
        sessions = InMemorySessionService()
        runner = Runner(app_name="interop", agent=root, session_service=sessions)
        session = await sessions.create_session(app_name="interop", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="What is INC-1042?")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass
        stored = await sessions.get_session(app_name="interop", user_id="u", session_id=session.id)
        assert stored is not None
        # An error ADK recorded (a failed A2A call) shows as a part of its own, for the test's message.
        return [
            {
                "author": event.author,
                "text": part.text or "",
                "thought": bool(part.thought),
                "call": part.function_call.name if part.function_call else None,
                "response": part.function_response.name if part.function_response else None,
            }
            for event in stored.events
            for part in ((event.content.parts if event.content else None) or [])
        ] + [
            {"author": event.author, "error": f"{event.error_code}: {event.error_message}"}
            for event in stored.events
            if event.error_code or event.error_message
        ]

    async def both() -> dict[str, Any]:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
            return {"streamed": await run(http, True), "not_streamed": await run(http, False)}

    return asyncio.run(both())


def adk_serve() -> dict[str, Any]:
    """Serve an ADK agent with `to_a2a` on uvicorn (port: argv[2]) until killed; its model is
    the one at ADK_MODEL_URL. Prints nothing of its own: the test reads its card."""
    import uvicorn
    from google.adk.a2a.utils.agent_to_a2a import to_a2a
    from google.adk.agents import LlmAgent

    port = int(sys.argv[2])
    agent = LlmAgent(
        name="adk_certs",
        description="Knows the certificates of the fleet.",
        instruction="Answer certificate questions.",
        model=_adk_openai_model(),
    )
    uvicorn.run(to_a2a(agent, host="127.0.0.1", port=port), host="127.0.0.1", port=port, log_level="warning")
    return {}


CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "langchain_chat": langchain_chat,
    "langgraph_react": langgraph_react,
    "agents_sdk": agents_sdk,
    "agents_sdk_handoff": agents_sdk_handoff,
    "retried_failure": retried_failure,
    "retried_timeout": retried_timeout,
    "adk_remote_sub_agent": adk_remote_sub_agent,
    "adk_serve": adk_serve,
}

if __name__ == "__main__":
    print(json.dumps(CASES[sys.argv[1]]()))
