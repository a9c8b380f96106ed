"""ASGI entry point (Daphne): HTTP through Django, websockets through Channels.

The first call adopts the server's event loop for runs, so runs, websocket consumers and
streaming responses share one loop, and builds the runner at once (its reaper marks runs
left `running` by a dead process as interrupted).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: they touch models and settings.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentsite.composition import run_manager  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    manager = run_manager()
    manager.adopt(asyncio.get_running_loop())
    _ = manager.runner
    await router(scope, receive, send)
