"""SPEC 5.4 as a site setting (issue 26): `AGENTSITE_RECALL_PRELOAD` (and its injection) turns
preload session recall on for the support agent the site builds; off by default.

Through `/v1` with the official `openai` client and the scripted upstream: what alice said
in one chat reaches the model's request of her next chat, never bob's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.core.context.recall_preload import SessionRecallPreload
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from sessions_app.core.recall import PRELOAD_HEADER
from tests.support.openai_asgi import agents_on, client_for
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

EARLIER = "The VPN certificate for the Berlin office expires on 14 March."
QUESTION = "When does the Berlin VPN certificate expire?"


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def _support_agent() -> Any:
    from agentsite.composition import agent_context
    from agentsite.demo.factories import support_agent

    return support_agent(agent_context(ScriptedModel.of(), None))


def test_spec_5_4_the_recall_preload_setting_reaches_the_support_agent_and_is_off_by_default(settings: Any) -> None:
    assert _support_agent().session_recall is None
    settings.AGENTSITE_RECALL_PRELOAD = 3
    settings.AGENTSITE_RECALL_PRELOAD_INJECTION = "user"
    assert _support_agent().session_recall == SessionRecallPreload(max_results=3, injection="user")


async def test_spec_5_4_with_the_setting_on_the_users_earlier_chat_reaches_the_next_chats_request(
    alice: Any, bob: Any, settings: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_RECALL_PRELOAD = 3
    openai_server.script("Noted.", "Noted.", "On 14 March.")
    agents_on(openai_server, use_model)
    alice_client, bob_client = await client_for(alice), await client_for(bob)
    await alice_client.chat.completions.create(model="support", messages=[{"role": "user", "content": EARLIER}])
    await bob_client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": "Bob's Berlin VPN certificate is secret-4471."}]
    )

    answer = await alice_client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": QUESTION}]
    )
    assert answer.choices[0].message.content == "On 14 March."
    sent = "\n".join(str(m.get("content")) for m in openai_server.requests[-1]["messages"])
    assert PRELOAD_HEADER in sent and "14 March" in sent
    assert "secret-4471" not in sent  # another user's sessions are never recalled
    openai_server.assert_consumed()
