"""The agent card of an A2A agent, and how it is served (see `server.py`).

A card names the agent, its skills (one for the agent, one per tool), its interfaces (1.0
and 0.3 JSON-RPC at the same URL), streaming and the bearer security scheme; it is served
in the shape of the caller's `A2A-Version` (`card_json`), with an ETag.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, VERSION_HEADER
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.responses import Response

from runs.core.agents.base import Agent
from runs.surfaces.a2a.validation import protocol_major

A2A_PREFIX = "/a2a/"
BEARER_SCHEME = "bearer"
CARD_VERSION = "1.0.0"
TEXT_MODES = ["text/plain", "application/json"]

# The base URL of the request being served, for the agent card's interface URLs.
_base_url: contextvars.ContextVar[str] = contextvars.ContextVar("a2a_base_url", default="http://localhost")


def _tools_of(agent: Agent) -> list[Any]:
    tools = getattr(agent, "tools", None) or ()
    return list(tools.values()) if isinstance(tools, Mapping) else list(tools)


def build_agent_card(agent: Agent, *, url: str) -> AgentCard:
    """The agent's card: one default skill and one skill per tool (SPEC 12.2)."""
    description = agent.description or f"The Agentsite agent {agent.name!r}."
    skills = [AgentSkill(id=agent.name, name=agent.name, description=description, tags=["default"])]
    for tool in _tools_of(agent):
        skills.append(
            AgentSkill(id=tool.name, name=tool.name, description=tool.description or tool.name, tags=["tool"])
        )
    return AgentCard(
        name=agent.name,
        description=description,
        version=CARD_VERSION,
        provider=AgentProvider(organization="Agentsite", url=url.split(A2A_PREFIX, 1)[0] or url),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            BEARER_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="An Agentsite API token (`manage.py create_api_token USER`), sent as 'Authorization: Bearer <token>'.",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER_SCHEME: StringList()})],
        default_input_modes=TEXT_MODES,
        default_output_modes=TEXT_MODES,
        skills=skills,
    )


def _agent_url(name: str) -> str:
    return f"{_base_url.get().rstrip('/')}{A2A_PREFIX}{name}"


def card_json(card: AgentCard, version: str | None) -> dict[str, Any]:
    """The card as a client of `version` (an `A2A-Version` header) reads it: 0.x a pure 0.3
    card (top-level `url`, `preferredTransport`, `protocolVersion`, schemes as `type`/
    `scheme`); anything else, no header included, a pure 1.0 card. A card is fetched before
    a client knows which versions the agent speaks, so without a header it is the current
    protocol's; its `supportedInterfaces` still list the 0.3 endpoint."""
    if (version or "").strip() and protocol_major(version) == 0:
        return to_compat_agent_card(card).model_dump(mode="json", exclude_none=True)
    return MessageToDict(card)


def _card_response(card: AgentCard, request: Request, *, legacy: bool = False) -> Response:
    """The card; at the legacy path a 0.3 card unless the caller asks for another version
    (only pre-1.0 clients read that path)."""
    version = request.headers.get(VERSION_HEADER) or (PROTOCOL_VERSION_0_3 if legacy else None)
    body = json.dumps(card_json(card, version), sort_keys=True)
    etag = f'W/"{hashlib.sha256(body.encode()).hexdigest()}"'
    headers = {"ETag": etag, "Vary": VERSION_HEADER}
    if etag.removeprefix("W/") in [
        tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")
    ]:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)
