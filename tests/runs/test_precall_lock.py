"""SPEC 3.3.1: the summary lock wait before a model call is bounded, and a request that then
goes out without its summary is still fitted to the window (issue 26)."""

from __future__ import annotations

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, ContextGovernance
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import SummaryEngine, SummaryRequest, SummaryResult

APP = "t"
WINDOW = 4096
ROUNDS = 10


class HeldLock:
    """The summary lock of another summariser that never lets go: every wait runs out.
    Records the bound each waiter asked for (no real waiting, so no timing in the test)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        self.waits.append(wait_s)
        return None

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        raise AssertionError("never acquired")


class Summarizer:
    name = "scripted"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="SUMMARY")


def read_log(chunk: int) -> str:
    """Read one chunk of the incident log.

    Args:
        chunk: the chunk number
    """
    return "\n".join(
        f"chunk {chunk} line {j}: upstream timeout talking to payments after {100 + j} ms" for j in range(60)
    )


def test_spec_3_3_1_the_pre_call_lock_wait_defaults_to_5_seconds() -> None:
    assert ContextGovernance().sync_lock_wait_s == 5.0


async def test_spec_3_3_1_a_busy_summary_lock_sends_the_request_fitted_and_says_so() -> None:
    lock, summarizer = HeldLock(), Summarizer()
    governance = ContextGovernance(
        summaries=SummaryEngine(summarizer=summarizer, tokenizer=TIKTOKEN, lock=lock),
        context_window=WINDOW,
    )
    model = ScriptedModel.of(
        *(ScriptStep.call("read_log", {"chunk": i}) for i in range(ROUNDS)),
        "Done.",
        context_window=WINDOW,
    )
    agent = LLMAgent(
        name="support",
        model=model,
        tools=[FunctionTool(read_log)],
        governance=governance,
        max_steps=ROUNDS + 2,
    )
    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[agent], session_service=service)
    handle = await runner.start(user_id="alice", message="Read the log.", stream=True)
    events = [e async for e in handle.events()]
    await runner.close()

    model.assert_consumed()
    assert events[-1].extensions.get("status") == "completed"
    precall = [e.extensions["context"]["precall"] for e in events if (e.extensions.get("context") or {}).get("precall")]
    busy = [p for p in precall if p["lock_timeout"]]
    assert busy, precall
    # Every pre-call wait was bounded at the default 5 s, and no summary was written.
    assert lock.waits and set(lock.waits) == {5.0}
    assert summarizer.requests == []
    for report in busy:
        assert report["status"] == "not_advanced" and report["summary_reason"] == "busy"
        assert report["fallback"] in ("placeholders", "truncated")
        assert report["tokens_before"] >= report["threshold"] > report["tokens_after"]
    assert all(not p["lock_timeout"] for p in precall if p not in busy)
    # Nothing was lost: every round's result is in the ledger, whole.
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=1000)
    assert [e.message.content for e in stored if e.message is not None and e.message.role == "tool"] == [
        read_log(i) for i in range(ROUNDS)
    ]
