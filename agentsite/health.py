"""`GET /healthz`: each real component answers ok or its error."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


async def _roundtrip() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "not configured"
    channel = await layer.new_channel("healthz.")
    await layer.send(channel, {"type": "healthz.ping"})
    message = await layer.receive(channel)
    return "ok" if message.get("type") == "healthz.ping" else f"unexpected message {message!r}"


def _channel_layer() -> str:
    return async_to_sync(_roundtrip)()


def _broker() -> str:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "ok (eager, in-process)"
    from agentsite.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return "ok"


def healthz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, Any] = {}
    healthy = True
    for name, check in (("database", _database), ("channel_layer", _channel_layer), ("broker", _broker)):
        try:
            checks[name] = check()
        except Exception as exc:  # the point of the endpoint is to report, not to raise
            checks[name] = f"error: {type(exc).__name__}: {exc}"
            healthy = False
    return JsonResponse({"status": "ok" if healthy else "degraded", "checks": checks}, status=200 if healthy else 503)
