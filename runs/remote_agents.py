"""Remote A2A agents added from the admin, without code (issue 25, item 8).

A `RemoteAgent` row names an A2A agent served elsewhere: its URL, a credential, and how it
is used here. Its card is fetched and checked when the row is saved (`fetch_card`: the
admin form shows a failure as a form error) and kept in the row, so a run never waits on
it. The process's Runner serves the enabled rows as `A2AAgent`s of their own names (so
`/api/agents/` lists them and every surface runs them) and offers each to the registered
LLM agents its `tool_of` names as the tool `ask_<name>` (`A2ATool`).

The Runner follows the table: once the composition root has built it, `attach_remote_agents`
applies the rows and `watch_remote_agents` re-reads them whenever their fingerprint changes
(a cheap query every few seconds), so a row added on one server reaches every process; a
save or delete in this process applies them at once (`remote_agents_changed`, on commit).

The credential is write-only: the admin never renders it, `RemoteAgent.__repr__` leaves it
out, and the errors here name the URL and the reason, never a header.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client import A2ACardResolver
from a2a.types.a2a_pb2 import AgentCard
from asgiref.sync import async_to_sync
from django.db.models import Count, Max
from google.protobuf.json_format import MessageToDict, ParseDict

from runs import models as orm
from runs.core.agents.base import Agent
from runs.core.runner import Runner
from runs.surfaces.a2a.agent import A2AAgent, A2ATool
from sessions_app.backends import db_call

logger = logging.getLogger(__name__)

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
CARD_TIMEOUT_S = 10.0
WATCH_INTERVAL_S = 3.0


class CardError(Exception):
    """The card could not be fetched, or is not a usable A2A agent card."""


def auth_headers(*, token: str, header_name: str = "") -> dict[str, str]:
    """The headers that carry the credential (none without one)."""
    if not token:
        return {}
    if header_name:
        return {header_name: token}
    return {"Authorization": f"Bearer {token}"}


async def _fetch(url: str, headers: Mapping[str, str]) -> AgentCard:
    async with httpx.AsyncClient(headers=dict(headers), timeout=CARD_TIMEOUT_S) as http:
        return await A2ACardResolver(http, url.rstrip("/")).get_agent_card()


def fetch_card(url: str, *, token: str = "", header_name: str = "") -> dict[str, Any]:
    """The agent card at `url` (`<url>/.well-known/agent-card.json`), checked, as JSON.

    Raises CardError saying what went wrong: unreachable, an HTTP error, not a card, a card
    without a name or an interface to call."""
    try:
        card = async_to_sync(_fetch)(url, auth_headers(token=token, header_name=header_name))
    except Exception as error:  # the SDK wraps transport and parse errors in several types
        raise CardError(
            f"could not fetch the agent card from {url.rstrip('/')}/.well-known/agent-card.json: {_reason(error)}"
        ) from None
    if not card.name:
        raise CardError("the agent card has no name")
    if not any(interface.url for interface in card.supported_interfaces):
        raise CardError("the agent card names no interface URL to call")
    card_json: dict[str, Any] = MessageToDict(card)
    return card_json


def _reason(error: BaseException) -> str:
    # The exception text, without anything the request carried (headers never appear in
    # httpx's messages; the cause chain is cut so a traceback cannot show the request).
    text = str(error).strip() or type(error).__name__
    return text if len(text) <= 300 else text[:300] + "..."


@dataclass(frozen=True, kw_only=True)
class RemoteSpec:
    """One enabled row, as the Runner needs it (read in a worker thread, applied on any)."""

    name: str
    url: str
    description: str
    token: str
    header_name: str
    as_agent: bool
    tool_of: tuple[str, ...]
    card: Mapping[str, Any]

    def agent(self) -> A2AAgent:
        card = ParseDict(dict(self.card), AgentCard(), ignore_unknown_fields=True) if self.card else None
        return A2AAgent(
            name=self.name,
            url=self.url,
            description=self.description or (card.description if card else ""),
            headers=auth_headers(token=self.token, header_name=self.header_name),
            card=card,
        )


def load_specs() -> list[RemoteSpec]:
    """The enabled rows (sync: call from a thread that may use the database)."""
    return [
        RemoteSpec(
            name=row.name,
            url=row.url,
            description=row.description,
            token=row.token,
            header_name=row.header_name,
            as_agent=row.as_agent,
            tool_of=tuple(str(n) for n in row.tool_of or ()),
            card=row.card or {},
        )
        for row in orm.RemoteAgent.objects.filter(enabled=True).order_by("name")
    ]


def fingerprint() -> tuple[int, Any]:
    """What changes whenever a row is added, changed or deleted."""
    summary = orm.RemoteAgent.objects.aggregate(count=Count("id"), last=Max("updated_at"))
    return summary["count"], summary["last"]


class RemoteAgentSync:
    """Keeps one Runner's agents and tools in step with the rows.

    The registered agents (and each one's own tools) are remembered when it is made; each
    apply then swaps in new dicts (`runner.agents`, an agent's `tools`) in one assignment,
    so a run reading the old ones meanwhile never sees a half-made change."""

    def __init__(self, runner: Runner) -> None:
        self._runner = weakref.ref(runner)
        self.base_agents = dict(runner.agents)
        # The agents that take tools (LLM agents: a `tools` dict), each with its own tools.
        self._tool_takers: dict[str, Any] = {
            name: agent for name, agent in runner.agents.items() if isinstance(getattr(agent, "tools", None), dict)
        }
        self._base_tools = {name: dict(agent.tools) for name, agent in self._tool_takers.items()}
        self._lock = threading.Lock()
        self.seen: tuple[int, Any] | None = None

    def apply(self, specs: Iterable[RemoteSpec]) -> None:
        runner = self._runner()
        if runner is None:
            return
        with self._lock:
            agents: dict[str, Agent] = dict(self.base_agents)
            tools = {name: dict(base) for name, base in self._base_tools.items()}
            for spec in specs:
                remote = spec.agent()
                if spec.as_agent:
                    if spec.name in agents:
                        logger.warning("remote agent %r not served: a registered agent has that name", spec.name)
                    else:
                        agents[spec.name] = remote
                for owner in spec.tool_of:
                    tool = A2ATool(remote)
                    if owner not in tools:
                        logger.warning("remote agent %r: %r is not a registered agent with tools", spec.name, owner)
                    elif tool.name in tools[owner]:
                        logger.warning("remote agent %r: %r already has a tool %r", spec.name, owner, tool.name)
                    else:
                        tools[owner][tool.name] = tool
            for name, agent_tools in tools.items():
                self._tool_takers[name].tools = agent_tools
            runner.agents = agents


_syncs: weakref.WeakKeyDictionary[Runner, RemoteAgentSync] = weakref.WeakKeyDictionary()


@db_call
def _read_if_changed(seen: tuple[int, Any] | None) -> tuple[tuple[int, Any], list[RemoteSpec] | None]:
    current = fingerprint()
    return current, (load_specs() if current != seen else None)


async def _refresh(sync: RemoteAgentSync) -> None:
    try:
        seen, specs = await _read_if_changed(sync.seen)
    except Exception:  # the database is away for a moment: the watch tries again
        logger.warning("remote agents: could not read the table", exc_info=True)
        return
    if specs is not None:
        sync.seen = seen
        sync.apply(specs)


async def attach_remote_agents(runner: Runner) -> None:
    """Serve the rows on `runner` from now on (the composition root awaits this once the
    Runner is built, then spawns `watch_remote_agents`)."""
    if runner not in _syncs:
        _syncs[runner] = RemoteAgentSync(runner)
    await _refresh(_syncs[runner])


async def watch_remote_agents(runner: Runner, interval_s: float = WATCH_INTERVAL_S) -> None:
    """Re-apply the rows whenever they change (another process's admin, a queryset update)."""
    while (sync := _syncs.get(runner)) is not None:
        await asyncio.sleep(interval_s)
        await _refresh(sync)


def remote_agents_changed() -> None:
    """A row was saved or deleted in this process: apply the rows to this process's
    Runners now (sync, after the commit, in the request's thread: the next page and the
    next run already see the change)."""
    syncs = list(_syncs.values())
    if not syncs:
        return
    seen, specs = fingerprint(), load_specs()
    for sync in syncs:
        sync.seen = seen
        sync.apply(specs)


def registered_agents(runner: Runner) -> dict[str, Agent]:
    """The Runner's own agents (the registry's), without the remote ones served beside them."""
    sync = _syncs.get(runner)
    return dict(sync.base_agents) if sync is not None else dict(runner.agents)
