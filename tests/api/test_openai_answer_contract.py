"""Issue 25, item 4: streamed and non-streamed answers follow one contract. The content is
the text of each assistant message of the run in order, separated by a blank line, the
final answer last: a step's text beside its tool calls is shown, never glued to the next
("...first.The certificate..."). With `stream_options.include_usage` the stream ends with a
usage chunk without choices, as OpenAI's does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on, client_for
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = [{"role": "user", "content": "Why does payments.internal.example.com fail TLS?"}]
FIRST = "Let me inspect the certificate first."
FINAL = "The certificate expired on 2026-11-14; renew it."


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def tool_round() -> tuple[ServerStep, ServerStep]:
    return (
        ServerStep.calls(
            ("inspect_certificate", {"host": "payments.internal.example.com"}), text=FIRST, usage=(40, 12)
        ),
        ServerStep.answer(FINAL, usage=(60, 9)),
    )


async def test_streamed_and_plain_answers_of_a_run_with_a_tool_round_have_the_same_content(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(*tool_round(), *tool_round())
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    plain = await client.chat.completions.create(model="support", messages=QUESTION)  # type: ignore[arg-type]
    stream = await client.chat.completions.create(
        model="support", messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )  # type: ignore[arg-type]
    chunks = [chunk async for chunk in stream]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    assert plain.choices[0].message.content == streamed == f"{FIRST}\n\n{FINAL}"
    # The usage chunk comes last, with no choices, after the finish chunk; it adds up the steps.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (100, 21)
    assert plain.usage is not None and plain.usage.total_tokens == chunks[-1].usage.total_tokens == 121
    openai_server.assert_consumed()


async def test_without_include_usage_no_usage_chunk_is_sent(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Renew it.")
    agents_on(openai_server, use_model)
    stream = await (await client_for(alice)).chat.completions.create(model="support", messages=QUESTION, stream=True)  # type: ignore[arg-type]
    chunks = [chunk async for chunk in stream]
    assert all(c.choices and c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Renew it."
