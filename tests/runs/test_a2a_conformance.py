"""A2A conformance (issue 27), through the public HTTP surface as the compatibility kit
(a2aproject/a2a-tck) drives it: discovery at the host root, strict params, method names of
the caller's protocol version, each version's card in its own shape, and the conformance
test agent whose tasks stay live."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from tests.security.support import a2a, a2a_message, client, post_json, rpc
from tests.support.waiting import polled

pytestmark = pytest.mark.django_db(transaction=True)

V1 = {"A2A-Version": "1.0"}
V03 = {"A2A-Version": "0.3"}


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def conformance(settings: Any) -> Any:
    settings.AGENTSITE_A2A_CONFORMANCE_AGENT = True
    settings.AGENTSITE_A2A_CONFORMANCE_HOLD_S = 2
    return settings


async def get(path: str, **headers: str) -> Any:
    async with client(**headers) as http:
        return await http.get(path)


async def listed_tasks(token: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = (await a2a("conformance", rpc("ListTasks", {}), token)).json()["result"]["tasks"]
    return tasks


async def task_started(token: str) -> list[dict[str, Any]]:
    """The tasks listed once the streamed message's task has left the submitted state."""
    return await polled(
        lambda: listed_tasks(token),
        lambda tasks: tasks and tasks[0]["status"]["state"] != "TASK_STATE_SUBMITTED",
        "the streamed message's task started",
    )


def error_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text[:300])
    body = response.json()
    assert "result" not in body, body
    return body["error"]


# -- 1. discovery at the host root ------------------------------------------------------------


async def test_the_host_root_serves_the_default_agents_card_with_its_endpoint() -> None:
    response = await get("/.well-known/agent-card.json", **V1)

    assert response.status_code == 200, response.text[:300]
    card = response.json()
    assert card["name"] == "support"
    assert {i["url"] for i in card["supportedInterfaces"]} == {"http://testserver/a2a/support"}


async def test_the_root_agent_is_a_setting(settings: Any) -> None:
    settings.AGENTSITE_A2A_ROOT_AGENT = "troubleshoot"

    card = (await get("/.well-known/agent-card.json", **V1)).json()

    assert card["name"] == "troubleshoot"


async def test_the_a2a_directory_lists_every_agent_with_its_card_and_the_root() -> None:
    response = await get("/a2a/")

    assert response.status_code == 200, response.text[:300]
    listing = response.json()
    by_name = {agent["name"]: agent for agent in listing["agents"]}
    assert {"support", "troubleshoot"} <= set(by_name)
    assert by_name["support"]["agentCard"] == "http://testserver/a2a/support/.well-known/agent-card.json"
    assert listing["rootAgent"] == "support"
    assert listing["rootAgentCard"] == "http://testserver/.well-known/agent-card.json"
    listed = await get("/a2a/troubleshoot/.well-known/agent-card.json", **V1)
    assert listed.json()["name"] == "troubleshoot"


# -- 2. params are validated before the SDK sees them ----------------------------------------


async def test_list_tasks_with_an_invalid_status_is_refused_naming_the_field(alice_token: str) -> None:
    error = error_of(await a2a("support", rpc("ListTasks", {"status": "INVALID_STATUS"}), alice_token))

    assert error["code"] == -32602, error
    assert "params.status" in error["message"] and "INVALID_STATUS" in error["message"]


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("ListTasks", {"bogusField": "x"}, "params.bogusField"),
        ("GetTask", {"id": "t1", "bogusField": 1}, "params.bogusField"),
        ("CancelTask", {"id": "t1", "bogusField": 1}, "params.bogusField"),
        ("SubscribeToTask", {"id": "t1", "bogusField": 1}, "params.bogusField"),
        ("SendMessage", {**a2a_message("hi"), "bogusField": 1}, "params.bogusField"),
        (
            "SendMessage",
            {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi", "bogus": 1}]}},
            "params.message.parts[0].bogus",
        ),
        (
            "SendMessage",
            {"message": {"role": "ROLE_NOBODY", "messageId": "m1", "parts": [{"text": "hi"}]}},
            "params.message.role",
        ),
    ],
)
async def test_unknown_fields_and_enum_values_answer_invalid_params_naming_the_field(
    alice_token: str,
    use_model: Callable[[Model], None],
    method: str,
    params: dict[str, Any],
    field: str,
) -> None:
    use_model(ScriptedModel.of())  # nothing may reach the model

    error = error_of(await a2a("support", rpc(method, params, id="r7"), alice_token))

    assert error["code"] == -32602, error
    assert error["data"][0]["metadata"]["field"] == field and field in error["message"], error


async def test_unknown_params_of_a_0_3_method_are_refused(alice_token: str, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of())
    params = {"id": "t1", "bogusField": 1}

    response = await post_json("/a2a/support", rpc("tasks/get", params), alice_token)

    error = error_of(response)
    assert error["code"] == -32602 and "params.bogusField" in error["message"], error


async def test_the_error_answers_the_requests_id(alice_token: str) -> None:
    body = (await a2a("support", rpc("ListTasks", {"status": "NOPE"}, id="abc"), alice_token)).json()

    assert body["id"] == "abc" and body["error"]["code"] == -32602, body


# -- 3. method names of the caller's protocol version ----------------------------------------


@pytest.mark.parametrize(("method", "renamed"), [("message/send", "SendMessage"), ("tasks/get", "GetTask")])
async def test_a_0_3_method_under_a2a_version_1_0_says_which_version_it_belongs_to(
    alice_token: str,
    method: str,
    renamed: str,
) -> None:
    params = a2a_message("hi") if method == "message/send" else {"id": "t1"}

    error = error_of(await a2a("support", rpc(method, params), alice_token))

    assert error["code"] == -32601, error
    assert "0.3" in error["message"] and renamed in error["message"], error


async def test_a_0_3_name_is_served_without_the_header_and_refused_under_1_0(
    alice_token: str,
    use_model: Callable[[Model], None],
) -> None:
    use_model(ScriptedModel.of())
    body = rpc("tasks/get", {"id": "unknown-task"})

    served = await post_json("/a2a/support", body, alice_token)
    refused = await a2a("support", body, alice_token)

    assert served.json()["error"]["code"] == -32001, served.text[:300]  # task not found: served
    assert refused.json()["error"]["code"] == -32601, refused.text[:300]


# -- 4. each version's card in its own shape --------------------------------------------------


async def test_the_1_0_card_has_no_0_3_leftovers() -> None:
    card = (await get("/a2a/support/.well-known/agent-card.json", **V1)).json()

    for leftover in ("url", "preferredTransport", "protocolVersion", "additionalInterfaces", "security"):
        assert leftover not in card, leftover
    scheme = card["securitySchemes"]["bearer"]
    assert set(scheme) == {"httpAuthSecurityScheme"}, scheme
    assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}


async def test_the_0_3_card_is_a_0_3_card() -> None:
    card = (await get("/.well-known/agent-card.json", **V03)).json()

    assert card["protocolVersion"] == "0.3"
    assert card["url"] == "http://testserver/a2a/support" and card["preferredTransport"] == "JSONRPC"
    assert "supportedInterfaces" not in card
    assert card["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "Bearer",
        "description": card["securitySchemes"]["bearer"]["description"],
    }


async def test_without_a_version_header_the_card_is_a_1_0_card_and_says_it_varies() -> None:
    response = await get("/a2a/support/.well-known/agent-card.json")

    card = response.json()
    assert card["supportedInterfaces"] and "url" not in card and "protocolVersion" not in card
    assert response.headers["Vary"] == "A2A-Version"


# -- 5. the conformance test agent ------------------------------------------------------------


async def test_the_conformance_agent_is_off_by_default(alice_token: str) -> None:
    card = await get("/a2a/conformance/.well-known/agent-card.json", **V1)
    send = await a2a("conformance", rpc("SendMessage", a2a_message("hi")), alice_token)

    assert card.status_code == 404 and send.status_code == 404
    assert "conformance" not in {a["name"] for a in (await get("/a2a/")).json()["agents"]}


async def test_a_blocking_send_to_the_conformance_agent_returns_a_live_task_that_can_be_cancelled(
    conformance: Any,
    alice_token: str,
) -> None:
    sent = await a2a("conformance", rpc("SendMessage", a2a_message("hi")), alice_token)
    task = sent.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task

    got = await a2a("conformance", rpc("GetTask", {"id": task["id"]}), alice_token)
    cancelled = await a2a("conformance", rpc("CancelTask", {"id": task["id"]}), alice_token)

    assert got.json()["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert cancelled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled.text[:300]


async def test_a_follow_up_message_answers_a_live_conformance_task(conformance: Any, alice_token: str) -> None:
    task = (await a2a("conformance", rpc("SendMessage", a2a_message("first")), alice_token)).json()["result"]["task"]
    follow_up = a2a_message("second", context_id=task["contextId"], message_id="m2")
    follow_up["message"]["taskId"] = task["id"]

    answered = (await a2a("conformance", rpc("SendMessage", follow_up), alice_token)).json()["result"]["task"]

    assert answered["id"] == task["id"]
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED", answered
    assert "second" in json.dumps(answered["artifacts"])


async def test_a_resubscribe_message_keeps_its_streamed_task_working_for_the_hold(
    conformance: Any,
    alice_token: str,
) -> None:
    body = rpc("SendStreamingMessage", a2a_message("stream me", message_id="test-resubscribe-message-id-42"))
    started = time.monotonic()
    streaming = asyncio.ensure_future(a2a("conformance", body, alice_token))
    tasks = await task_started(alice_token)

    assert [t["status"]["state"] for t in tasks] == ["TASK_STATE_WORKING"]
    response = await streaming
    assert time.monotonic() - started >= 2.0  # AGENTSITE_A2A_CONFORMANCE_HOLD_S
    events = [json.loads(line[len("data:") :]) for line in response.text.splitlines() if line.startswith("data:")]
    states = [e["result"]["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e.get("result", {})]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED", states


async def test_a_held_conformance_task_can_be_cancelled_while_working(conformance: Any, alice_token: str) -> None:
    conformance.AGENTSITE_A2A_CONFORMANCE_HOLD_S = 60
    body = rpc("SendStreamingMessage", a2a_message("hold", message_id="test-resubscribe-message-id-1"))
    streaming = asyncio.ensure_future(a2a("conformance", body, alice_token))
    tasks = await task_started(alice_token)
    assert tasks[0]["status"]["state"] == "TASK_STATE_WORKING", tasks
    task_id = tasks[0]["id"]

    cancelled = await a2a("conformance", rpc("CancelTask", {"id": task_id}), alice_token)

    assert cancelled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled.text[:300]
    await asyncio.wait_for(streaming, 10)
