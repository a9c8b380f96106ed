"""What a JSON-RPC request must be before the SDK sees it: a method of the caller's protocol
version, with params that parse strictly.

The SDK parses 1.0 params with unknown fields ignored, which also turns an unknown enum
value into the zero value: `ListTasks {"status": "INVALID_STATUS"}` would list every task,
unfiltered. Its 0.3 models ignore unknown fields too. Here both are refused with -32602
naming the field (SPEC: invalid method parameters). A 0.3 method name under
`A2A-Version: 1.0` is refused with -32601 saying which version the method belongs to,
instead of the SDK's `-32603 Internal error` (a 1.0 name without the header gets the SDK's
own -32009, which says so already).
"""

from __future__ import annotations

import re
from typing import Any

from a2a.server.jsonrpc_models import JSONRPCError, MethodNotFoundError

# Through the dispatcher, which imports the 0.3 adapter (importing the adapter first is circular).
from a2a.server.routes.jsonrpc_dispatcher import JSONRPC03Adapter, JsonRpcDispatcher
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from a2a.utils.errors import A2AError, InvalidParamsError
from google.protobuf.json_format import ParseDict, ParseError
from pydantic import BaseModel

METHODS_1_0: dict[str, type] = dict(JsonRpcDispatcher.METHOD_TO_MODEL)
METHODS_0_3: dict[str, type[BaseModel]] = dict(JSONRPC03Adapter.METHOD_TO_MODEL)
# The 1.0 name of each 0.3 method, for the message that points a caller to it.
RENAMED = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}

_PARSE_PREFIX = re.compile(r"^(?:Failed to parse (\w+) field: )")
_UNKNOWN = re.compile(r'has no field named "([^"]+)" at "([^"]+)"')
_ENUM = re.compile(r"Invalid enum value (\S+) for enum type ([\w.]+)")


def protocol_major(header: str | None) -> int:
    """The major version an `A2A-Version` header names (none: 0.3, as the SDK reads it)."""
    version = (header or "").strip() or PROTOCOL_VERSION_0_3
    major, _, _ = version.partition(".")
    return int(major) if major.isdigit() else -1


def check_request(body: Any, version: str | None) -> A2AError | JSONRPCError | None:
    """The error to answer for this JSON-RPC body, or None to let the SDK serve it."""
    if not isinstance(body, dict) or not isinstance(body.get("method"), str):
        return None  # not a request the SDK can route: it answers that itself
    method: str = body["method"]
    params = body.get("params", {})
    major = protocol_major(version)
    if method in METHODS_1_0:
        if major == 0:
            return None  # the SDK answers -32009, naming the version the method expects
        return _check_1_0(METHODS_1_0[method], params)
    if method in METHODS_0_3:
        if major != 0:
            renamed = RENAMED.get(method)
            hint = f"; its {PROTOCOL_VERSION_1_0} name is {renamed!r}" if renamed else ""
            return MethodNotFoundError(
                message=(
                    f"method {method!r} belongs to A2A {PROTOCOL_VERSION_0_3}, not to the requested version "
                    f"{(version or '').strip()!r}{hint} (0.3 names are served without an A2A-Version header "
                    f"or with 'A2A-Version: {PROTOCOL_VERSION_0_3}')"
                )
            )
        return _check_0_3(METHODS_0_3[method], params)
    return None


def _invalid(field: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(message=f"invalid params: {field}: {problem}", data={"field": field})


def _check_1_0(model: type, params: Any) -> InvalidParamsError | None:
    if not isinstance(params, dict):
        return _invalid("params", f"expected an object, got {type(params).__name__}")
    try:
        ParseDict(params, model(), ignore_unknown_fields=False)
    except ParseError as exc:
        return _invalid(*_describe(str(exc)))
    return None


def _describe(text: str) -> tuple[str, str]:
    """(`params.<path>`, problem) from a protobuf ParseError's message."""
    text = text.split("\n", 1)[0]
    path: list[str] = []
    while match := _PARSE_PREFIX.match(text):
        path.append(match.group(1))
        text = text[match.end() :]
    unknown = _UNKNOWN.search(text)
    if unknown:
        # "at" names the message that holds the field: its type, then the path below it.
        where = unknown.group(2).split(".", 1)
        inner = where[1] if len(where) > 1 else ""
        return ".".join(["params", *([inner] if inner else []), unknown.group(1)]), "unknown field"
    field = ".".join(["params", *path])
    enum = _ENUM.search(text)
    if enum:
        return field, f"{enum.group(1)!r} is not a {enum.group(2).rsplit('.', 1)[-1]} value"
    return field, re.sub(r"(?: at [\w.\[\]]+)?\.*$", "", text)


def _check_0_3(model: type[BaseModel], params: Any) -> InvalidParamsError | None:
    """Unknown top-level params of a 0.3 method (its models check types and enums)."""
    if not isinstance(params, dict):
        return None  # the SDK's model refuses it with -32602
    field = model.model_fields.get("params")
    params_model = field.annotation if field is not None else None
    if not (isinstance(params_model, type) and issubclass(params_model, BaseModel)):
        return None
    known = set(params_model.model_fields)
    known |= {info.alias for info in params_model.model_fields.values() if info.alias}
    for key in params:
        if key not in known:
            return _invalid(f"params.{key}", "unknown field")
    return None
