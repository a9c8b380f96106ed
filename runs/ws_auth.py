"""Bearer-token authentication for websockets.

Browsers authenticate a socket with their session cookie (Channels' `AuthMiddlewareStack`
puts the user in the scope). Other clients present an API token in the handshake, as
`Authorization: Bearer <token>` or, for clients that cannot set headers, `?token=<token>`.
A token, when present, decides the user: a wrong one leaves the socket anonymous (the
consumer closes it with 4401) rather than falling back to the cookie.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from django.contrib.auth.models import AnonymousUser

from sessions_app.backends import db_call

BEARER = "bearer"


def token_from_scope(scope: dict[str, Any]) -> str | None:
    """The token the handshake carries (header first, then the query string), or None."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == BEARER and credentials.strip():
                return credentials.strip()
    query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
    tokens = query.get("token")
    return tokens[-1] if tokens and tokens[-1] else None


@db_call
def user_for_token(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class TokenAuthMiddleware:
    """ASGI middleware: a handshake token sets `scope["user"]`; without one the scope keeps
    the user the session middleware found."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket":
            key = token_from_scope(scope)
            if key is not None:
                scope = {**scope, "user": await user_for_token(key)}
        return await self.inner(scope, receive, send)
