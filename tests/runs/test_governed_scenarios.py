"""Issue 18's scenarios end to end: the agent's model is the real `openai` client against the
scripted OpenAI-compatible server, and every assertion is on what that server received.

1. A single run of 60 tool rounds with ~1,000-token results on a 4,096 window never sends a
   request over the window, and the first round's finding is still found through recall.
2. 300 seeded messages (~30k tokens) on a 6,000 window: no request over the window, the
   client's last message verbatim in every request, an early fact recallable.
3. A two-agent chain: the writer sees the researcher's call, result and answer as one
   "For context:" user message, never as its own assistant and tool turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from runs.core.agents.composite import ChainAgent
from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, ContextGovernance, extractive_summarizer
from runs.core.llm.openai_provider import OpenAIModel
from runs.core.runner import Runner
from runs.core.tokens import count_text
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import SummaryEngine
from sessions_app.recall_tools import recall_tools
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

APP = "scenarios"
FINDING = "ROOT-CAUSE-7731 the payments pool ran out of connections at 02:14"
FILLER = (
    "worker {i} line {j}: checkout request {j} waited {ms} ms for a pooled connection; retry scheduled "
    "with backoff, upstream healthy, queue depth {q}."
)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


def governed(window: int) -> ContextGovernance:
    return ContextGovernance(
        summaries=SummaryEngine(summarizer=extractive_summarizer(budget_tokens=400), tokenizer=TIKTOKEN),
        context_window=window,
    )


def model_for(server: ScriptedOpenAIServer, window: int) -> OpenAIModel:
    return OpenAIModel(model="scripted-openai-model", base_url=server.base_url, api_key="test", context_window=window)


def request_tokens(body: Mapping[str, Any]) -> int:
    """What a recorded request weighs: every message's text and call arguments (cl100k) plus
    a few tokens of framing each, and the tool schemas."""
    total = 0
    for message in body["messages"]:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content)
        total += 4 + count_text(content)
        for call in message.get("tool_calls") or []:
            total += count_text(call["function"]["name"]) + count_text(call["function"]["arguments"])
    return total + count_text(json.dumps(body.get("tools") or []))


def log_chunk(i: int) -> str:
    """About 1,000 tokens of a log; chunk 0 carries the finding."""
    lines = [FILLER.format(i=i, j=j, ms=100 + 7 * j + i, q=(i * j) % 97) for j in range(30)]
    if i == 0:
        lines.insert(11, FINDING)
    return "\n".join(lines)


def tool_results(body: Mapping[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in body["messages"] if m["role"] == "tool"]


async def test_a_run_of_sixty_tool_rounds_never_sends_a_request_over_the_window_and_recalls_round_one(
    server: ScriptedOpenAIServer,
) -> None:
    window, rounds = 4096, 60
    assert 900 <= count_text(log_chunk(1)) <= 1100

    def read_log(chunk: int) -> str:
        """Read one chunk of the incident log."""
        return log_chunk(chunk)

    server.script(
        *(ServerStep.calls(("read_log", {"chunk": i})) for i in range(rounds)),
        ServerStep.calls(("session_search", {"query": "ROOT-CAUSE-7731 payments pool"})),
        # The search's top hit is seq 3, round one's result (asserted below): load it exactly.
        ServerStep.calls(("session_load", {"seq": 3, "before": 0, "after": 0})),
        ServerStep.answer("Round one found it: ROOT-CAUSE-7731, the payments pool ran out of connections."),
    )
    service = InMemorySessionService()
    agent = LLMAgent(
        name="support",
        model=model_for(server, window),
        tools=[FunctionTool(read_log), *recall_tools()],
        governance=governed(window),
        max_steps=rounds + 5,
    )
    runner = Runner(app=APP, agents=[agent], session_service=service, services={"recall": InMemoryRecallIndex(service)})
    handle = await runner.start(
        user_id="alice", message="Read the whole incident log and tell me the root cause.", stream=True
    )
    events = [e async for e in handle.events()]
    await runner.close()

    server.assert_consumed()
    assert events[-1].extensions.get("status") == "completed"
    sizes = [request_tokens(body) for body in server.requests]
    assert len(sizes) == rounds + 3
    assert max(sizes) <= window, f"requests over the {window}-token window: {[s for s in sizes if s > window]}"
    # Without governance of the run itself the 60th request would carry ~60k tokens.
    assert sizes[-1] < window and sum(sizes) < rounds * window
    for body in server.requests:  # the active user message, verbatim, in every request
        assert any(
            m["role"] == "user" and m["content"] == "Read the whole incident log and tell me the root cause."
            for m in body["messages"]
        )
    # The search ran over what the run's summaries hide and ranked round one's result first;
    # loading it brought back the raw line.
    search = [r for r in tool_results(server.requests[-2]) if '"query": "ROOT-CAUSE-7731' in r][-1]
    assert '"seq": 3' in search.split('"results"', 1)[1][:400]
    assert any(FINDING in result for result in tool_results(server.requests[-1])), [
        r[:600] for r in tool_results(server.requests[-1])
    ]
    # The stats say the run was governed by intra-run summaries.
    stats = [e.extensions["context"] for e in events if "context" in e.extensions]
    assert any(s["intra_run_summary"] for s in stats)


async def test_three_hundred_seeded_messages_fit_the_window_with_the_last_message_verbatim_and_early_facts_recallable(
    server: ScriptedOpenAIServer,
) -> None:
    window = 6000
    seed: list[Message] = []
    for i in range(150):
        fact = "The staging database listens on port 6432 behind pgbouncer." if i == 1 else ""
        seed.append(Message(role="user", content=f"Note {i}: {fact} " + " ".join(f"item{i}-{j}" for j in range(24))))
        seed.append(Message(role="assistant", content=f"Noted {i}. " + " ".join(f"ack{i}-{j}" for j in range(24))))
    assert 25_000 <= sum(count_text(m.content) for m in seed) <= 40_000
    last = "Given all of that, which port does the staging database listen on?"
    server.script(
        ServerStep.calls(("session_search", {"query": "staging database port"})),
        ServerStep.answer("Port 6432, behind pgbouncer."),
    )
    service = InMemorySessionService()
    agent = LLMAgent(name="support", model=model_for(server, window), tools=recall_tools(), governance=governed(window))
    runner = Runner(app=APP, agents=[agent], session_service=service, services={"recall": InMemoryRecallIndex(service)})
    handle = await runner.start(user_id="alice", message=last, seed=seed, stream=True)
    [e async for e in handle.events()]
    await runner.close()

    server.assert_consumed()
    assert all(request_tokens(body) <= window for body in server.requests)
    for body in server.requests:
        assert [m for m in body["messages"] if m["role"] == "user"][-1]["content"] == last or any(
            m["role"] == "user" and m["content"] == last for m in body["messages"]
        )
    assert any("port 6432" in result for result in tool_results(server.requests[-1]))
    # The seeded messages are earlier turns of the session, not part of this run.
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=1000)
    seeded = [e for e in stored if e.extensions.get("seed")]
    assert len(seeded) == 300
    current = next(e for e in stored if e.message is not None and e.message.content == last)
    assert current.invocation_id not in {e.invocation_id for e in seeded}
    assert len({e.invocation_id for e in seeded}) == 150  # one turn per user message
    assert sum(1 for e in seeded if e.done) == 150  # each seeded turn is a completed request


async def test_a_chain_shows_the_writer_the_researchers_steps_as_one_for_context_message(
    server: ScriptedOpenAIServer,
) -> None:
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"facts about {topic}: certificates expire on 2027-01-09"

    server.script(
        ServerStep.calls(("lookup", {"topic": "tls"})),
        ServerStep.answer("TLS facts gathered."),
        ServerStep.answer("Report: the certificates expire on 2027-01-09."),
    )
    chain = ChainAgent(
        name="pipeline",
        agents=[
            LLMAgent(name="research", model=model_for(server, 8192), tools=[FunctionTool(lookup)]),
            LLMAgent(name="write", model=model_for(server, 8192)),
        ],
    )
    runner = Runner(app=APP, agents=[chain], session_service=InMemorySessionService())
    handle = await runner.start(user_id="alice", message="Write a TLS report.", stream=True)
    [e async for e in handle.events()]
    await runner.close()

    server.assert_consumed()
    writer = server.requests[-1]["messages"]
    assert [m["role"] for m in writer] == ["user", "user"]
    assert writer[0]["content"] == "Write a TLS report."
    context = writer[1]["content"].splitlines()
    assert context[0] == 'For context: [research] called tool `lookup` with arguments {"topic": "tls"}.'
    assert context[1].startswith("For context: [research] tool `lookup`") and "2027-01-09" in context[1]
    assert context[2] == "For context: [research] said: TLS facts gathered."


class FailingSummarizer:
    """A summarizer whose model is down: every summary fails."""

    name = "failing"

    async def summarize(self, request: Any) -> Any:
        raise RuntimeError("summary model unavailable")


async def test_a_summary_that_fails_inside_a_run_does_not_fail_it_and_the_request_still_fits(
    server: ScriptedOpenAIServer,
) -> None:
    window, rounds = 4096, 12

    def read_log(chunk: int) -> str:
        """Read one chunk of the incident log."""
        return log_chunk(chunk)

    server.script(*(ServerStep.calls(("read_log", {"chunk": i})) for i in range(rounds)), ServerStep.answer("Done."))
    governance = ContextGovernance(summaries=SummaryEngine(summarizer=FailingSummarizer(), tokenizer=TIKTOKEN))
    agent = LLMAgent(
        name="support",
        model=model_for(server, window),
        tools=[FunctionTool(read_log)],
        governance=governance,
        max_steps=rounds + 2,
    )
    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[agent], session_service=service)
    handle = await runner.start(user_id="alice", message="Read the log.", stream=True)
    events = [e async for e in handle.events()]
    await runner.close()

    server.assert_consumed()
    assert events[-1].extensions.get("status") == "completed"
    assert all(request_tokens(body) <= window for body in server.requests)
    precall = [e.extensions["context"]["precall"] for e in events if (e.extensions.get("context") or {}).get("precall")]
    failed = [p for p in precall if p["summary_reason"] == "error"]
    assert failed and all(p["status"] == "not_advanced" for p in failed)
    assert all(p["fallback"] in ("placeholders", "truncated") and p["tokens_after"] < p["threshold"] for p in failed)
    # Nothing was lost: every round's result is in the ledger, whole.
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=1000)
    assert [e.message.content for e in stored if e.message is not None and e.message.role == "tool"] == [
        log_chunk(i) for i in range(rounds)
    ]
