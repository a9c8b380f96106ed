"""Issue 25, item 3: retry-safe runs on /v1. A run that failed on its own terms answers 422
(which the OpenAI SDK does not retry) with `x-should-retry: false`; an `Idempotency-Key`
makes a repeated request answer with the first run's result, or join it while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from agentsite.asgi import application
from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on, client_for, runs_of, stored_events, token_of
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = [{"role": "user", "content": "Why does payments.internal.example.com fail TLS?"}]


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


async def test_a_run_that_fails_is_not_retried_by_the_sdk_and_leaves_one_run_and_one_user_turn(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.error(500, "the upstream model is down"))
    agents_on(openai_server, use_model)
    client = await client_for(alice, max_retries=2)

    with pytest.raises(openai.UnprocessableEntityError) as failed:
        await client.chat.completions.create(model="support", messages=QUESTION)  # type: ignore[arg-type]
    response = failed.value.response
    assert response.headers["x-should-retry"] == "false"
    assert failed.value.body["type"] == "run_error" and "the run failed" in failed.value.body["message"]  # type: ignore[index]
    openai_server.assert_consumed()  # one upstream call: no second run was started

    runs = await runs_of(alice)
    assert [r.status for r in runs] == ["failed"] and response.headers["X-Run-Id"] == runs[0].id
    users = [e for e in await stored_events(response.headers["X-Session-Id"]) if e.role == "user"]
    assert [e.text for e in users] == [QUESTION[0]["content"]]


async def test_a_failed_run_retried_with_its_idempotency_key_answers_the_same_failure_without_a_new_run(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.error(500, "the upstream model is down"))
    agents_on(openai_server, use_model)
    client = await client_for(alice, **{"Idempotency-Key": "retry-me-1"})
    answers = []
    for _ in range(2):
        with pytest.raises(openai.UnprocessableEntityError) as failed:
            await client.chat.completions.create(model="support", messages=QUESTION)  # type: ignore[arg-type]
        answers.append(failed.value)
    assert answers[0].body == answers[1].body
    assert "Idempotent-Replayed" not in answers[0].response.headers
    assert answers[1].response.headers["Idempotent-Replayed"] == "true"
    assert answers[0].response.headers["X-Run-Id"] == answers[1].response.headers["X-Run-Id"]
    assert len(await runs_of(alice)) == 1
    openai_server.assert_consumed()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_repeated_with_its_idempotency_key_gets_the_first_runs_answer(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None], stream: bool
) -> None:
    openai_server.script(ServerStep.answer("Renew the certificate.", usage=(30, 5)))
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    first = await client.chat.completions.with_raw_response.create(
        model="support", messages=QUESTION, extra_headers={"Idempotency-Key": "k-1"}
    )  # type: ignore[arg-type]
    again = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=QUESTION,
        stream=stream,
        stream_options={"include_usage": True} if stream else None,
        extra_headers={"Idempotency-Key": "k-1"},
    )  # type: ignore[arg-type]
    if stream:
        chunks = [chunk async for chunk in again.parse()]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
    else:
        content, usage = again.parse().choices[0].message.content, again.parse().usage
    assert content == first.parse().choices[0].message.content == "Renew the certificate."
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (30, 5)
    assert again.headers["X-Run-Id"] == first.headers["X-Run-Id"] and again.headers["Idempotent-Replayed"] == "true"
    assert len(await runs_of(alice)) == 1
    openai_server.assert_consumed()


async def test_requests_with_the_same_key_at_once_share_one_run(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.delay(1.0, then=ServerStep.answer("Renew the certificate.")))
    agents_on(openai_server, use_model)
    client = await client_for(alice, **{"Idempotency-Key": "together"})
    both = await asyncio.gather(
        *(client.chat.completions.with_raw_response.create(model="support", messages=QUESTION) for _ in range(2))
    )  # type: ignore[arg-type]
    assert [raw.parse().choices[0].message.content for raw in both] == ["Renew the certificate."] * 2
    assert both[0].headers["X-Run-Id"] == both[1].headers["X-Run-Id"]
    assert sorted(raw.headers.get("Idempotent-Replayed", "") for raw in both) == ["", "true"]
    runs = await runs_of(alice)
    assert len(runs) == 1
    users = [e for e in await stored_events(runs[0].session_id) if e.role == "user"]
    assert len(users) == 1
    openai_server.assert_consumed()


async def test_a_key_reused_for_another_request_is_refused_and_a_bad_key_is_named(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Renew the certificate.")
    agents_on(openai_server, use_model)
    client = await client_for(alice, **{"Idempotency-Key": "k-2"})
    await client.chat.completions.create(model="support", messages=QUESTION)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as reused:
        await client.chat.completions.create(model="support", messages=[{"role": "user", "content": "Something else"}])
    assert reused.value.body["code"] == "idempotency_key_reused"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as too_long:
        await client.chat.completions.create(
            model="support", messages=QUESTION, extra_headers={"Idempotency-Key": "k" * 65}
        )  # type: ignore[arg-type]
    assert too_long.value.body["param"] == "Idempotency-Key"  # type: ignore[index]
    assert len(await runs_of(alice)) == 1
    openai_server.assert_consumed()


async def test_keys_are_per_user(
    alice: Any, bob: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Alice's answer.", "Bob's answer.")
    agents_on(openai_server, use_model)
    answers = []
    for user in (alice, bob):
        client = await client_for(user, **{"Idempotency-Key": "shared-key"})
        completion = await client.chat.completions.create(model="support", messages=QUESTION)  # type: ignore[arg-type]
        answers.append(completion.choices[0].message.content)
    assert answers == ["Alice's answer.", "Bob's answer."]
    openai_server.assert_consumed()


class ImpatientTransport(httpx.AsyncBaseTransport):
    """The ASGI app behind a client that gives up after `patience_s`, as an SDK whose
    timeout is shorter than the run does; it records the headers of every attempt."""

    def __init__(self, patience_s: float) -> None:
        self.inner = httpx.ASGITransport(app=application)
        self.patience_s = patience_s
        self.attempts: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts.append(request.headers)
        try:
            response = await asyncio.wait_for(self.inner.handle_async_request(request), self.patience_s)
        except TimeoutError:
            raise httpx.ReadTimeout("gave up waiting", request=request) from None
        return response


async def test_a_request_the_sdk_retries_after_a_timeout_with_its_key_joins_the_run_in_flight(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.delay(2.0, then=ServerStep.answer("Renew the certificate.")))
    agents_on(openai_server, use_model)
    transport = ImpatientTransport(patience_s=0.5)
    client = openai.AsyncOpenAI(
        base_url="http://localhost/v1",
        api_key=await token_of(alice),
        max_retries=6,
        http_client=httpx.AsyncClient(transport=transport),
    )
    completion = await client.chat.completions.create(
        model="support", messages=QUESTION, extra_headers={"Idempotency-Key": "slow-1"}
    )  # type: ignore[arg-type]

    assert completion.choices[0].message.content == "Renew the certificate."
    assert len(transport.attempts) >= 2  # the first attempt timed out; the SDK retried
    assert {a["Idempotency-Key"] for a in transport.attempts} == {"slow-1"}
    assert [a["x-stainless-retry-count"] for a in transport.attempts][:2] == ["0", "1"]
    runs = await runs_of(alice)
    assert len(runs) == 1
    assert [e.text for e in await stored_events(runs[0].session_id) if e.role == "user"] == [QUESTION[0]["content"]]
    openai_server.assert_consumed()  # one upstream call: one run did the work
