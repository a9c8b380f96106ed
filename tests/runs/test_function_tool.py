"""FunctionTool: schema from type hints and docstring; arguments checked before the call."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from runs.core.tools.base import ToolArgumentError, ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app.core.session import Session


def search_logs(
    service: Literal["api", "db"], query: str, limit: int = 20, level: str | None = None, tags: list[str] | None = None
) -> dict[str, object]:
    """Search the service logs.

    Longer explanation that is not part of the description.

    Args:
        service: which service's logs
        query: words to look for
        limit: at most this many lines
    """
    return {"service": service, "query": query, "limit": limit, "level": level, "tags": tags}


def context() -> ToolContext:
    return ToolContext(
        session=Session(app="a", user_id="u", id="s"),
        invocation_id="i",
        tool_call_id="c",
        agent_name="agent",
        cancel_event=asyncio.Event(),
    )


def test_schema_comes_from_hints_and_docstring() -> None:
    spec = FunctionTool(search_logs).spec()
    assert spec.name == "search_logs"
    assert spec.description == "Search the service logs."
    params = spec.parameters
    assert params["required"] == ["service", "query"]
    assert params["properties"]["service"] == {
        "type": "string",
        "enum": ["api", "db"],
        "description": "which service's logs",
    }
    assert params["properties"]["limit"] == {"type": "integer", "default": 20, "description": "at most this many lines"}
    assert params["properties"]["level"] == {"type": "string"}
    assert params["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert params["additionalProperties"] is False


async def test_valid_arguments_reach_the_function() -> None:
    result = await FunctionTool(search_logs).call(context(), {"service": "db", "query": "tls", "limit": 3.0})
    assert result == {"service": "db", "query": "tls", "limit": 3, "level": None, "tags": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"query": "x"}, "missing required argument(s) ['service']"),
        ({"service": "web", "query": "x"}, "expected one of ['api', 'db']"),
        ({"service": "api", "query": "x", "limit": "5"}, "limit: expected an integer"),
        ({"service": "api", "query": "x", "limit": True}, "limit: expected an integer"),
        ({"service": "api", "query": "x", "tags": "a"}, "tags: expected an array"),
        ({"service": "api", "query": "x", "tags": [1]}, "tags[0]: expected a string"),
        ({"service": "api", "query": "x", "extra": 1}, "unexpected argument(s) ['extra']"),
    ],
)
async def test_invalid_arguments_are_refused_before_the_call(args: dict[str, object], message: str) -> None:
    with pytest.raises(ToolArgumentError) as raised:
        await FunctionTool(search_logs).call(context(), args)
    assert message in str(raised.value)


async def test_a_tool_can_take_the_context_and_record_state() -> None:
    async def remember(ctx: ToolContext, fact: str) -> str:
        """Remember a fact."""
        ctx.state_delta["fact"] = fact
        return "noted"

    tool = FunctionTool(remember)
    assert list(tool.spec().parameters["properties"]) == ["fact"]
    ctx = context()
    assert await tool.call(ctx, {"fact": "prod runs Go"}) == "noted"
    assert ctx.state == {"fact": "prod runs Go"}


def test_unsupported_parameter_types_are_refused_at_definition() -> None:
    def bad(when: object) -> None:
        """Bad."""

    with pytest.raises(TypeError, match="unsupported parameter type"):
        FunctionTool(bad)
