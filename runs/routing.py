"""Websocket routes (Channels); `agentsite/asgi.py` mounts them behind the origin check and
the cookie and token authentication."""

from __future__ import annotations

from typing import Any

from django.urls import path

from runs.surfaces.websocket.consumers import SessionConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/sessions/<str:session_id>/", SessionConsumer.as_asgi()),
]
