"""`GET /healthz`: each real component answers ok or its error; `GET /livez`: the process answers.

The balancer checks `/livez`, not `/healthz`. A loaded node queues synchronous views on its
worker threads, and `/healthz` (one, querying the database, the channel layer and the broker)
then waited behind them past the check's timeout: under 200 users both nodes were taken out at
once and every request got the balancer's 503 (bench/load.py --stack). `/livez` is answered
by the ASGI application itself (agentsite/asgi.py), before Django: Django's handler runs its
request signals' synchronous receivers on that same shared thread, so even an async view would
queue there. It measures what the balancer needs to know: the process is there and its loop
turns.
"""

from __future__ import annotations

import json
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


LIVEZ_PATH = "/livez"


async def livez(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI: 200 `{"status": "alive"}` to GET or HEAD while the event loop turns; no database,
    no thread, no other service. Other methods get 405 in the error envelope."""
    if scope["method"] in ("GET", "HEAD"):
        status, body, extra = 200, {"status": "alive"}, []
    else:
        error = {"code": "method_not_allowed", "message": f"{scope['method']} is not allowed on /livez; use GET"}
        status, body, extra = 405, {"error": error}, [(b"allow", b"GET, HEAD")]
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else payload})
