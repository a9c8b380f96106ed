"""Issue 18, item 6: the summary gate of a session is kept between its runs.

Each run rebuilt the gate's backlogs from its loaded window at its first write (0.02 s of
30 profiled turns); kept, they advance over the new events only. The jobs asked for must
be the ones a fresh gate per run asks for, also when the summary moves, when another
writer appends between runs, and when a run loads a window that misses events after the
summary's boundary (the gate then rebuilds from what the run loaded, as before).
"""

from __future__ import annotations

from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.runner.persistence import RunWriter
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.summary import (
    EventThreshold,
    InProcessSummaryScheduler,
    SummaryBacklog,
    SummaryEngine,
    SummaryJob,
    SummaryRequest,
    SummaryResult,
)

APP = "gate"


class Summarizer:
    name = "short"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(text=f"summary through {request.events[-1].seq}")


class Recording(InProcessSummaryScheduler):
    """Runs the jobs in process (so summaries move) and records each one asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[str, int]] = []

    async def enqueue(self, job: SummaryJob) -> None:
        self.asked.append((job.filter_key, job.last_seq))
        await super().enqueue(job)


def lookup(q: str) -> str:
    return f"found {q}"


async def _play(
    *,
    turns: int,
    fresh_gate_per_run: bool,
    history_event_limit: int | None = None,
    other_writer_at: int = 0,
    threshold: int = 7,
) -> tuple[list[tuple[str, int]], list[str | None]]:
    """Play `turns` turns of one session (a tool round and an answer each); the jobs asked
    for and the summary text after each turn."""
    service = InMemorySessionService()
    scheduler = Recording(SummaryEngine(summarizer=Summarizer(), checker=EventThreshold(events=threshold)), service)
    agent = LLMAgent(name="agent", model=ScriptedModel(name="scripted"), tools=[FunctionTool(lookup)])
    runner = Runner(
        app=APP,
        agents=[agent],
        session_service=service,
        summary_scheduler=scheduler,
        load_after_summary=True,
        history_event_limit=history_event_limit,
    )
    if fresh_gate_per_run:
        # What every run did before: a gate of its own, built from its loaded window.
        runner._writer.session_gate = lambda session: RunWriter(runner).session_gate(session)  # type: ignore[method-assign]
    session = await service.create_session(app=APP, user_id="alice")
    texts: list[str | None] = []
    for turn in range(1, turns + 1):
        if turn == other_writer_at:
            current = await service.get_session(session.key)
            assert current is not None
            await service.append_events(
                current,
                [
                    Event(author="user", filter_key=APP, message=Message(role="user", content=f"aside {n}"))
                    for n in range(3)
                ],
            )
        assert isinstance(agent.model, ScriptedModel)
        agent.model.extend([ScriptStep.call("lookup", {"q": f"t{turn}"}), ScriptStep.answer(f"answer {turn}")])
        handle = await runner.start(user_id="alice", session_id=session.id, message=f"question {turn}")
        record = await handle.wait()
        assert record.status == "completed"
        await scheduler.join()
        summary = await service.get_summary(session.key, filter_key=APP)
        texts.append(summary.text if summary is not None else None)
    await runner.close()
    return scheduler.asked, texts


@pytest.mark.parametrize(
    "setting",
    [
        {},
        {"other_writer_at": 4},
        # More events due than a run loads: the kept counts run past the loaded window.
        {"history_event_limit": 6, "threshold": 12},
    ],
    ids=["one writer", "another writer between runs", "a window cut before the boundary"],
)
async def test_a_kept_gate_asks_for_the_jobs_a_fresh_gate_per_run_asks_for(setting: dict[str, Any]) -> None:
    kept = await _play(turns=9, fresh_gate_per_run=False, **setting)
    fresh = await _play(turns=9, fresh_gate_per_run=True, **setting)
    assert kept == fresh
    asked, texts = kept
    assert asked, "some job was due"
    assert texts[-1] is not None and len(set(texts)) > 2, "the summary moved more than once"


async def test_a_kept_gate_rebuilds_only_when_the_summary_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    rebuilds: list[int] = []
    rebuild = SummaryBacklog.rebuild.__func__  # type: ignore[attr-defined]  # the classmethod's function

    def counted(cls: type[SummaryBacklog], **kwargs: Any) -> SummaryBacklog:
        rebuilds.append(kwargs["last_seq"])
        return rebuild(cls, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(SummaryBacklog, "rebuild", classmethod(counted))
    _, texts = await _play(turns=9, fresh_gate_per_run=False)
    kept_rebuilds = len(rebuilds)
    rebuilds.clear()
    await _play(turns=9, fresh_gate_per_run=True)
    # A fresh gate rebuilds both keys' backlogs (the run's and the cascade's) in every run;
    # a kept one only when a summary moved.
    assert len(rebuilds) >= 2 * 9
    moves = len({t for t in texts if t is not None})
    assert kept_rebuilds <= 2 * (1 + moves) < len(rebuilds)
