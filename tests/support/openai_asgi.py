"""The official `openai` client wired to this process's ASGI application (no socket), and
the helpers the /v1 tests share: a scripted upstream for the agents, the ledger, the runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
from asgiref.sync import sync_to_async
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from runs import models as run_orm
from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from sessions_app import mapping
from sessions_app import models as session_orm
from sessions_app.core.events import Event
from tests.support.openai_server import ScriptedOpenAIServer


@sync_to_async
def token_of(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


async def client_for(user: Any, *, max_retries: int = 0, **headers: str) -> openai.AsyncOpenAI:
    """`AsyncOpenAI` as an integrator builds it, its HTTP going to the ASGI app in-process."""
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), timeout=30)
    return openai.AsyncOpenAI(
        base_url="http://localhost/v1",
        api_key=await token_of(user),
        max_retries=max_retries,
        http_client=http,
        default_headers=headers or None,
    )


def agents_on(server: ScriptedOpenAIServer, use_model: Callable[[Model], None], **options: Any) -> None:
    """The demo agents, their model the scripted upstream (no retries of its own unless asked)."""
    use_model(
        OpenAIModel(
            model="gpt-4o-mini",
            base_url=server.base_url,
            api_key="sk-test",
            backoff_base_s=0.01,
            **{"max_retries": 0, **options},
        )
    )


@sync_to_async
def stored_events(session_id: str) -> list[Event]:
    return [mapping.event_from_row(r) for r in session_orm.Event.objects.filter(session_id=session_id).order_by("seq")]


@sync_to_async
def runs_of(user: Any) -> list[run_orm.Run]:
    return list(run_orm.Run.objects.filter(user=user))


@sync_to_async
def sessions_of(user: Any) -> list[str]:
    return list(session_orm.Session.objects.filter(user=user).values_list("id", flat=True))
