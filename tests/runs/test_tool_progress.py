"""Tool progress (issue 21): `ToolContext.report_progress`, the demo's fleet scan, its cancel,
and the CUSTOM `agentsite.tool.progress` events of the AG-UI stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentsite.demo.agents import build_support_agent
from agentsite.demo.tools import SCAN_SECONDS_ENV, known_hosts
from runs.core.agents.llm import LLMAgent
from runs.core.llm.base import Model
from runs.core.llm.offline import OfflineModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import InMemoryRunStore
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool
from runs.core.tools.progress import OBJECT_TOOL_PROGRESS, ToolProgress
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from tests.runs.test_agui_endpoint import post, read_all, run_input

APP = "t"
FLEET_QUESTION = "Scan the whole fleet's certificates"
STEPS = len(known_hosts()) * 4  # four checks per host


def make_runner(agent: LLMAgent) -> Runner:
    return Runner(app=APP, agents=[agent], session_service=InMemorySessionService(), run_store=InMemoryRunStore())


def reports(events: list[Event]) -> list[ToolProgress]:
    return [p for e in events if (p := ToolProgress.from_event(e)) is not None]


async def test_the_offline_planner_scans_the_fleet_and_progress_arrives_in_order_before_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SCAN_SECONDS_ENV, "0.6")  # 50 ms a step: past the step-grouping wait
    runner = make_runner(build_support_agent(OfflineModel()))
    try:
        events = [e async for e in runner.run(user_id="alice", message=FLEET_QUESTION)]
    finally:
        await runner.close()

    call = next(e for e in events if e.is_tool_call)
    assert [c.name for c in call.message.tool_calls] == ["scan_fleet"]  # type: ignore[union-attr]
    call_id = call.message.tool_calls[0].id  # type: ignore[union-attr]
    progress = reports(events)
    assert {p.tool_call_id for p in progress} == {call_id} and {p.tool_name for p in progress} == {"scan_fleet"}
    done = [p.done for p in progress]
    assert done == sorted(done) and done[-1] == STEPS and {p.total for p in progress} == {STEPS}
    assert progress[-1].note == f"{len(known_hosts())}/{len(known_hosts())} hosts scanned"
    # Live only, between the call and its result; the ledger holds none of them.
    positions = [i for i, e in enumerate(events) if e.object == OBJECT_TOOL_PROGRESS]
    result_at = next(i for i, e in enumerate(events) if e.is_tool_result)
    assert events.index(call) < positions[0] and positions[-1] < result_at
    assert all(e.partial and e.seq is None for e in events if e.object == OBJECT_TOOL_PROGRESS)
    result = events[result_at]
    assert '"hosts_scanned": 3' in result.text and "payments.internal.example.com" in result.text
    assert events[-1].is_runner_completion and events[-1].extensions["status"] == "completed"


async def test_progress_is_never_written_to_the_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCAN_SECONDS_ENV, "0.3")
    runner = make_runner(build_support_agent(OfflineModel()))
    try:
        handle = await runner.start(user_id="alice", message=FLEET_QUESTION, stream=True)
        streamed = [e async for e in handle.events()]
        ledger = handle.invocation.session.events
    finally:
        await runner.close()

    assert reports(streamed)
    assert [e for e in ledger if e.object == OBJECT_TOOL_PROGRESS] == []
    assert any(e.is_tool_result and e.message.tool_name == "scan_fleet" for e in ledger)  # type: ignore[union-attr]


async def test_a_cancel_mid_scan_ends_the_run_cancelled_and_stops_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCAN_SECONDS_ENV, "60")  # five seconds a step: only a cancel ends it in time
    monkeypatch.setenv("AGENTSITE_MEMORY_AUTO", "0")
    model = ScriptedModel.of(
        ScriptStep.call("scan_fleet", {"scope": "fleet"}, id="call_scan"), ScriptStep.answer("done")
    )
    runner = make_runner(build_support_agent(model))
    events: list[Event] = []
    try:
        handle = await runner.start(user_id="alice", message="scan", stream=True)

        async def until_cancelled() -> None:
            async for event in handle.events():
                events.append(event)
                if event.object == OBJECT_TOOL_PROGRESS:
                    assert runner.cancel(handle.run_id) is True

        # A guard, not a measurement: uncancelled, the scan would take a minute.
        await asyncio.wait_for(until_cancelled(), 10)
        record = await asyncio.wait_for(handle.wait(), 10)
    finally:
        await runner.close()

    assert record.status == "cancelled"
    assert events[-1].is_runner_completion and events[-1].extensions["status"] == "cancelled"
    # The first report (0 of 12) went out; the cancel came before any other.
    assert [p.done for p in reports(events)] == [0]
    assert not any(e.is_tool_result for e in events)


async def test_a_sync_tool_reports_from_its_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSITE_MEMORY_AUTO", "0")

    def crunch(ctx: ToolContext, parts: int) -> str:
        """Crunch some parts.

        Args:
            parts: How many parts.
        """
        import time

        for i in range(1, parts + 1):
            time.sleep(0.03)  # blocking work, as a sync tool does in its thread
            ctx.report_progress(i, parts, f"part {i}")
        return "crunched"

    model = ScriptedModel.of(ScriptStep.call("crunch", {"parts": 3}, id="call_c"), ScriptStep.answer("ok"))
    runner = make_runner(LLMAgent(name="support", model=model, tools=[FunctionTool(crunch)]))
    try:
        events = [e async for e in runner.run(user_id="alice", message="crunch")]
    finally:
        await runner.close()

    assert [(p.done, p.total, p.note) for p in reports(events)] == [
        (1, 3, "part 1"),
        (2, 3, "part 2"),
        (3, 3, "part 3"),
    ]


def test_report_progress_outside_a_run_is_a_no_op_and_bad_values_are_refused() -> None:
    from sessions_app.core.session import Session

    ctx = ToolContext(
        session=Session(id="s", app=APP, user_id="alice"),
        invocation_id="i",
        tool_call_id="c",
        agent_name="a",
        cancel_event=asyncio.Event(),
        tool_name="t",
    )
    assert ctx.report_progress(1, 2, "half") is False
    with pytest.raises(ValueError, match="done <= total"):
        ctx.report_progress(3, 2)
    with pytest.raises(ValueError):
        ctx.report_progress(-1)
    with pytest.raises(ValueError, match="finite"):
        ctx.report_progress(float("nan"), 2)


# -- AG-UI ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_ag_ui_stream_carries_progress_as_custom_events_between_call_and_result(
    alice: Any,
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asgiref.sync import sync_to_async
    from rest_framework.authtoken.models import Token

    monkeypatch.setenv(SCAN_SECONDS_ENV, "0.6")
    monkeypatch.setenv("AGENTSITE_MEMORY_AUTO", "0")
    token = (await sync_to_async(Token.objects.get_or_create)(user=alice))[0].key
    model = ScriptedModel.of(ScriptStep.call("scan_fleet", {"scope": "fleet"}, id="call_scan"), ScriptStep.answer("ok"))
    use_model(model)
    response = await post("/agui/support", run_input("thread-p"), token)
    assert response.status_code == 200
    events = await read_all(response)

    kinds = [e["type"] for e in events]
    progress = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "agentsite.tool.progress"]
    assert progress, kinds
    assert {p["value"]["toolCallId"] for p in progress} == {"call_scan"}
    assert {p["value"]["toolName"] for p in progress} == {"scan_fleet"}
    done = [p["value"]["done"] for p in progress]
    assert done == sorted(done) and done[-1] == STEPS and progress[-1]["value"]["total"] == STEPS
    first, last = events.index(progress[0]), events.index(progress[-1])
    assert kinds.index("TOOL_CALL_END") < first and last < kinds.index("TOOL_CALL_RESULT")
    assert kinds[-1] == "RUN_FINISHED"


# -- the README's cancel step -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_readme_cancel_step_cancels_the_offline_fleet_scan_over_rest(
    alice_api: Any,
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setenv(SCAN_SECONDS_ENV, "60")
    monkeypatch.setenv("AGENTSITE_MEMORY_AUTO", "0")
    use_model(OfflineModel())
    run = alice_api.post("/api/runs/", {"message": FLEET_QUESTION}, format="json").json()
    assert run["status"] == "running", run

    def ledger() -> list[dict[str, Any]]:
        return alice_api.get(f"/api/sessions/{run['session_id']}/events/?after_seq=0").json()["results"]

    for _ in range(200):  # until the scan's call is in the ledger: the tool is running
        if any(call["name"] == "scan_fleet" for e in ledger() for call in (e.get("tool_calls") or [])):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the scan never started: {ledger()}")
    cancelled = alice_api.post(f"/api/runs/{run['id']}/cancel/")
    assert cancelled.status_code == 202, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    assert alice_api.get(f"/api/runs/{run['id']}/").json()["status"] == "cancelled"
    events = ledger()
    assert events[-1]["object"] == "runner.completion"
    assert not any(e["role"] == "tool" for e in events)  # the scan never finished
    assert not any(e["object"] == OBJECT_TOOL_PROGRESS for e in events)


def test_the_translator_drops_progress_before_its_call_and_after_its_result() -> None:
    from runs.core.protocols.agui import TOOL_PROGRESS_EVENT, AguiTranslator
    from runs.core.tools.progress import progress_event
    from sessions_app.core.events import Message, ToolCall

    def report(done: int) -> Event:
        progress = ToolProgress(tool_call_id="c1", tool_name="scan_fleet", done=done, total=4, note=f"{done}/4")
        return progress_event(progress, author="support", invocation_id="i").replace(request_id="r")

    call = Event(
        author="support",
        request_id="r",
        message=Message(
            role="assistant",
            tool_calls=(ToolCall(id="c1", name="scan_fleet", arguments="{}"),),
        ),
    )
    result = Event(
        author="support",
        request_id="r",
        message=Message(
            role="tool",
            content="{}",
            tool_call_id="c1",
            tool_name="scan_fleet",
        ),
    )
    translator = AguiTranslator(thread_id="s")
    out = [
        item
        for event in (report(0), call, report(1), report(2), result, report(3))
        for item in translator.translate(event, run_id="r")
    ]

    custom = [item for item in out if item.type == "CUSTOM" and item.name == TOOL_PROGRESS_EVENT]
    assert [item.value for item in custom] == [
        {"toolCallId": "c1", "toolName": "scan_fleet", "done": 1, "total": 4, "note": "1/4"},
        {"toolCallId": "c1", "toolName": "scan_fleet", "done": 2, "total": 4, "note": "2/4"},
    ]
    kinds = [item.type for item in out]
    assert kinds.index("TOOL_CALL_END") < out.index(custom[0]) and out.index(custom[-1]) < kinds.index(
        "TOOL_CALL_RESULT"
    )
    assert all((item.metadata or {}).get("seq") is None for item in custom)
    assert '"done":1,' in custom[0].model_dump_json(by_alias=True)  # an int stays an int on the wire
