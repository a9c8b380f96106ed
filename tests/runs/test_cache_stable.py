"""Cache-stable projection (issue 12, C4): Pass 1 elides in batches, so the bytes of an
earlier request change only when a batch fills (or the summary moves)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runs.core.context.compaction import CompactionConfig
from runs.core.context.governance import TIKTOKEN, ContextGovernance
from runs.core.context.request import BuiltRequest, build_context
from runs.core.llm.base import ToolSpec
from sessions_app.core.events import Message
from tests.sessions.ledger_builders import APP, Ledger

BIG = "log line with details " * 400  # 1,601 tokens
SESSION_LOAD = ToolSpec(name="session_load", description="load events", parameters={"type": "object"})


def build(ledger: Ledger, active: str, config: CompactionConfig) -> BuiltRequest:
    return build_context(
        ledger.session(),
        filter_key=APP,
        instruction="Help.",
        tools=[SESSION_LOAD],
        governance=ContextGovernance(compaction=config, manifest_check=True),
        window=1_000_000,
        active_invocation_id=active,
        current_unit=f"req:req-{active}",
    )


def elided(built: BuiltRequest) -> set[int]:
    return {i.event.seq or 0 for i in built.items if i.compaction == "pass1" and i.event is not None}


def turn_with_result(ledger: Ledger, i: int, content: str) -> str:
    turn = ledger.turn()
    turn.user(f"question {i}")
    turn.tool_round("search_logs", content, call_id=f"c{i}")
    return turn.invocation_id


def finish(ledger: Ledger, i: int) -> None:
    last = ledger.events[-1]
    turn = ledger.turn(invocation_id=last.invocation_id, request_id=last.request_id)
    turn.answer(f"answer {i}")
    turn.completion()


def test_batched_elision_keeps_results_verbatim_until_the_batch_is_full() -> None:
    config = CompactionConfig(clear_at_least=4000)
    ledger = Ledger()
    for i in range(3):
        turn_with_result(ledger, i, BIG)
        finish(ledger, i)
    active = turn_with_result(ledger, 3, BIG)
    # Turns 0 and 1 are past protection (3,202 tokens waiting): under the batch, kept.
    assert elided(build(ledger, active, config)) == set()
    assert len(elided(build(ledger, active, CompactionConfig()))) == 2  # the seed elides at once
    finish(ledger, 3)
    active = turn_with_result(ledger, 4, BIG)
    # Turn 2 joins them: 4,803 tokens, the batch fills and all three go at once.
    assert len(elided(build(ledger, active, config))) == 3


def test_the_same_request_is_built_byte_for_byte_twice() -> None:
    ledger = Ledger()
    for i in range(4):
        turn_with_result(ledger, i, BIG)
        finish(ledger, i)
    active = turn_with_result(ledger, 4, BIG)
    config = CompactionConfig(clear_at_least=3000)
    first, second = build(ledger, active, config), build(ledger, active, config)
    assert first.request.messages == second.request.messages
    assert elided(first)


def is_prefix(before: tuple[Message, ...], after: tuple[Message, ...]) -> bool:
    return after[: len(before)] == before


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 50, 300, 1200, 2500]), min_size=4, max_size=14),
    batch=st.sampled_from([1, 1500, 4000, 9000]),
    keep=st.integers(min_value=0, max_value=2),
)
def test_earlier_bytes_change_only_when_a_batch_fills(sizes: list[int], batch: int, keep: int) -> None:
    """Between two consecutive calls (no summary change) either the previous request is a
    prefix of the next one, or elision moved by a whole batch; it never takes one back."""
    config = CompactionConfig(clear_at_least=batch, keep_recent_requests=keep)
    ledger = Ledger()
    previous: BuiltRequest | None = None
    for i, size in enumerate(sizes):
        content = ("word " * size).strip() or "ok"
        active = turn_with_result(ledger, i, content)
        built = build(ledger, active, config)
        if previous is not None:
            grown = elided(built) - elided(previous)
            assert elided(previous) <= elided(built)
            if not is_prefix(previous.request.messages, built.request.messages):
                assert grown
                weight = sum(
                    TIKTOKEN.count_text(e.message.content)
                    for e in ledger.events
                    if e.seq in grown and e.message is not None
                )
                assert weight >= batch
        previous = built
        finish(ledger, i)
