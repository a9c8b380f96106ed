"""Who is calling an A2A endpoint: the bearer token of every Agentsite API, on Starlette
(the token checks are runs.auth's; this module adapts them to the A2A SDK).

The dispatcher authenticates each call (the agent card excepted) before the SDK sees it and
puts the Django user in the ASGI scope; `AgentsiteCallContextBuilder` hands it to the SDK
as an `A2AUser`, which the request context builder, the executor and the task store read
back with `request_user`.
"""

from __future__ import annotations

from typing import Any

from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.context import ServerCallContext
from a2a.server.routes.common import DefaultServerCallContextBuilder
from starlette.requests import Request

from runs.auth import api_token, bearer_key
from sessions_app.backends import db_call

SCOPE_USER = "user"


class A2AUser(User):
    """An authenticated Agentsite user, as the A2A SDK sees callers."""

    def __init__(self, user: Any) -> None:
        self.django_user = user

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        # The SDK's own stores scope tasks by this name; ours scope them by the user row.
        return str(self.django_user.get_username())


def _user_for(header: str) -> Any:
    return api_token(bearer_key(header)).user


_user_for_header = db_call(_user_for)


async def authenticate(authorization: str | None) -> Any | None:
    """The user an `Authorization` header names; None when there is none.

    Raises `AuthenticationError` for a header that is present but wrong (malformed, an
    unknown token, an inactive user)."""
    if not authorization:
        return None
    return await _user_for_header(authorization)


def request_user(context: ServerCallContext | None) -> Any | None:
    """The Django user of an SDK call context, or None for an anonymous one."""
    user = context.user if context is not None else None
    return user.django_user if isinstance(user, A2AUser) else None


class AgentsiteCallContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the user the dispatcher authenticated."""

    def build_user(self, request: Request) -> User:
        user = request.scope.get(SCOPE_USER)
        if user is not None and getattr(user, "is_authenticated", False):
            return A2AUser(user)
        return UnauthenticatedUser()
