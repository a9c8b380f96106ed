"""ASGI entry point (Daphne): HTTP through Django, websockets through Channels.

The first call adopts the server's event loop for runs, so runs, websocket consumers and
streaming responses share one loop, and builds the runner at once (its reaper marks runs
left `running` by a dead process as interrupted).
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import django
from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
django.setup(set_prefix=False)
from agentsite.middleware import django_middleware_in_one_hop  # noqa: E402

django_middleware_in_one_hop()  # before the handler is built: it reads the middleware's modes
django_asgi_app = get_asgi_application()

# Imported after Django is set up: they touch models and settings.
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from agentsite.health import LIVEZ_PATH, livez  # noqa: E402
from agentsite.runtime import run_manager  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402
from runs.surfaces.a2a.server import a2a_application, serves  # noqa: E402
from runs.surfaces.websocket.auth import websocket_auth  # noqa: E402

# Issue 23: what is loaded by now (Django, the apps, their modules) lives as long as the
# process; out of the collector's sight, a full collection no longer walks it (200 ms pauses
# of the event loop under load, the tail of the stream latency, before).
gc.freeze()

router = ProtocolTypeRouter(
    {
        # Daphne serves no static files; with DEBUG on (`make run`, browser tests) Django does.
        "http": ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app,
        # A handshake token, else the session cookie; without a token the Origin must be this
        # site's (runs/surfaces/websocket/auth.py).
        "websocket": websocket_auth(URLRouter(websocket_urlpatterns)),
    }
)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    manager = run_manager()
    manager.adopt(asyncio.get_running_loop())
    _ = manager.runner
    if scope["type"] == "http" and scope["path"] == LIVEZ_PATH:
        await livez(scope, receive, send)  # the balancer's check: never behind Django's thread
        return
    if scope["type"] == "http" and serves(scope["path"]):
        # A2A (its agents, their directory and the root agent card) is served by the a2a-sdk's
        # Starlette routes (runs/surfaces/a2a/server.py), not by Django.
        await a2a_application(scope, receive, send)
        return
    await router(scope, receive, send)
