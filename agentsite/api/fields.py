"""Strict serializer fields and parsers shared by every API."""

from __future__ import annotations

from typing import Any

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


class ObjectJSONParser(JSONParser):
    """JSON bodies that are objects. (Bodies over `DATA_UPLOAD_MAX_MEMORY_SIZE` are refused
    with 413 before parsing, by the exception handler.)"""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if not isinstance(data, dict):
            raise ApplicationError("invalid", f"the body must be a JSON object, got {type(data).__name__}")
        return data
