"""`Authorization: Bearer <token>` for every API, the OpenAI-compatible one included; the
browser's session cookie, CSRF-checked, for the same APIs."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from drf_spectacular.authentication import SessionScheme
from rest_framework import authentication
from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"


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
