"""Strict serializer fields and parsers shared by every API."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agentsite.api.json_input import InputError, parse_json
from agentsite.errors import ApplicationError


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, lists and objects instead of coercing them."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(_("must be a string, got %(type)s") % {"type": type(data).__name__})
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(_("must be true or false, got %(value)s") % {"value": repr(data)})
        return data


class ObjectJSONParser(JSONParser):
    """JSON bodies that are objects, through `parse_json` (depth, NUL, lone surrogates).
    (Bodies over `DATA_UPLOAD_MAX_MEMORY_SIZE` are refused with 413 before parsing, by the
    exception handler.)"""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = parse_json(stream.read().decode(encoding))
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} ({exc.reason})") from None
        except InputError as exc:
            if exc.code == "malformed_json":
                raise ParseError(f"JSON parse error - {exc.problem}") from None
            raise ApplicationError(exc.code, exc.message(), field=exc.field()) from None
        if not isinstance(data, dict):
            raise ApplicationError(
                "invalid", _("the body must be a JSON object, got %(type)s") % {"type": type(data).__name__}
            )
        return data
