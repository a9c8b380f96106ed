"""Names only a framework reaches, for `tools/deadcode.py` (never imported or run).

Each line says who calls the name; anything else unused is dead code and goes.
"""

from agentsite.api.fields import ObjectJSONParser
from agentsite.cache import SharedRedisCache
from agentsite.celery import _check_kept_connections, _task_ended
from agentsite.demo.factories import general_agent, support_agent, troubleshoot_agent
from agentsite.errors import json_404, json_500
from agentsite.middleware import malformed_request_middleware
from runs.core.agents.graph.builder import StateGraph
from runs.surfaces.a2a.auth import AgentsiteCallContextBuilder
from runs.surfaces.websocket.backpressure import SendWindow
from runs.surfaces.websocket.consumers import SessionConsumer
from sessions_app.artifact_apis import _AnyAccept

USED_BY_FRAMEWORKS = (
    ObjectJSONParser,  # settings.REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"], by dotted path
    json_404,
    json_500,  # agentsite.urls handler404/handler500, by dotted path
    malformed_request_middleware,  # settings.MIDDLEWARE, by dotted path
    SharedRedisCache,  # settings.CACHES["default"]["BACKEND"], by dotted path
    _check_kept_connections,
    _task_ended,  # Celery's task_prerun / task_postrun signals
    AgentsiteCallContextBuilder.build_user,  # a2a-sdk's CallContextBuilder hook
    SessionConsumer.run_event,
    SessionConsumer.socket_revoked,  # Channels dispatches "run.event", "socket.revoked"
    SessionConsumer.dispatch,  # Channels calls it for every message of the socket
    _AnyAccept.select_parser,
    _AnyAccept.select_renderer,  # DRF content negotiation
    StateGraph.add_agent_node,  # public graph API, docs/graphs.md
    SendWindow.pauseProducing,
    SendWindow.resumeProducing,
    SendWindow.stopProducing,  # Twisted's IPushProducer
    support_agent,
    general_agent,
    troubleshoot_agent,  # settings.AGENTSITE_AGENTS, as module:factory
)
