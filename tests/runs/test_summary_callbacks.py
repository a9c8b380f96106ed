"""SPEC 3.4 model callbacks (issue 26): the summarizer's own before/after-model callbacks.

A before_model callback sees (and may change) every summary request, or answer in the
model's place (SPEC 3.4: "Before-model callbacks may short-circuit with a custom response");
an after_model callback may replace the answer. The demo wires the Runner's model callbacks
into its summarizer, so the redactor masks a card number in what a summary sends."""

from __future__ import annotations

from typing import Any

from agentsite.demo.extensions import Redactor
from runs.core.callbacks import CallbackContext, Callbacks, ReplaceResponse, Respond
from runs.core.context.governance import ModelSummaryModel, llm_summarizer
from runs.core.llm.base import ModelRequest
from runs.core.llm.scripted import ScriptedModel
from sessions_app.core.events import Message
from sessions_app.core.summary import LLMSummarizer, SummaryRequest
from tests.sessions.ledger_builders import Ledger

CARD = "4111 1111 1111 1111"


def _request() -> SummaryRequest:
    ledger = Ledger()
    ledger.simple_turn(f"My card {CARD} was charged twice.", "I have opened a refund for the duplicate charge.")
    return SummaryRequest(filter_key=ledger.filter_key, previous=None, events=tuple(ledger.events))


def _sent(model: ScriptedModel) -> str:
    return "\n".join(m.content for request in model.requests for m in request.messages)


async def test_spec_3_4_the_summarizers_before_model_callback_masks_a_card_number_in_the_summary_request() -> None:
    model = ScriptedModel.of("The user was charged twice; a refund is open.")
    summarizer = llm_summarizer(model, callbacks=Callbacks(before_model=[Redactor()]))
    result = await summarizer.summarize(_request())
    assert result.text == "The user was charged twice; a refund is open."
    assert "4111" not in _sent(model) and "[REDACTED CARD]" in _sent(model)
    model.assert_consumed()


async def test_spec_3_4_a_before_model_callback_may_answer_in_the_models_place() -> None:
    seen: list[tuple[str, bool]] = []

    def cached(context: CallbackContext, request: ModelRequest) -> Respond:
        seen.append((context.agent_name, context.invocation is None))
        return Respond(message=Message(role="assistant", content="Summary from the cache."), note="cache hit")

    model = ScriptedModel.of()  # never called
    summarizer = LLMSummarizer(ModelSummaryModel(model, callbacks=Callbacks(before_model=[cached]), name="summaries"))
    result = await summarizer.summarize(_request())
    assert result.text == "Summary from the cache."
    assert model.requests == [] and seen == [("summaries", True)]


async def test_spec_3_4_an_after_model_callback_may_replace_the_summary() -> None:
    def tidy(context: CallbackContext, message: Message) -> ReplaceResponse:
        return ReplaceResponse(message=Message(role="assistant", content=message.content.upper()), note="upper")

    model = ScriptedModel.of("refund open.")
    summarizer = LLMSummarizer(ModelSummaryModel(model, callbacks=Callbacks(after_model=[tidy])))
    assert (await summarizer.summarize(_request())).text == "REFUND OPEN."
    model.assert_consumed()


def test_spec_3_4_the_demo_summarizer_gets_the_runners_model_callbacks(settings: Any) -> None:
    from agentsite.composition import build_summarizer, context_policy

    settings.AGENTSITE_SUMMARIZER = "auto"
    summarizer = build_summarizer(context_policy(), ScriptedModel.of())
    model = summarizer.model
    assert isinstance(model, ModelSummaryModel) and model.callbacks is not None
    assert [type(c) for c in model.callbacks.before_model] == [Redactor]
