"""Issue 23: the offline model and the token counter do each piece of work once.

A run offers the same tools at every model step and counts the same texts again (the
history, the tools, the answer it streamed when it is appended). These tests count the
encodes behind `count_text` and check that what is remembered still follows what changed.
"""

from __future__ import annotations

import json
from typing import Literal

import pytest

from runs.core import tokens
from runs.core.llm.base import ModelRequest, ToolSpec, tool_json
from runs.core.llm.offline import OfflineModel, plan_tool_calls
from runs.core.textmemo import TextMemo
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Message


def search_logs(service: str | None = None, query: str = "", level: str | None = None) -> dict:
    """Search the service logs (checkout-api, payments, auth-gateway) for lines matching a query.

    Args:
        service: Service whose log to search: `checkout-api`, `payments` or `auth-gateway`; omit for all.
        query: Words to look for in the log lines.
        level: Minimum severity: `DEBUG`, `INFO`, `WARN` or `ERROR`.
    """
    raise AssertionError("not called")


def restart_service(service: Literal["payments", "checkout-api"]) -> dict:
    """Restart a service.

    Args:
        service: The service to restart.
    """
    raise AssertionError("not called")


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the tokenizer really encodes, with an empty cache to start from."""
    seen: list[str] = []
    real = tokens._load_encoder()
    assert real is not None

    def counting(text: str) -> int:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(tokens, "_encoders", [counting])
    monkeypatch.setattr(
        tokens, "COUNTS", TextMemo(tokens.encode_count, max_chars=tokens.CACHE_CHARS, max_text=tokens.CACHE_MAX_TEXT)
    )
    return seen


async def _generate(request: ModelRequest) -> Message:
    responses = [r async for r in OfflineModel().generate(request)]
    assert responses[-1].message is not None
    return responses[-1].message


async def test_a_run_encodes_each_text_once_and_its_second_step_no_tool_again(encodes: list[str]) -> None:
    tools = tuple(FunctionTool(f).spec() for f in (search_logs, restart_service))
    user = Message(role="user", content="Search the logs of payments for errors")
    call = await _generate(ModelRequest(messages=(user,), tools=tools))
    assert call.tool_calls, "the planner calls search_logs"
    first_step = len(encodes)

    # The second step: the tools are specs made afresh by the same tools, as a runner does.
    tools_again = tuple(FunctionTool(f).spec() for f in (search_logs, restart_service))
    result = Message(
        role="tool",
        tool_call_id=call.tool_calls[0].id,
        tool_name="search_logs",
        content=json.dumps({"lines": ["2026-01-01T00:00:00 ERROR [payments] card declined"]}),
    )
    answer = await _generate(ModelRequest(messages=(user, call, result), tools=tools_again))

    assert answer.content
    assert len(encodes) == len(set(encodes)), "a text was encoded twice"
    tool_texts = {tool_json(spec) for spec in tools}
    assert tool_texts <= set(encodes[:first_step])
    assert not tool_texts & set(encodes[first_step:]), "the second step encoded a tool again"
    # What the answer's append counts (runs.core.tokens at the store) is already known.
    before = len(encodes)
    assert tokens.count_text(answer.content) > 0
    assert len(encodes) == before


def test_counts_stay_right_within_the_cache_bound(encodes: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "COUNTS", TextMemo(tokens.encode_count, max_chars=200, max_text=tokens.CACHE_MAX_TEXT))
    texts = [f"line {n}: the certificate of host{n}.example.com expired" for n in range(20)]
    first = [tokens.count_text(t) for t in texts]
    again = [tokens.count_text(t) for t in texts]

    assert first == again
    assert 0 < tokens.COUNTS.chars <= 200
    assert len(tokens.COUNTS) > 0
    long_text = "word " * (tokens.CACHE_MAX_TEXT // 5 + 1)
    tokens.count_text(long_text)
    tokens.count_text(long_text)
    assert encodes.count(long_text) == 2, "a text over CACHE_MAX_TEXT is not kept"


async def test_the_planner_follows_a_tool_whose_schema_changed() -> None:
    shared = FunctionTool(restart_service).spec()
    calls, _ = plan_tool_calls("restart payments", (shared,))
    assert [(c.tool, c.arguments) for c in calls] == [("restart_service", {"service": "payments"})]

    # Same name and description, another schema: the plan is made from the new one.
    parameters = json.loads(json.dumps(shared.parameters))
    parameters["properties"]["service"]["enum"] = ["billing", "checkout-api"]
    changed = ToolSpec(name=shared.name, description=shared.description, parameters=parameters)
    calls, blocked = plan_tool_calls("restart payments", (changed,))
    assert calls == []
    assert [b.tool for b in blocked] == ["restart_service"]
    calls, _ = plan_tool_calls("restart billing", (changed,))
    assert [c.arguments for c in calls] == [{"service": "billing"}]


def test_a_tools_text_is_remembered_for_its_schema_and_made_again_for_another() -> None:
    shared = FunctionTool(restart_service).spec()
    again = FunctionTool(restart_service).spec()  # another tool object: another schema object
    text = tool_json(shared)
    assert json.loads(text) == {"name": shared.name, "description": shared.description, "parameters": shared.parameters}
    assert tool_json(ToolSpec(name=shared.name, description=shared.description, parameters=shared.parameters)) is text
    assert tool_json(again) == text

    parameters = json.loads(json.dumps(shared.parameters))
    parameters["properties"]["service"]["enum"] = ["billing"]
    changed = ToolSpec(name=shared.name, description=shared.description, parameters=parameters)
    assert json.loads(tool_json(changed))["parameters"]["properties"]["service"]["enum"] == ["billing"]
    renamed = ToolSpec(name="restart", description=shared.description, parameters=shared.parameters)
    assert json.loads(tool_json(renamed))["name"] == "restart"


def test_the_remembered_tool_texts_stay_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A client's own tools (/v1) are new objects with every request: they must not pile up.
    from runs.core.llm import base

    monkeypatch.setattr(base, "_TOOL_JSON", {})
    monkeypatch.setattr(base, "_TOOL_JSON_CHARS", [0])
    monkeypatch.setattr(base, "MAX_TOOL_JSON_CHARS", 2_000)
    specs = [ToolSpec(name=f"t{n}", description="d" * 100, parameters={"type": "object"}) for n in range(100)]
    texts = [tool_json(spec) for spec in specs]
    assert all(json.loads(text)["name"] == spec.name for text, spec in zip(texts, specs, strict=True))
    assert 0 < base._TOOL_JSON_CHARS[0] <= 2_000
    assert sum(len(text) for _, text in base._TOOL_JSON.values()) == base._TOOL_JSON_CHARS[0]
