"""A2A steering (issue 19, item 1; SPEC 1.5): a message on a working task (its `taskId`, or
its `contextId`) is queued into the task's run instead of starting another; the answer is
the same task, still working; the run's next model step takes the message; the task ends
once. Driven by the `a2a-sdk` client (1.0) and raw JSON-RPC (the 0.3 names) against the
ASGI application, with the scripted model slowed down."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from a2a.client import Client
from a2a.types.a2a_pb2 import StreamResponse, Task, TaskState
from asgiref.sync import sync_to_async
from django.conf import settings
from google.protobuf.json_format import MessageToDict, ParseDict

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.steering import CONSUMED, QUEUED
from runs.fanout import RunUnreachableError
from runs.models import A2ATask
from sessions_app.backends import DjangoSessionService
from sessions_app.core.session import SessionKey
from tests.runs.test_a2a_citizen import alice_token, connected, no_memory, text_of, user_message  # noqa: F401
from tests.security.support import client, rpc

pytestmark = pytest.mark.django_db(transaction=True)

WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED
ANSWER = "INC-1042 and INC-1187 are open."


def slow_tool_step() -> ScriptStep:
    """A model step that talks for a while (about two seconds) before it calls a tool."""
    return dataclasses.replace(
        ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_1"),
        text="Let me look that ticket up. " * 4,
        chunk_size=4,
        delay_s=0.08,
    )


class FirstStream:
    """The first message's task, sent in the background. The ASGI transport hands a stream
    over only once it has ended, so the run is watched through the task store instead."""

    def __init__(self, sdk: Client, text: str, model: ScriptedModel) -> None:
        self.responses: list[StreamResponse] = []
        self.task_id = ""
        self.context_id = ""
        self.model = model
        self.done = asyncio.create_task(self._read(sdk, text))

    async def _read(self, sdk: Client, text: str) -> None:
        async for response in sdk.send_message(user_message(text)):
            self.responses.append(response)

    async def started(self) -> None:
        """Wait until the task is working on its run and the model's first step streams."""
        for _ in range(400):
            row = await sync_to_async(self._working_row)()
            if row is not None and self.model.requests:
                self.task_id, self.context_id = row
                return
            assert not self.done.done(), "the first task ended before it could be steered"
            await asyncio.sleep(0.025)
        raise AssertionError("the first task never started working")

    @staticmethod
    def _working_row() -> tuple[str, str] | None:
        for task_id, context_id, payload in A2ATask.objects.filter(state="TASK_STATE_WORKING").values_list(
            "id", "context_id", "payload"
        ):
            if (payload.get("metadata") or {}).get("agentsite_run_id"):
                return task_id, context_id
        return None

    def states(self) -> list[int]:
        return [r.status_update.status.state for r in self.responses if r.HasField("status_update")]


async def ledger(alice: Any, session_id: str) -> list[Any]:
    session = await DjangoSessionService().get_session(
        SessionKey(app=settings.AGENTSITE_APP, user_id=str(alice.pk), session_id=session_id)
    )
    assert session is not None
    return list(session.events)


def assert_steered(model: ScriptedModel, events: list[Any], text: str) -> None:
    """The model's next request, in the same run, ended on the queued message; the ledger
    holds it once, marked consumed, in that run; the run answered once."""
    assert len(model.requests) == 2  # one run: the tool step, then the answer
    assert model.requests[1].messages[-1].content == text
    assert model.requests[1].messages[-2].role == "tool"
    queued = [e for e in events if e.extensions.get(QUEUED)]
    assert [(e.extensions[QUEUED], e.message.content) for e in queued] == [(CONSUMED, text)]
    first_user = next(e for e in events if e.message is not None and e.message.role == "user")
    assert queued[0].invocation_id == first_user.invocation_id
    answers = [
        e for e in events if e.message is not None and e.message.role == "assistant" and e.message.content == ANSWER
    ]
    assert len(answers) == 1


async def test_a_message_on_a_working_task_is_queued_into_its_run(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    model = ScriptedModel.of(slow_tool_step(), ANSWER)
    use_model(model)
    async with (
        connected(alice_token, "support", streaming=True) as streaming,
        connected(alice_token, "support") as sending,
    ):
        first = FirstStream(streaming, "Is INC-1042 open?", model)
        await first.started()
        [steered] = [r async for r in sending.send_message(user_message("and INC-1187?", task_id=first.task_id))]
        # The same task, still working: no second task, no second run.
        assert steered.task.id == first.task_id and steered.task.status.state == WORKING
        await asyncio.wait_for(first.done, 20)
    assert first.states()[-1] == COMPLETED
    [artifact] = [r.artifact_update for r in first.responses if r.HasField("artifact_update")]
    assert text_of(artifact.artifact.parts) == ANSWER
    assert_steered(model, await ledger(alice, first.context_id), "and INC-1187?")


async def test_a_streamed_message_on_the_context_follows_the_steered_task_to_its_end(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    model = ScriptedModel.of(slow_tool_step(), ANSWER)
    use_model(model)
    async with (
        connected(alice_token, "support", streaming=True) as streaming,
        connected(alice_token, "support", streaming=True) as second,
    ):
        first = FirstStream(streaming, "Is INC-1042 open?", model)
        await first.started()
        follow = [r async for r in second.send_message(user_message("and INC-1187?", context_id=first.context_id))]
        await asyncio.wait_for(first.done, 20)
    assert follow[0].task.id == first.task_id and follow[0].task.status.state == WORKING
    states = [r.status_update.status.state for r in follow if r.HasField("status_update")]
    assert states[-1] == COMPLETED and states.count(COMPLETED) == 1
    assert first.states()[-1] == COMPLETED
    assert_steered(model, await ledger(alice, first.context_id), "and INC-1187?")


@pytest.mark.parametrize("method", ["message/send", "message/stream"])
async def test_the_0_3_names_steer_a_working_task(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
    method: str,
) -> None:
    model = ScriptedModel.of(slow_tool_step(), ANSWER)
    use_model(model)
    async with connected(alice_token, "support", streaming=True) as streaming, client(alice_token) as http:
        first = FirstStream(streaming, "Is INC-1042 open?", model)
        await first.started()
        message = {
            "kind": "message",
            "role": "user",
            "messageId": "m-steer",
            "taskId": first.task_id,
            "parts": [{"kind": "text", "text": "and INC-1187?"}],
        }
        response = await http.post(
            "/a2a/support", json=rpc(method, {"message": message}), headers={"A2A-Version": "0.3"}
        )
        assert response.status_code == 200, response.text
        if method == "message/send":
            result = response.json()["result"]
        else:
            first_data = next(line for line in response.text.splitlines() if line.startswith("data:"))
            result = json.loads(first_data[len("data:") :])["result"]
        assert result["id"] == first.task_id and result["status"]["state"] == "working", result
        await asyncio.wait_for(first.done, 20)
    assert first.states()[-1] == COMPLETED
    assert_steered(model, await ledger(alice, first.context_id), "and INC-1187?")


async def steer_raw(http: Any, task_id: str, text: str) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": f"m-{text}", "taskId": task_id, "parts": [{"text": text}]}
    response = await http.post(
        "/a2a/support", json=rpc("SendMessage", {"message": message}), headers={"A2A-Version": "1.0"}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_full_queue_is_a_json_rpc_error_naming_the_limit(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_MAX_QUEUED_MESSAGES = 1
    model = ScriptedModel.of(slow_tool_step(), ANSWER, "Noted.")
    use_model(model)
    async with connected(alice_token, "support", streaming=True) as streaming, client(alice_token) as http:
        first = FirstStream(streaming, "Is INC-1042 open?", model)
        await first.started()
        assert MessageToDict(await_task(await steer_raw(http, first.task_id, "and INC-1187?")))  # queued
        refused = await steer_raw(http, first.task_id, "and INC-1203?")
        await asyncio.wait_for(first.done, 20)
    error = refused["error"]
    assert error["code"] == -32600 and "1 queued messages, the limit" in error["message"]
    assert error_info(error) == {"code": "queue_full", "taskId": first.task_id, "limit": 1}


def error_info(error: dict[str, Any]) -> dict[str, Any]:
    """The details of a 1.0 JSON-RPC error (a google.rpc.ErrorInfo's metadata)."""
    [info] = error["data"]
    assert info["reason"] and info["domain"] == "a2a-protocol.org"
    metadata: dict[str, Any] = info["metadata"]
    return metadata


def await_task(body: dict[str, Any]) -> Any:
    """The task a 1.0 SendMessage answered, checked to be working."""
    assert "result" in body, body
    task = ParseDict(body["result"]["task"], Task(), ignore_unknown_fields=True)
    assert task.status.state == WORKING
    return task


async def test_an_unreachable_run_is_a_json_rpc_error(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unreachable(runner: Any, run_id: str, message: str, **_: Any) -> Any:
        raise RunUnreachableError(run_id)  # the run's process did not answer in time

    model = ScriptedModel.of(slow_tool_step(), ANSWER)
    use_model(model)
    monkeypatch.setattr("runs.surfaces.a2a.server.request_enqueue", unreachable)
    async with connected(alice_token, "support", streaming=True) as streaming, client(alice_token) as http:
        first = FirstStream(streaming, "Is INC-1042 open?", model)
        await first.started()
        refused = await steer_raw(http, first.task_id, "and INC-1187?")
        await asyncio.wait_for(first.done, 20)
    error = refused["error"]
    assert error["code"] == -32603 and "did not answer" in error["message"]
    assert error_info(error) == {"code": "run_unreachable", "taskId": first.task_id}


async def test_a_message_on_an_ended_task_is_refused_as_before(
    alice: Any,
    alice_token: str,  # noqa: F811
    no_memory: Any,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    use_model(ScriptedModel.of("Done."))
    async with connected(alice_token, "support") as sdk, client(alice_token) as http:
        [done] = [r async for r in sdk.send_message(user_message("hi"))]
        assert done.task.status.state == COMPLETED
        refused = await steer_raw(http, done.task.id, "one more thing")
    assert "terminal state" in refused["error"]["message"]
