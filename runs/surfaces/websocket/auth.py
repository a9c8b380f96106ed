"""Who a websocket is, and whether its page may open it.

Browsers authenticate a socket with their session cookie (Channels' `AuthMiddlewareStack`
puts the user in the scope). Other clients present an API token in the handshake, as
`Authorization: Bearer <token>` or, for clients that cannot set headers, `?token=<token>`.
A token, when present, decides the user: a wrong one leaves the socket anonymous (the
consumer closes it with 4401) rather than falling back to the cookie.

The Origin check: a handshake that carries an `Origin` (browsers always send one) is
refused (403) unless it is this site's own origin (the handshake's scheme, `Host` and port,
the host one of `ALLOWED_HOSTS`; see `_own_origins` for the scheme) or listed in `CSRF_TRUSTED_ORIGINS`, the rule Django
applies to unsafe requests. A handshake without `Origin` is not a browser's: it must bring
a token (API clients, CLIs and servers send none), since the cookie is what a browser
would attach by itself.

The token checks are runs.auth's (the one authentication module); this is their Channels
adapter.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import is_same_domain, split_domain_port, validate_host

from runs.auth import BEARER, token_user
from sessions_app.backends import db_call

TOKEN_KEY = "api_token"
"""The scope key under which the handshake's token travels to the consumer (it re-checks it)."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def token_from_scope(scope: dict[str, Any]) -> str | None:
    """The token the handshake carries (header first, then the query string), or None."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == BEARER.lower() and credentials.strip():
                return credentials.strip()
    query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
    tokens = query.get("token")
    return tokens[-1] if tokens and tokens[-1] else None


@db_call
def user_for_token(key: str) -> Any:
    return token_user(key) or AnonymousUser()


def credential_holds(user_id: Any, token: str | None) -> bool:
    """Whether the socket's credential still holds: its token exists and names the user, or
    (cookie) the user is still active."""
    if token is not None:
        user = token_user(token)
        return user is not None and user.pk == user_id
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(pk=user_id, is_active=True).exists()


still_authorised = db_call(credential_holds)
"""`credential_holds` from async code, in a database thread."""


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _origin_triple(parts: SplitResult) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the port filled in from the scheme."""
    scheme = parts.scheme.lower()
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host.lower(), port or _DEFAULT_PORTS[scheme]


def _own_origins(scope: dict[str, Any]) -> set[tuple[str, str, int]]:
    """This site's origin as the handshake names it: `Host` (an allowed one) and the scheme.

    The scheme is the proxy's `X-Forwarded-Proto`, else the scope's; Daphne's scope names
    none, and then both `http` and `https` of that host and port are this site. (No page can
    set either header on a socket it opens, so neither helps a foreign page.)
    """
    host = _header(scope, b"host")
    if not host:
        return set()
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return set()
    forwarded = (_header(scope, b"x-forwarded-proto") or "").split(",")[0].strip().lower()
    named = forwarded or str(scope.get("scheme") or "")
    schemes = {"https"} if named in ("wss", "https") else {"http"} if named in ("ws", "http") else {"http", "https"}
    own = {_origin_triple(urlsplit(f"{scheme}://{host}")) for scheme in schemes}
    return {triple for triple in own if triple is not None}


def _trusted(origin: SplitResult, triple: tuple[str, str, int]) -> bool:
    """Listed in `CSRF_TRUSTED_ORIGINS`: exactly, or as `scheme://*.domain[:port]` for the
    domain's subdomains (Django's own reading of the setting)."""
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        parts = urlsplit(entry)
        if "*" in parts.netloc:
            subdomains = parts.netloc.lower().replace("*", "", 1)
            if parts.scheme.lower() == triple[0] and is_same_domain(origin.netloc.lower(), subdomains):
                return True
        elif _origin_triple(parts) == triple:
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the handshake's `Origin` is this site's or a trusted one (scheme, host, port)."""
    origin = _header(scope, b"origin")
    if not origin:
        return False
    parts = urlsplit(origin.strip())
    triple = _origin_triple(parts)
    if triple is None:
        return False
    return triple in _own_origins(scope) or _trusted(parts, triple)


class TokenAuthMiddleware:
    """ASGI middleware: the Origin check, then a handshake token sets `scope["user"]`; without
    one the scope keeps the user the session middleware found."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket":
            key = token_from_scope(scope)
            has_origin = _header(scope, b"origin") is not None
            if (has_origin and not origin_allowed(scope)) or (not has_origin and key is None):
                return await WebsocketDenier()(scope, receive, send)
            if key is not None:
                scope = {**scope, "user": await user_for_token(key), TOKEN_KEY: key}
        return await self.inner(scope, receive, send)


def websocket_auth(inner: Any) -> Any:
    """The websocket's authentication around `inner`: a handshake that carries a token goes
    to `TokenAuthMiddleware` alone (the token decides the user, so the session cookie is
    never read); one without, through Channels' cookie stack first. Every socket went
    through that stack, whose user lookup is a hop to its database thread and two
    connection sweeps even with no cookie to read (issue 23)."""
    with_token = TokenAuthMiddleware(inner)
    with_cookie = AuthMiddlewareStack(with_token)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket" and token_from_scope(scope) is not None:
            return await with_token(scope, receive, send)
        return await with_cookie(scope, receive, send)

    return app
