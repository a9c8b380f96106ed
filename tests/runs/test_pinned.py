"""Pinned intent (issue 12, C2): typed records from user directives, superseded by later
corrections, carried verbatim in a budgeted block through summaries and compactions."""

from __future__ import annotations

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, ContextGovernance, PinnedConfig
from runs.core.context.pinned import (
    STATE_KEY,
    PinnedRecord,
    PinnedState,
    classify,
    extract_pins,
    fold_pins,
    pinned_block,
)
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import SummaryEngine, SummaryRequest, SummaryResult
from tests.sessions.ledger_builders import APP, Ledger


@pytest.mark.parametrize(("sentence", "kind"), [
    ("Always answer in French.", "directive"),
    ("Never restart the payments service without asking me.", "directive"),
    ("Don't use tabs for indentation.", "directive"),
    ("From now on, call me Sam.", "directive"),
    ("Please make sure every date is in UTC.", "directive"),
    ("Keep each answer under 100 words.", "constraint"),
    ("Use no more than 3 bullet points.", "constraint"),
    ("Use PostgreSQL instead of MySQL.", "correction"),
    ("Actually, answer in German.", "correction"),
    ("Let's go with the blue-green deploy.", "decision"),
    ("We decided to keep the old schema.", "decision"),
    # Not instructions: questions, conversation formulas, plain statements.
    ("Can you always do that?", None),
    ("Don't worry about it.", None),
    ("Never give up!", None),
    ("I always loved painting.", None),
    ("Never been to an animal shelter before.", None),
    ("You must have been thrilled!", None),
    ("Always here to help!", None),
    ("No problem at all.", None),
    ("Ok.", None),
])
def test_sentences_are_classified_by_kind(sentence: str, kind: str | None) -> None:
    assert classify(sentence) == kind


def test_a_message_yields_each_instruction_verbatim_in_order() -> None:
    pins = extract_pins("Thanks for the report! Always quote the log line. And never guess a date.\nUse Python 3.11 for scripts.")
    assert [(p.kind, p.text) for p in pins] == [
        ("directive", "Always quote the log line."), ("directive", "And never guess a date."),
        ("directive", "Use Python 3.11 for scripts."),
    ]


def _fold(*messages: str) -> tuple[PinnedState, Ledger]:
    ledger = Ledger()
    for i, text in enumerate(messages):
        ledger.simple_turn(text, f"ok {i}")
    return fold_pins(PinnedState(), ledger.events), ledger


def test_a_correction_supersedes_the_directive_it_corrects_and_keeps_the_others() -> None:
    state, ledger = _fold(
        "Always write dates as YYYY-MM-DD.", "Never mention the budget figures.", "Actually, write dates as DD/MM/YYYY.",
    )
    assert [r.text for r in state.active] == ["Never mention the budget figures.", "Actually, write dates as DD/MM/YYYY."]
    old, _, new = state.records
    assert old.superseded_by == new.id and new.supersedes == (old.id,)
    assert new.kind == "correction" and new.source_event_id == ledger.events[6].id and new.source_seq == 7


def test_instead_of_retires_every_pin_that_names_the_old_choice() -> None:
    state, _ = _fold("Always deploy with MySQL 8.", "Use PostgreSQL instead of MySQL.")
    assert [r.text for r in state.active] == ["Use PostgreSQL instead of MySQL."]


def test_a_restated_directive_replaces_the_old_value_but_a_different_rule_does_not() -> None:
    state, _ = _fold("Always answer in French.", "Never use tabs.", "Always answer in German.", "Never use spaces.")
    assert [r.text for r in state.active] == ["Never use tabs.", "Always answer in German.", "Never use spaces."]
    state, _ = _fold("Always mention server number 4 by its full hostname.", "Always mention server number 7 by its full hostname.")
    assert [r.text for r in state.active] == ["Always mention server number 7 by its full hostname."]


def test_everyday_actually_is_not_pinned_unless_it_corrects_a_pin() -> None:
    state, _ = _fold(
        "Actually, I went to the park yesterday.", "I went hiking instead of staying home.", "Nope, never been there.",
    )
    assert state.records == ()


def test_folding_is_incremental_and_idempotent() -> None:
    state, ledger = _fold("Always quote the log line.", "Never guess a date.")
    assert state.through_seq == len(ledger.events)
    assert fold_pins(state, ledger.events) == state
    again = PinnedState.from_dict(state.to_dict())
    assert again == state
    ledger.simple_turn("Actually, guess a date when the log has none.", "ok")
    newer = fold_pins(again, ledger.events)
    assert [r.text for r in newer.active] == ["Always quote the log line.", "Actually, guess a date when the log has none."]


def test_the_block_quotes_active_pins_with_their_source_and_keeps_to_its_budget() -> None:
    state = PinnedState(records=tuple(
        PinnedRecord(id=f"e{i}:0", kind="directive", text=f"Always mention server number {i} by its full hostname.",
                     source_event_id=f"e{i}", source_seq=i + 1)
        for i in range(40)
    ))
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
        summaries=SummaryEngine(summarizer=Lossy(), tokenizer=TIKTOKEN), pinned=PinnedConfig(), sync_summary_intra_run=False,
    )
    agent = LLMAgent(name="support", model=model, instruction="Be brief.", governance=governance)
    runner = Runner(app=APP, agents=[agent], session_service=service)
    messages = [
        "Always answer in French.", "What is the status?", "Never restart payments.",
        "And the logs?", "Actually, answer in German.", "Summarize please.",
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
    assert "Never restart payments." in pinned and "Actually, answer in German." in pinned
    assert "Always answer in French." not in "\n".join(m.content for m in last)  # ...and the stale rule is gone
    stored = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=session_id or ""))
    assert stored is not None
    state = PinnedState.of_session_state(stored.state)
    assert [r.text for r in state.active] == ["Never restart payments.", "Actually, answer in German."]
    updates = [e for e in stored.events if STATE_KEY in e.state_delta]
    assert len(updates) == 3  # one per message that changed the pins, none for the others
    assert all(e.message is None for e in updates)


def test_the_inspector_blocks_and_stats_show_the_pins() -> None:
    from runs.core.context.request import build_context

    ledger = Ledger()
    ledger.simple_turn("Always quote the log line.", "ok")
    ledger.add(Event(author="user", message=Message(role="user", content="next")))
    built = build_context(
        ledger.session(), filter_key=APP, instruction="Be brief.", tools=[],
        governance=ContextGovernance(pinned=PinnedConfig(budget_ratio=0.05)), window=8192,
    )
    [block] = [b for b in built.blocks() if b["kind"] == "pinned"]
    assert block["pins"][0]["text"] == "Always quote the log line." and block["omitted"] == []
    assert built.stats()["pinned"] == {"tokens": built.pinned.tokens, "shown": 1, "omitted": 0}  # type: ignore[union-attr]
    assert built.request.messages[1].content == built.pinned.text  # type: ignore[union-attr]
