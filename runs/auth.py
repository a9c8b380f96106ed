"""Who is calling: the one authentication module of every protocol surface.

Every API takes `Authorization: Bearer <token>` (an API token, `rest_framework.authtoken`),
the OpenAI-compatible and A2A ones included; the browser's session cookie, CSRF-checked,
is taken by the REST API and by the views that enforce CSRF themselves. The token lookup
and the checks on its user live here (`token_user`, `bearer_key`); each framework gets a
thin adapter that calls them: the DRF authentication classes below, `authenticate` for
the async Django views (`/v1`), `runs.surfaces.websocket.auth` (Channels middleware) and `runs.surfaces.a2a.auth`
(the A2A SDK's call context).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.http import HttpRequest, QueryDict
from django.utils.translation import gettext as _
from drf_spectacular.authentication import SessionScheme
from rest_framework import authentication, exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request

from agentsite.threads import DB_EXECUTOR
from sessions_app.backends.db import Converter, column_converter, converted

if TYPE_CHECKING:
    from rest_framework.authtoken.models import Token

BEARER = "Bearer"
BEARER_FORM = "the Authorization header must be 'Bearer <token>'"


class AuthenticationError(Exception):
    """Bad credentials (as opposed to none): the message says what was wrong."""


def api_token(key: str) -> Token:
    """The API token `key` names, its user active; `AuthenticationError` otherwise (DRF's
    words, translated as DRF's are)."""
    token = _token_with_user(key)
    if token is None:
        raise AuthenticationError(_("Invalid token."))
    if not token.user.is_active:
        raise AuthenticationError(_("User inactive or deleted."))
    return token


def _token_with_user(key: str) -> Token | None:
    """The token row and its user's, as `Token.objects.select_related("user")` builds them,
    from one statement written out once (issue 23: every API request, websocket handshake
    and socket credential check looks a token up; through the ORM that took 0.67 ms of CPU,
    most of it building the query)."""
    if "\x00" in key:
        return None  # no token has one, and PostgreSQL refuses the text: unknown, not a 500
    sql, token_model, token_fields, user_model, user_fields, converters = _token_statement(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key])
        row = cursor.fetchone()
    if row is None:
        return None
    values = [converted(value, converter) for value, converter in zip(row, converters, strict=True)]
    token = token_model.from_db(connection.alias, token_fields, values[: len(token_fields)])
    token.user = user_model.from_db(connection.alias, user_fields, values[len(token_fields) :])
    return token


@functools.lru_cache(maxsize=4)
def _token_statement(vendor: str) -> tuple[str, Any, list[str], Any, list[str], list[Converter]]:
    """The token lookup for a vendor: its SQL, both models with the attribute names of their
    concrete fields in column order, and per column the converters the ORM would apply (SQLite's
    datetime text and integer booleans)."""
    del vendor  # part of the cache key
    # Imported here: this module is loaded by the ASGI entry point, the models with the apps.
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user_model = get_user_model()
    quote = connection.ops.quote_name
    token_meta, user_meta = Token._meta, user_model._meta
    columns: list[str] = []
    converters: list[Converter] = []
    for alias, meta in (("t", token_meta), ("u", user_meta)):
        for field in meta.concrete_fields:
            columns.append(f"{alias}.{quote(field.column)}")
            converters.append(column_converter(field))
    user_column = token_meta.get_field("user").column
    sql = (
        f"SELECT {', '.join(columns)} FROM {quote(token_meta.db_table)} t"
        f" JOIN {quote(user_meta.db_table)} u ON u.{quote(user_meta.pk.column)} = t.{quote(user_column)}"
        f" WHERE t.{quote(token_meta.pk.column)} = %s"
    )
    token_fields = [field.attname for field in token_meta.concrete_fields]
    user_fields = [field.attname for field in user_meta.concrete_fields]
    return sql, Token, token_fields, user_model, user_fields, converters


def token_user(key: str) -> Any | None:
    """The active user an API token names, or None (an unknown token, an inactive user)."""
    try:
        return api_token(key).user
    except AuthenticationError:
        return None


def bearer_key(header: str) -> str:
    """The token of an `Authorization: Bearer <token>` header; `AuthenticationError` for any
    other form (another scheme, no token, a token with spaces)."""
    keyword, _sep, key = header.strip().partition(" ")
    if keyword.lower() != BEARER.lower() or not key.strip() or " " in key.strip():
        raise AuthenticationError(BEARER_FORM)
    return key.strip()


class BearerTokenAuthentication(TokenAuthentication):
    """DRF's token authentication with the `Bearer` keyword, looking tokens up with `api_token`."""

    keyword = BEARER

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        try:
            token = api_token(key)
        except AuthenticationError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return token.user, token


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session authentication, with Django's CSRF check run on the Django request
    and with no form data to look into: the token comes in the `X-CSRFToken` header.

    DRF hands the check its own `Request`, whose `POST` parses the body with the view's
    parsers to look for a form token: a view without a JSON parser (AG-UI: 500) or with a
    raw body (artifact upload: the bytes parsed as JSON, 400) failed for every browser,
    and whatever was parsed had consumed the stream the view reads."""

    def enforce_csrf(self, request: Request) -> None:
        django_request: Any = request._request
        shielded = not hasattr(django_request, "_post")
        if shielded:
            # What Django does itself for a body it does not parse as a form.
            django_request._post = QueryDict()
        try:
            super().enforce_csrf(django_request)
        finally:
            if shielded:
                del django_request._post


class SessionAuthenticationScheme(SessionScheme):
    """The OpenAPI schema's cookie scheme, for our subclass as for DRF's class."""

    target_class = "runs.auth.SessionAuthentication"


def _authenticate(request: HttpRequest) -> Any:
    if not request.META.get("HTTP_AUTHORIZATION", ""):
        return AnonymousUser()
    try:
        found = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]  # DRF reads META only
    except exceptions.AuthenticationFailed as exc:
        raise AuthenticationError(str(exc.detail)) from None
    if found is None:
        raise AuthenticationError(BEARER_FORM)
    return found[0]


async def authenticate(request: HttpRequest) -> Any:
    """The bearer-token user of an async Django view's request (`/v1`; AnonymousUser when it
    sent no credentials); raises `AuthenticationError` for credentials present but wrong.

    No session cookie: these views are CSRF-exempt, and a bearer token cannot be forged by
    another site, a cookie can."""
    return await sync_to_async(_authenticate, thread_sensitive=False, executor=DB_EXECUTOR)(request)
