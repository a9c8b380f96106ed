"""`Authorization: Bearer <token>` for every API, the OpenAI-compatible one included."""

from __future__ import annotations

from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"
