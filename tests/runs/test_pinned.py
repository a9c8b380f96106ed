"""Pinned intent (issue 12, C2): typed records from user directives, superseded by later
corrections, carried verbatim in a budgeted block through summaries and compactions."""

from __future__ import annotations

import asyncio

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, ContextGovernance, PinnedConfig
from runs.core.context.pinned import (
    STATE_KEY,
    PinnedRecord,
    PinnedState,
    PinRefused,
    classify,
    extract_pins,
    fold_pins,
    pin_event,
    pin_quote,
    pinned_block,
    unpin_event,
)
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from runs.core.tools.base import ToolArgumentError, ToolContext
from runs.core.tools.pin import pin_tools
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import SummaryEngine, SummaryRequest, SummaryResult
from tests.sessions.ledger_builders import APP, Ledger


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("Always answer in French.", "directive"),
        ("Never restart the payments service without asking me.", "directive"),
        ("Don't ever use tabs for indentation.", "directive"),
        ("From now on, call me Sam.", "directive"),
        ("Please make sure you always put dates in UTC.", "directive"),
        ("Going forward, keep each answer under 100 words.", "constraint"),
        ("Every time you write a query, name the columns.", "directive"),
        ("Actually, always answer in German.", "correction"),
        ("以后请一律用中文回答。", "directive"),
        ("Réponds toujours en anglais.", "directive"),
        # Not standing instructions: questions, formulas, statements about someone, one-off asks.
        ("Can you always do that?", None),
        ("Don't worry about it.", None),
        ("I always loved painting.", None),
        ("My sister never calls on Sundays.", None),
        ("Cooking for friends is always fun.", None),
        ("Our dog Biscuit always sleeps on the sofa.", None),
        ("Use British spelling from now on.", "directive"),
        ("You always know what to say.", None),
        ("Never been to an animal shelter before.", None),
        ("Whenever I travel, I get lost.", None),
        ("From now on things will be calmer.", None),
        ("Use PostgreSQL instead of MySQL.", None),
        ("Actually, answer in German.", None),
        ("我总是周末去爬山。", None),
        ("以后有机会一起去吃火锅吧！", None),
        ("Ok.", None),
    ],
)
def test_only_standing_instructions_are_classified(sentence: str, kind: str | None) -> None:
    assert classify(sentence) == kind


def test_a_message_yields_each_instruction_verbatim_in_order() -> None:
    pins = extract_pins(
        "Thanks for the report! Always quote the log line. And never guess a date.\nUse Python 3.11 for scripts."
    )
    assert [
        (
            p.kind,
            p.text,
        )
        for p in pins
    ] == [
        ("directive", "Always quote the log line."),
        ("directive", "And never guess a date."),
    ]


def _fold(*messages: str) -> tuple[PinnedState, Ledger]:
    ledger = Ledger()
    for i, text in enumerate(messages):
        ledger.simple_turn(text, f"ok {i}")
    return fold_pins(PinnedState(), ledger.events), ledger


def test_a_correction_supersedes_the_directive_it_restates_and_keeps_the_others() -> None:
    state, ledger = _fold(
        "Always write dates as YYYY-MM-DD.",
        "Never mention the budget figures.",
        "Actually, always write dates as DD/MM/YYYY.",
    )
    assert [r.text for r in state.active] == [
        "Never mention the budget figures.",
        "Actually, always write dates as DD/MM/YYYY.",
    ]
    old, _, new = state.records
    assert old.superseded_by == new.id and new.supersedes == (old.id,)
    assert new.kind == "correction" and new.source == "extractor"
    assert new.source_event_id == ledger.events[6].id and new.source_seq == 7


def test_a_plain_correction_is_pinned_only_when_it_restates_a_pin() -> None:
    state, _ = _fold(
        "Always address me as Captain.", "Actually, address me as Commander.", "Actually, the meeting moved to Friday."
    )
    assert [(r.kind, r.text) for r in state.active] == [("correction", "Actually, address me as Commander.")]
    assert state.records[0].superseded_by == state.records[1].id


def test_a_correction_that_names_no_pin_retires_nothing() -> None:
    state, _ = _fold(
        "Always deploy with MySQL 8.", "Use a string instead of a number for the id.", "Actually, never log the ids."
    )
    assert [r.text for r in state.active] == ["Always deploy with MySQL 8.", "Actually, never log the ids."]


def test_a_restated_directive_replaces_the_old_value_but_a_different_rule_does_not() -> None:
    state, _ = _fold("Always answer in French.", "Never use tabs.", "Always answer in German.", "Never use spaces.")
    assert [r.text for r in state.active] == ["Never use tabs.", "Always answer in German.", "Never use spaces."]


def test_everyday_speech_is_not_pinned() -> None:
    state, _ = _fold(
        "Actually, I went to the park yesterday.",
        "I went hiking instead of staying home.",
        "Nope, never been there.",
        "Don't forget to take it easy.",
        "Make sure you bring a jacket.",
    )
    assert state.records == ()


def test_folding_is_incremental_and_idempotent() -> None:
    state, ledger = _fold("Always quote the log line.", "Never guess a date.")
    assert state.through_seq == len(ledger.events)
    assert fold_pins(state, ledger.events) == state
    again = PinnedState.from_dict(state.to_dict())
    assert again == state
    ledger.simple_turn("Actually, never guess a time.", "ok")
    newer = fold_pins(again, ledger.events)
    assert [r.text for r in newer.active] == ["Always quote the log line.", "Actually, never guess a time."]


def test_a_quote_is_pinned_only_from_the_cited_user_message() -> None:
    ledger = Ledger()
    ledger.simple_turn("Thanks. Please keep the replies in plain text, no markdown, for this chat.", "Sure, noted.")
    user, assistant = ledger.events[:2]
    state = pin_quote(
        PinnedState(),
        event=user,
        event_id=user.id,
        quote="keep the replies in   plain text, no markdown",
        source="model",
    )
    [record] = state.active
    assert (record.source, record.source_event_id, record.text) == (
        "model",
        user.id,
        "keep the replies in plain text, no markdown",
    )
    with pytest.raises(PinRefused, match="not in event"):
        pin_quote(PinnedState(), event=user, event_id=user.id, quote="keep the replies in HTML", source="model")
    with pytest.raises(PinRefused, match="not a message of the user"):
        pin_quote(PinnedState(), event=assistant, event_id=assistant.id, quote="Sure, noted.", source="model")
    with pytest.raises(PinRefused, match="no event"):
        pin_quote(PinnedState(), event=None, event_id="missing", quote="plain text", source="model")


def test_a_pin_by_the_user_or_model_supersedes_only_what_it_names() -> None:
    state, ledger = _fold("Always answer in French.", "Never use tabs.", "Please use German for the answers now.")
    french, tabs = state.active
    german = ledger.events[6]
    state = pin_quote(
        state,
        event=german,
        event_id=german.id,
        quote="use German for the answers",
        source="model",
        supersedes=[french.id],
    )
    assert [(r.text, r.source) for r in state.active] == [
        ("Never use tabs.", "extractor"),
        ("use German for the answers", "model"),
    ]
    with pytest.raises(PinRefused, match="nothing pinned is named"):
        pin_quote(state, event=german, event_id=german.id, quote="German", source="model", supersedes=["nope"])
    unpinned = unpin_event(state, event_id=tabs.source_event_id)
    assert [r.text for r in unpinned.active] == ["use German for the answers"]
    with pytest.raises(PinRefused):
        unpin_event(unpinned, event_id=tabs.source_event_id)
    whole = pin_event(unpinned, event=ledger.events[0], event_id=ledger.events[0].id)
    assert whole.active[-1].source == "user" and whole.active[-1].text == "Always answer in French."


def test_the_block_quotes_active_pins_with_their_source_and_keeps_to_its_budget() -> None:
    state = PinnedState(
        records=tuple(
            PinnedRecord(
                id=f"e{i}:0",
                kind="directive",
                text=f"Always mention server number {i} by its full hostname.",
                source_event_id=f"e{i}",
                source_seq=i + 1,
            )
            for i in range(40)
        )
    )
    block = pinned_block(state, budget_tokens=200, count_text=TIKTOKEN.count_text)
    assert block is not None and block.tokens <= 200 and block.omitted
    assert all(f"[seq {r.source_seq}] {r.text}" in block.text for r in block.shown)
    assert f"{len(block.omitted)} more over the pinned budget" in block.text
    assert pinned_block(PinnedState(), budget_tokens=200, count_text=TIKTOKEN.count_text) is None


class Lossy:
    """A summarizer that forgets everything the user asked for."""

    name = "lossy"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(text=f"They talked ({len(request.events)} events).")


async def test_pins_survive_every_summary_are_stored_in_state_and_the_stale_one_is_gone() -> None:
    service = InMemorySessionService()
    model = ScriptedModel.of(*["fine"] * 6, context_window=8192)
    governance = ContextGovernance(
        summaries=SummaryEngine(summarizer=Lossy(), tokenizer=TIKTOKEN),
        pinned=PinnedConfig(),
        sync_summary_intra_run=False,
    )
    agent = LLMAgent(name="support", model=model, instruction="Be brief.", governance=governance)
    runner = Runner(app=APP, agents=[agent], session_service=service)
    messages = [
        "Always answer in French.",
        "What is the status?",
        "Never restart payments.",
        "And the logs?",
        "Actually, always answer in German.",
        "Summarize please.",
    ]
    session_id = None
    for index, text in enumerate(messages):
        handle = await runner.start(user_id="alice", message=text, session_id=session_id)
        session_id = handle.session_id
        await handle.wait()
        if index in (1, 3):  # forced compactions: the lossy summary replaces everything so far
            key = SessionKey(app=APP, user_id="alice", session_id=session_id)
            await governance.summaries.summarize(service, key, filter_key=APP, force=True)  # type: ignore[union-attr]
    last = model.requests[-1].messages
    assert "They talked" in last[2].content  # the summary stands for the early turns...
    pinned = last[1].content
    assert "Never restart payments." in pinned and "Actually, always answer in German." in pinned
    assert "Always answer in French." not in "\n".join(m.content for m in last)  # ...and the stale rule is gone
    stored = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=session_id or ""))
    assert stored is not None
    state = PinnedState.of_session_state(stored.state)
    assert [r.text for r in state.active] == ["Never restart payments.", "Actually, always answer in German."]
    updates = [e for e in stored.events if STATE_KEY in e.state_delta]
    assert len(updates) == 3  # one per message that changed the pins, none for the others
    assert all(e.message is None for e in updates)


def test_the_inspector_blocks_and_stats_show_the_pins() -> None:
    from runs.core.context.request import build_context

    ledger = Ledger()
    ledger.simple_turn("Always quote the log line.", "ok")
    ledger.add(Event(author="user", message=Message(role="user", content="next")))
    built = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=ContextGovernance(pinned=PinnedConfig(budget_ratio=0.05)),
        window=8192,
    )
    [block] = [b for b in built.blocks() if b["kind"] == "pinned"]
    assert block["pins"][0]["text"] == "Always quote the log line." and block["omitted"] == []
    assert built.stats()["pinned"] == {"tokens": built.pinned.tokens, "shown": 1, "omitted": 0}  # type: ignore[union-attr]
    assert built.request.messages[1].content == built.pinned.text  # type: ignore[union-attr]


def _tool_context(ledger: Ledger) -> ToolContext:
    return ToolContext(
        session=ledger.session(),
        invocation_id="inv-1",
        tool_call_id="call-1",
        agent_name="support",
        cancel_event=asyncio.Event(),
    )


async def test_pin_instruction_pins_a_verbatim_quote_of_the_cited_user_message_and_refuses_others() -> None:
    ledger = Ledger()
    ledger.simple_turn("Thanks! For this repo, please keep commit messages under 50 characters.", "Will do.")
    user, assistant = ledger.events[:2]
    [tool] = pin_tools()
    context = _tool_context(ledger)
    result = await tool.call(context, {"quote": "keep commit messages under 50 characters", "event_id": user.id})
    assert result["pinned"]["source"] == "model" and result["pinned"]["source_event_id"] == user.id
    [record] = PinnedState.from_dict(context.state_delta[STATE_KEY]).active
    assert record.text == "keep commit messages under 50 characters"

    for args in (
        {"quote": "keep commit messages under 72 characters", "event_id": user.id},  # not what they said
        {"quote": "Will do.", "event_id": assistant.id},  # not the user's words
        {"quote": "keep commit messages", "event_id": "no-such-event"},
    ):
        with pytest.raises(ToolArgumentError):
            await tool.call(_tool_context(ledger), args)
