"""Typed extension points (issue 20, item 4) through the Runner API, and the demo's two
extensions (redactor, approval policy) on their own."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from agentsite.demo.extensions import ApprovalPolicy, Redactor, luhn_valid
from runs.core.agents.llm import LLMAgent
from runs.core.callbacks import (
    CallbackContext,
    Callbacks,
    ReplaceCall,
    ReplaceEvent,
    ReplaceRequest,
    ReplaceResponse,
    ReplaceResult,
    Respond,
    StopRun,
    ToolAnswer,
    ToolCallContext,
    Veto,
)
from runs.core.llm.base import ModelRequest
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import RunRecord
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"
CARD = "4111 1111 1111 1111"


class Restarts:
    """A destructive tool that counts the times it really ran."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def restart_service(self, name: str) -> dict[str, Any]:
        """Restart a process.

        Args:
            name: the process
        """
        self.done.append(name)
        return {"restarted": name}


def make(
    model: ScriptedModel,
    *,
    agent_callbacks: Callbacks | None = None,
    runner_callbacks: Callbacks | None = None,
    restarts: Restarts | None = None,
) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    tools = [FunctionTool((restarts or Restarts()).restart_service, name="restart_service")]
    agent = LLMAgent(name="ops", model=model, tools=tools, callbacks=agent_callbacks)
    return Runner(app=APP, agents=[agent], session_service=service, callbacks=runner_callbacks), service


async def ledger(service: InMemorySessionService, session_id: str) -> list[Event]:
    return await service.list_events(SessionKey(app=APP, user_id="alice", session_id=session_id), limit=1000)


async def test_a_before_model_callback_short_circuits_the_model_and_the_ledger_says_so() -> None:
    model = ScriptedModel.of()  # any call would fail: the script is empty

    def canned(context: CallbackContext, request: ModelRequest) -> Respond | None:
        if "opening hours" in request.messages[-1].content:
            return Respond(message=Message(role="assistant", content="We are open 9-17."), note="faq cache")
        return None

    runner, service = make(model, agent_callbacks=Callbacks(before_model=[canned]))
    handle = await runner.start(user_id="alice", message="What are your opening hours?")
    record = await handle.wait()

    assert record.status == "completed" and record.answer == "We are open 9-17."
    assert model.requests == [] and record.model_calls == 0
    answer = next(e for e in await ledger(service, handle.session_id) if e.role == "assistant")
    assert answer.extensions["no_model_call"] is True
    assert answer.extensions["callbacks"] == [
        {"point": "before_model", "callback": "canned", "change": "short_circuit", "note": "faq cache"},
    ]


async def test_runner_callbacks_run_before_the_agents_and_each_sees_the_last_change() -> None:
    model = ScriptedModel.of("ok")
    seen: list[str] = []

    async def runner_side(context: CallbackContext, request: ModelRequest) -> ReplaceRequest:
        seen.append("runner")
        system = Message(role="system", content="Answer in French.")
        return ReplaceRequest(request=replace(request, messages=(*request.messages, system)), note="language")

    def agent_side(context: CallbackContext, request: ModelRequest) -> None:
        seen.append(f"agent saw {request.messages[-1].content!r}")

    runner, service = make(
        model,
        agent_callbacks=Callbacks(before_model=[agent_side]),
        runner_callbacks=Callbacks(before_model=[runner_side]),
    )
    handle = await runner.start(user_id="alice", message="hi")
    await handle.wait()

    assert seen == ["runner", "agent saw 'Answer in French.'"]
    assert model.requests[0].messages[-1].content == "Answer in French."
    answer = next(e for e in await ledger(service, handle.session_id) if e.role == "assistant")
    assert [c["change"] for c in answer.extensions["callbacks"]] == ["request"]


async def test_a_tool_veto_is_the_tools_result_and_is_recorded_in_the_ledger() -> None:
    restarts = Restarts()
    model = ScriptedModel.of(ScriptStep.call("restart_service", {"name": "payments"}, id="c1"), "I need your approval.")

    def no_restarts(context: ToolCallContext, call: ToolCall) -> Veto | None:
        assert context.tool is not None and context.tool.name == "restart_service"
        return Veto(reason="restarts are frozen during the incident")

    runner, service = make(model, agent_callbacks=Callbacks(before_tool=[no_restarts]), restarts=restarts)
    handle = await runner.start(user_id="alice", message="restart payments")
    record = await handle.wait()

    assert record.status == "completed" and restarts.done == []
    result = next(e for e in await ledger(service, handle.session_id) if e.is_tool_result)
    assert result.text == '{"error": "vetoed: restarts are frozen during the incident"}'
    assert result.extensions["tool_error"] is True
    change = result.extensions["callbacks"][0]
    assert (change["point"], change["change"], change["note"]) == (
        "before_tool",
        "veto",
        "restarts are frozen during the incident",
    )
    # The model saw the refusal as the tool's answer.
    assert model.requests[1].messages[-1].content == result.text


async def test_tool_callbacks_can_change_the_call_answer_it_or_change_the_result() -> None:
    restarts = Restarts()
    model = ScriptedModel.of(
        ScriptStep.calls(("restart_service", {"name": "PAYMENTS"}, "c1"), ("restart_service", {"name": "cache"}, "c2")),
        "done",
    )

    def normalize(context: ToolCallContext, call: ToolCall) -> ReplaceCall | ToolAnswer | None:
        if "cache" in call.arguments:
            return ToolAnswer(content='{"restarted": "cache", "simulated": true}', note="dry run")
        return ReplaceCall(call=replace(call, arguments=call.arguments.lower()), note="lower-cased")

    def tag(context: ToolCallContext, call: ToolCall, content: str) -> ReplaceResult:
        return ReplaceResult(content=content + " [checked]", note="tagged")

    runner, service = make(
        model, agent_callbacks=Callbacks(before_tool=[normalize], after_tool=[tag]), restarts=restarts
    )
    handle = await runner.start(user_id="alice", message="restart")
    await handle.wait()

    assert restarts.done == ["payments"]
    results = [e for e in await ledger(service, handle.session_id) if e.is_tool_result]
    assert [r.message.tool_call_id for r in results if r.message] == ["c1", "c2"]
    assert [r.text for r in results] == [
        '{"restarted": "payments"} [checked]',
        '{"restarted": "cache", "simulated": true} [checked]',
    ]
    assert [[c["change"] for c in r.extensions["callbacks"]] for r in results] == [
        ["call", "result"],
        ["short_circuit", "result"],
    ]


async def test_after_model_on_event_before_and_after_run() -> None:
    model = ScriptedModel.of("the answer is 42")
    ended: list[RunRecord] = []

    def shout(context: CallbackContext, message: Message) -> ReplaceResponse:
        return ReplaceResponse(message=replace(message, content=message.content.upper()), note="house style")

    def stamp(context: CallbackContext, event: Event) -> ReplaceEvent | None:
        if event.role == "assistant" and not event.partial:
            return ReplaceEvent(event=replace(event, extensions={**event.extensions, "reviewed": True}), note="review")
        return None

    runner, service = make(
        model,
        agent_callbacks=Callbacks(after_model=[shout]),
        runner_callbacks=Callbacks(on_event=[stamp], after_run=[ended.append]),
    )
    handle = await runner.start(user_id="alice", message="?")
    record = await handle.wait()

    assert record.answer == "THE ANSWER IS 42"
    answer = next(e for e in await ledger(service, handle.session_id) if e.role == "assistant")
    assert answer.extensions["reviewed"] is True
    assert [(c["point"], c["change"]) for c in answer.extensions["callbacks"]] == [
        ("after_model", "response"),
        ("on_event", "event"),
    ]
    assert [r.id for r in ended] == [record.id] and ended[0].status == "completed"


async def test_a_before_run_callback_stops_the_run_without_a_model_call() -> None:
    model = ScriptedModel.of()

    def closed(context: CallbackContext) -> StopRun:
        return StopRun(reason="maintenance window")

    runner, service = make(model, runner_callbacks=Callbacks(before_run=[closed]))
    handle = await runner.start(user_id="alice", message="hi")
    record = await handle.wait()

    assert record.status == "failed" and model.requests == []
    assert record.error is not None and record.error["type"] == "run_stopped"
    assert "maintenance window" in record.error["message"]
    error = next(e for e in await ledger(service, handle.session_id) if e.is_error)
    assert error.extensions["callbacks"][0]["change"] == "stop"


async def test_a_callback_returning_something_unexpected_fails_the_run_visibly() -> None:
    def wrong(context: CallbackContext, request: ModelRequest) -> str:
        return "not a result"

    runner, _ = make(ScriptedModel.of(), agent_callbacks=Callbacks(before_model=[wrong]))  # type: ignore[list-item]  # deliberately wrong
    record = await (await runner.start(user_id="alice", message="hi")).wait()
    assert (
        record.status == "failed" and record.error is not None and "returned 'not a result'" in record.error["message"]
    )


# -- the demo's extensions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        (f"my card is {CARD}, exp 12/29", {"card number": 1}),
        ("card 4111-1111-1111-1111 and 5500 0000 0000 0004", {"card number": 2}),
        ("key sk-proj-abcdefghijklmnop1234 here", {"api key": 1}),
        ("AKIAIOSFODNN7EXAMPLE", {"api key": 1}),
        ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig'", {"bearer token": 1}),
        ('db password=hunter2; api_key: "abc def"', {"secret": 2}),
    ],
)
def test_the_redactor_masks_secrets_and_luhn_valid_card_numbers(text: str, kinds: dict[str, int]) -> None:
    redacted, found = Redactor().redact_text(text)
    assert found == Counter(kinds)
    assert "4111" not in redacted and "hunter2" not in redacted and "sk-proj" not in redacted
    assert "eyJhbGci" not in redacted and "abc def" not in redacted and "AKIA" not in redacted


@pytest.mark.parametrize(
    "text",
    [
        "order 4111 1111 1111 1112 failed",
        "2026-11-14T08:00:00Z",
        "the token expired",
        "call 555 0100 at 9",
        "ticket INC-1042, 1234567890123 bytes",
    ],
)
def test_the_redactor_leaves_other_numbers_and_words_alone(text: str) -> None:
    assert Redactor().redact_text(text) == (text, Counter())


def test_a_text_redacted_again_gets_the_same_masks_and_counts_of_its_own() -> None:
    # Texts are scanned once and remembered (every model call sends the history again):
    # the second answer is the first's, and what a caller does with its counts stays with it.
    text = f"card {CARD} and password=hunter2"
    first, found = Redactor().redact_text(text)
    found["card number"] += 5
    again, found_again = Redactor().redact_text(text)
    assert again == first and "hunter2" not in again
    assert found_again == Counter({"card number": 1, "secret": 1})


@pytest.mark.parametrize(
    ("text", "approved"),
    [
        ("approve restart_service", True),
        ("I approve restart_service for payments", True),
        ("do not approve restart_service", False),
        ("approve it", False),
        ("restart_service approved", False),
    ],
)
def test_what_counts_as_an_approval(text: str, approved: bool) -> None:
    assert ApprovalPolicy.approved(text, "restart_service") is approved


def test_luhn() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")


def test_the_redactor_covers_tool_arguments_and_results_in_a_request() -> None:
    request = ModelRequest(
        messages=(
            Message(role="user", content=f"charge {CARD}"),
            Message(role="assistant", tool_calls=(ToolCall(id="c", name="pay", arguments=f'{{"card": "{CARD}"}}'),)),
            Message(role="tool", content=f'{{"charged": "{CARD}"}}', tool_call_id="c", tool_name="pay"),
        )
    )
    redacted, found = Redactor().redact_request(request)
    assert found == Counter({"card number": 3})
    assert CARD not in repr(redacted)


async def test_the_approval_policy_vetoes_a_destructive_tool_until_the_user_approves_it() -> None:
    restarts = Restarts()
    policy = Callbacks(before_tool=[ApprovalPolicy({"restart_service"})])
    model = ScriptedModel.of(
        ScriptStep.call("restart_service", {"name": "payments"}),
        "Please approve the restart.",
        ScriptStep.call("restart_service", {"name": "payments"}),
        "Restarted.",
    )
    runner, service = make(model, agent_callbacks=policy, restarts=restarts)
    first = await runner.start(user_id="alice", message="restart payments")
    await first.wait()
    assert restarts.done == []
    vetoed = next(e for e in await ledger(service, first.session_id) if e.is_tool_result)
    assert "needs the user's approval" in vetoed.text and "approve restart_service" in vetoed.text
    assert vetoed.extensions["callbacks"][0]["callback"] == "approval_policy"

    second = await runner.start(
        user_id="alice", message="I approve restart_service for payments", session_id=first.session_id
    )
    record = await second.wait()
    assert record.status == "completed" and restarts.done == ["payments"]
    model.assert_consumed()
