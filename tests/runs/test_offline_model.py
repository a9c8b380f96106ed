from __future__ import annotations

import json
from typing import Literal

from runs.core.llm.base import Model, ModelRequest, ModelResponse, ToolSpec
from runs.core.llm.offline import OfflineModel, extractive_summary, offline_model_info
from runs.core.tokens import count_messages, count_text
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Message, ToolCall

# -- tools the planner is offered (their bodies never run here) -------------------------------


def search_logs(service: str | None = None, query: str = "", level: str | None = None, limit: int = 20) -> dict:
    """Search the service logs (checkout-api, payments, auth-gateway) for lines matching a query.

    Args:
        service: Service whose log to search: `checkout-api`, `payments` or `auth-gateway`; omit for all.
        query: Words to look for in the log lines.
        level: Minimum severity: `DEBUG`, `INFO`, `WARN` or `ERROR`.
        limit: Most lines to return.
    """
    raise AssertionError("not called")


def lookup_ticket(ticket_id: str | None = None, query: str = "") -> dict:
    """Look up historical support tickets by id, or search their titles and resolutions.

    Args:
        ticket_id: Ticket id such as `INC-1042`.
        query: Keywords to search for in tickets.
    """
    raise AssertionError("not called")


def inspect_certificate(host: str) -> dict:
    """Inspect the TLS certificate a host serves: validity dates, expiry and chain.

    Args:
        host: Hostname whose certificate to inspect.
    """
    raise AssertionError("not called")


def get_order(order_number: int) -> dict:
    """Fetch an order by its number.

    Args:
        order_number: The order number.
    """
    raise AssertionError("not called")


def restart_service(service: Literal["payments", "checkout-api"]) -> dict:
    """Restart a service.

    Args:
        service: The service to restart.
    """
    raise AssertionError("not called")


def specs(*funcs) -> tuple[ToolSpec, ...]:
    return tuple(FunctionTool(f).spec() for f in funcs)


SUPPORT = specs(search_logs, lookup_ticket, inspect_certificate)
SYSTEM = Message(role="system", content="You are a support engineer.")


def ask(text: str, tools: tuple[ToolSpec, ...] = SUPPORT, history: tuple[Message, ...] = ()) -> ModelRequest:
    return ModelRequest(messages=(SYSTEM, *history, Message(role="user", content=text)), tools=tools)


async def collect(request: ModelRequest, model: OfflineModel | None = None) -> list[ModelResponse]:
    model = model or OfflineModel()
    return [r async for r in model.generate(request)]


async def final(request: ModelRequest) -> ModelResponse:
    responses = await collect(request)
    assert responses[-1].partial is False
    return responses[-1]


def calls_of(response: ModelResponse) -> dict[str, dict]:
    assert response.message is not None
    return {c.name: json.loads(c.arguments) for c in response.message.tool_calls}


# -- identity ---------------------------------------------------------------------------------


def test_offline_model_says_it_is_a_rule_based_planner_with_an_8k_window():
    info = OfflineModel().info()

    assert isinstance(OfflineModel(), Model)
    assert info.name == "offline"
    assert info.context_window == 8192
    assert "not a language model" in info.description
    assert offline_model_info() == info


def test_context_window_can_be_overridden():
    assert OfflineModel(context_window=32_000).info().context_window == 32_000
    assert offline_model_info(16_384).context_window == 16_384


# -- planning ---------------------------------------------------------------------------------


async def test_tls_question_calls_inspect_certificate_with_the_host_from_the_request():
    response = await final(ask("why does payments.internal.example.com fail TLS?"))

    calls = calls_of(response)
    assert calls["inspect_certificate"] == {"host": "payments.internal.example.com"}
    assert response.finish_reason == "tool_calls"
    assert response.message.tool_calls[0].id == "offline_call_1"
    assert "lookup_ticket" not in calls


async def test_log_question_calls_search_logs_with_service_level_and_keywords():
    response = await final(ask("Search the logs for TLS handshake errors in auth-gateway"))

    calls = calls_of(response)
    assert list(calls) == ["search_logs"]
    args = calls["search_logs"]
    assert args["service"] == "auth-gateway"
    assert args["level"] == "ERROR"
    assert args["query"] == "tls handshake"
    assert "limit" not in args  # no number in the request: the default stays


async def test_request_matching_several_tools_calls_them_in_one_response_with_distinct_ids():
    response = await final(
        ask("The payments service fails TLS handshakes, check the certificate of payments.internal.example.com")
    )

    calls = calls_of(response)
    assert calls["inspect_certificate"] == {"host": "payments.internal.example.com"}
    assert calls["search_logs"]["service"] == "payments"
    ids = [c.id for c in response.message.tool_calls]
    assert ids == [f"offline_call_{n}" for n in range(1, len(ids) + 1)]


async def test_ticket_id_fills_the_ticket_parameter_without_a_keyword_query():
    calls = calls_of(await final(ask("What was the resolution of INC-1042?")))

    assert calls == {"lookup_ticket": {"ticket_id": "INC-1042"}}


async def test_enum_and_integer_parameters_are_filled_from_the_request():
    tools = specs(get_order, restart_service)

    calls = calls_of(await final(ask("please restart the payments service", tools)))
    assert calls == {"restart_service": {"service": "payments"}}

    calls = calls_of(await final(ask("fetch order number 4512", tools)))
    assert calls == {"get_order": {"order_number": 4512}}


async def test_tool_whose_required_parameter_cannot_be_filled_is_never_called():
    response = await final(ask("check the certificate please"))

    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    text = response.message.content
    assert "inspect_certificate looks relevant but needs `host`" in text
    assert "offline planner" in text

    response = await final(ask("fetch the order", specs(get_order, restart_service)))
    assert response.message.tool_calls == ()
    assert "get_order looks relevant but needs `order_number`" in response.message.content


async def test_request_matching_no_tool_gets_an_honest_answer_listing_the_tools():
    response = await final(ask("what is the capital of France?"))

    text = response.message.content
    assert response.message.tool_calls == ()
    assert "found no tool" in text
    assert "not a language model" in text
    for spec in SUPPORT:
        assert f"- {spec.name}: {spec.description}" in text


async def test_agent_without_tools_is_told_the_planner_cannot_converse():
    response = await final(ask("hello, tell me a joke", tools=()))

    assert response.message.tool_calls == ()
    assert "no tools" in response.message.content
    assert "offline planner" in response.message.content


# -- answering from results -------------------------------------------------------------------

CERT_RESULT = {
    "host": "payments.internal.example.com",
    "status": "problem",
    "problem": "certificate expired on 2026-11-14T00:00:00Z (17 days ago)",
    "expired": True,
    "not_after": "2026-11-14T00:00:00Z",
    "chain_complete": True,
    "sans": ["payments.internal.example.com"],
}
TICKET_RESULT = {
    "matches": 1,
    "tickets": [
        {"id": "INC-1042", "status": "resolved", "resolution": "Renewed the certificate and deployed fullchain.pem."}
    ],
}


def turn_with_results(*results: tuple[str, dict, str]) -> tuple[Message, ...]:
    calls = tuple(
        ToolCall(id=f"offline_call_{i}", name=name, arguments=json.dumps(args))
        for i, (name, args, _) in enumerate(results, 1)
    )
    tool_messages = tuple(
        Message(role="tool", content=content, tool_call_id=f"offline_call_{i}", tool_name=name)
        for i, (name, _, content) in enumerate(results, 1)
    )
    return (Message(role="assistant", tool_calls=calls), *tool_messages)


def with_results(*results: tuple[str, dict, str]) -> ModelRequest:
    request = ask("why does payments.internal.example.com fail TLS?")
    return ModelRequest(messages=(*request.messages, *turn_with_results(*results)), tools=request.tools)


async def test_answer_is_composed_from_the_tool_results_once_they_are_in():
    response = await final(
        with_results(
            ("inspect_certificate", {"host": "payments.internal.example.com"}, json.dumps(CERT_RESULT)),
            ("lookup_ticket", {"query": "expired certificate"}, json.dumps(TICKET_RESULT)),
        )
    )

    text = response.message.content
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    assert 'inspect_certificate(host="payments.internal.example.com")' in text
    assert "certificate expired on 2026-11-14T00:00:00Z" in text
    assert "expired: true" in text
    # A short Markdown note: the cause first, then the evidence, then the fix.
    cause, evidence, fix = text.index("**Cause:**"), text.index("**Evidence**"), text.index("**Fix**")
    assert cause < evidence < fix
    assert text[cause:evidence].startswith("**Cause:** payments.internal.example.com: certificate expired on")
    assert "Renew the certificate of payments.internal.example.com" in text[fix:]
    assert "On record: INC-1042: Renewed the certificate" in text[fix:]
    assert "Composed by the offline planner" in text


async def test_tool_failure_is_reported_in_the_answer():
    error = json.dumps({"error": "LookupError: no ticket 'INC-9999'; known ticket ids: ['INC-1042']"})
    response = await final(with_results(("lookup_ticket", {"ticket_id": "INC-9999"}, error)))

    text = response.message.content
    assert "`lookup_ticket(ticket_id=\"INC-9999\")`: failed: LookupError: no ticket 'INC-9999'" in text
    assert "no tool produced a result" in text


async def test_long_results_are_digested_not_pasted():
    lines = [f"2026-11-14T00:{i:02d}:00Z ERROR [checkout-api] upstream TLS handshake failed #{i}" for i in range(60)]
    result = {"total_matches": 60, "returned": 60, "lines": lines}
    response = await final(with_results(("search_logs", {"query": "tls"}, json.dumps(result))))

    text = response.message.content
    assert "total_matches: 60" in text
    assert "lines (60, first 3)" in text
    assert lines[0] in text and lines[3] not in text
    assert len(text) < 2000


async def test_earlier_turns_results_do_not_count_for_the_new_question():
    earlier = (
        Message(role="user", content="why does payments.internal.example.com fail TLS?"),
        *turn_with_results(("inspect_certificate", {"host": "payments.internal.example.com"}, json.dumps(CERT_RESULT))),
        Message(role="assistant", content="It expired."),
    )
    response = await final(ask("and what about auth.example.com?", history=earlier))

    assert calls_of(response) == {"inspect_certificate": {"host": "auth.example.com"}}
    # Ids continue after the calls already in the conversation.
    assert response.message.tool_calls[0].id == "offline_call_2"


# -- streaming and determinism ----------------------------------------------------------------


async def test_text_answer_streams_several_deltas_then_exactly_one_final_with_usage():
    request = with_results(("inspect_certificate", {"host": "payments.internal.example.com"}, json.dumps(CERT_RESULT)))
    responses = await collect(request)

    partials, finals = responses[:-1], responses[-1:]
    assert len(partials) >= 3
    assert all(r.partial and r.delta for r in partials)
    assert [r.partial for r in finals] == [False]
    final_response = finals[0]
    assert "".join(r.delta for r in partials) == final_response.message.content
    assert final_response.usage.completion_tokens == count_text(final_response.message.content)
    assert final_response.usage.prompt_tokens > count_messages(request.messages)  # messages + tool schemas
    assert final_response.model == "offline"
    assert len({r.id for r in responses}) == 1


async def test_tool_call_response_is_a_single_final_without_deltas():
    responses = await collect(ask("why does payments.internal.example.com fail TLS?"))

    assert len(responses) == 1
    assert responses[0].partial is False
    assert responses[0].usage.completion_tokens > 0


async def test_same_request_gives_the_same_response():
    request = with_results(
        ("inspect_certificate", {"host": "payments.internal.example.com"}, json.dumps(CERT_RESULT)),
        ("lookup_ticket", {"query": "expired certificate"}, json.dumps(TICKET_RESULT)),
    )
    plan_request = ask("The payments service fails TLS handshakes, check payments.internal.example.com")

    assert await collect(request) == await collect(request, OfflineModel())
    assert await collect(plan_request) == await collect(plan_request, OfflineModel())
    assert await collect(plan_request) != await collect(ask("Search the logs for errors"))


# -- extractive summary -----------------------------------------------------------------------

FILLER = "The team met in the morning and talked about the weekly schedule for a while."
KEY = "At 00:00 UTC the payments.internal.example.com certificate expired and 1287 orders failed with error 502."


def test_summary_respects_the_budget_and_keeps_the_error_sentence_with_numbers():
    text = " ".join([FILLER] * 6 + [KEY] + [FILLER] * 6)
    budget = count_text(KEY) + 5

    summary = OfflineModel().summarize(text, budget)

    assert count_text(summary) <= budget
    assert KEY in summary
    assert count_text(text) > budget * 4  # the input really had to shrink


def test_summary_keeps_the_chosen_sentences_in_their_original_order():
    decision = "We decided to renew the certificate and deploy fullchain.pem by Friday."
    text = " ".join([KEY, FILLER, FILLER, decision, FILLER, FILLER])

    summary = extractive_summary(text, count_text(KEY) + count_text(decision) + 4)

    assert summary == f"{KEY} {decision}"


def test_summary_returns_short_text_unchanged_and_nothing_for_no_budget():
    assert extractive_summary("  Short note.  ", 50) == "Short note."
    assert extractive_summary(KEY, 0) == ""


def test_summary_cuts_a_single_overlong_sentence_to_the_budget():
    sentence = "error " * 200

    summary = extractive_summary(sentence, 20)

    assert 0 < count_text(summary) <= 20
    assert summary.startswith("error error")


def test_a_tool_whose_parameters_are_optional_but_not_all_at_once_is_not_called_without_them():
    def load_window(event_id: str | None = None, seq: int | None = None, before: int = 1) -> dict:
        """Load the conversation around one event of this session, to search its history.

        Args:
            event_id: the anchor event.
            seq: the anchor's position instead.
            before: events before the anchor.
        """
        raise AssertionError("not called")

    anchored = FunctionTool(load_window, requires_one_of=(("event_id",), ("seq",)))
    request = ModelRequest(
        messages=(Message(role="user", content="load the conversation history of this session"),),
        tools=(anchored.spec(),),
    )

    answer = OfflineModel().respond(request)

    assert not answer.tool_calls
    assert "load_window looks relevant but needs `event_id`" in answer.content
