"""Authentication for the async protocol endpoints (OpenAI-compatible, AG-UI, A2A).

The same credentials as the REST API: `Authorization: Bearer <token>` or the browser's
Django session.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from rest_framework import exceptions

from agentsite.threads import DB_EXECUTOR
from runs.auth import BearerTokenAuthentication


class AuthenticationError(Exception):
    """Bad credentials (as opposed to none): the message says what was wrong."""


def _authenticate(request: HttpRequest, allow_session: bool) -> Any:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header:
        try:
            found = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]  # DRF reads META only
        except exceptions.AuthenticationFailed as exc:
            raise AuthenticationError(str(exc.detail)) from None
        if found is None:
            raise AuthenticationError("the Authorization header must be 'Bearer <token>'")
        return found[0]
    user = getattr(request, "user", None) if allow_session else None
    if user is not None and user.is_authenticated:
        return user
    return AnonymousUser()


async def authenticate(request: HttpRequest, *, allow_session: bool = False) -> Any:
    """The request's user (AnonymousUser when it sent no credentials); raises
    `AuthenticationError` for credentials that are present but wrong.

    Session (cookie) authentication only with `allow_session`, for views that enforce CSRF
    themselves: a bearer token cannot be forged by another site, a cookie can."""
    return await sync_to_async(_authenticate, thread_sensitive=False, executor=DB_EXECUTOR)(request, allow_session)
