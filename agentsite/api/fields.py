"""Strict serializer fields and parsers shared by every API."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers
from rest_framework.parsers import JSONParser

from agentsite.errors import ApplicationError


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, lists and objects instead of coercing them."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, got {type(data).__name__}")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(f"must be true or false, got {data!r}")
        return data


class LimitedJSONParser(JSONParser):
    """JSON bodies only, and none larger than `DATA_UPLOAD_MAX_MEMORY_SIZE` (413)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        if limit is not None and length > limit:
            raise ApplicationError(
                "body_too_large", f"request body is {length} bytes; the limit is {limit}", status_code=413
            )
        data = super().parse(stream, media_type, parser_context)
        if not isinstance(data, dict):
            raise ApplicationError("invalid", f"the body must be a JSON object, got {type(data).__name__}")
        return data
