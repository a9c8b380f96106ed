"""Regenerated and edited turns leave the model's view (issue 21): the projection hides the
turn a later user message redoes (`regenerates`, `edit_of`), the manifest calls its events
`superseded`, a summary made after the redo leaves it out, and the ledger is not touched."""

from __future__ import annotations

from runs.core.context.governance import ContextGovernance
from runs.core.context.incremental import IncrementalProjection
from runs.core.context.manifest import check_manifest
from runs.core.context.projection import project
from runs.core.context.request import build_context
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session
from sessions_app.core.summary import SummaryRequest, SummaryResult, summarize_session
from tests.sessions.ledger_builders import APP, Ledger


def redo(ledger: Ledger, key: str, target: Event, text: str, answer: str) -> Event:
    """A new turn whose user message regenerates or edits `target`, answered with `answer`."""
    turn = ledger.turn()
    asked = ledger.add(
        Event(
            author="user",
            message=Message(role="user", content=text),
            extensions={key: target.id},
            invocation_id=turn.invocation_id,
            request_id=turn.request_id,
        )
    )
    turn.answer(answer)
    turn.completion()
    return asked


def shown(session: Session) -> list[str]:
    return [item.message.content for item in project(session, filter_key=APP).items]


def dispositions(session: Session) -> dict[int, str]:
    built = build_context(
        session,
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=ContextGovernance(),
        window=8192,
    )
    check_manifest(built.manifest)  # nothing dropped silently
    return {entry.seq: entry.disposition for entry in built.manifest.entries}


def test_a_regenerated_turn_with_its_tool_round_is_hidden_and_marked_superseded() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    question = turn.user("Why is the VPN down?")
    turn.tool_round("lookup", "vpn-gw-1 rebooted")
    turn.answer("The router rebooted.")
    turn.completion()
    redo(ledger, "regenerates", question, "Why is the VPN down?", "A certificate expired.")
    session = ledger.session()

    assert shown(session) == ["Why is the VPN down?", "A certificate expired."]
    assert [e.seq for e in ledger.events if e.id in project(session, filter_key=APP).superseded] == [1, 2, 3, 4]
    assert dispositions(session) == {
        1: "superseded",
        2: "superseded",
        3: "superseded",
        4: "superseded",
        5: "silent",
        6: "verbatim",
        7: "verbatim",
        8: "silent",
    }
    assert len(ledger.events) == 8 and ledger.events[3].text == "The router rebooted."


def test_an_edit_of_an_older_message_hides_only_that_messages_turn() -> None:
    ledger = Ledger()
    first = ledger.simple_turn("What happened in INC-1?", "A disk filled.")
    ledger.simple_turn("And INC-2?", "DNS.")
    question = next(e for e in ledger.events if e.invocation_id == first.invocation_id and e.author == "user")
    redo(ledger, "edit_of", question, "What happened in INC-3?", "A bad deploy.")

    assert shown(ledger.session()) == ["And INC-2?", "DNS.", "What happened in INC-3?", "A bad deploy."]
    assert [d for d in dispositions(ledger.session()).values() if d != "silent"] == [
        "superseded",
        "superseded",
        "verbatim",
        "verbatim",
        "verbatim",
        "verbatim",
    ]


def test_a_chain_of_redos_shows_only_the_newest_version() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    question = turn.user("Why?")
    turn.answer("one")
    again = redo(ledger, "regenerates", question, "Why?", "two")
    edited = redo(ledger, "edit_of", again, "Why, exactly?", "three")
    redo(ledger, "regenerates", edited, "Why, exactly?", "four")

    assert shown(ledger.session()) == ["Why, exactly?", "four"]


def test_a_summary_made_before_the_redo_still_stands_for_what_it_covers() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    question = turn.user("Why is the VPN down?")
    turn.answer("The router rebooted.")
    turn.completion()
    summary = ledger.summary("The user asked about the VPN; the router had rebooted.", through=1)
    redo(ledger, "regenerates", question, "Why is the VPN down?", "A certificate expired.")
    session = ledger.session(summaries=[summary])

    assert shown(session) == ["Why is the VPN down?", "A certificate expired."]
    assert [dispositions(session)[seq] for seq in (1, 2, 4, 5)] == ["summarized", "superseded", "verbatim", "verbatim"]


def test_a_redo_message_that_names_no_loaded_message_hides_nothing() -> None:
    ledger = Ledger()
    ledger.simple_turn("Hello", "Hi.")
    turn = ledger.turn()
    ledger.add(
        Event(
            author="user",
            message=Message(role="user", content="again"),
            extensions={"regenerates": "not-loaded"},
            invocation_id=turn.invocation_id,
            request_id=turn.request_id,
        )
    )
    assert shown(ledger.session()) == ["Hello", "Hi.", "again"]


def test_the_incremental_projection_rebuilds_once_at_a_redo_then_adds_events_again() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    question = turn.user("Why?")
    turn.answer("one")
    incremental = IncrementalProjection()
    session = ledger.session()
    assert incremental.project(session, filter_key=APP).origin == "rebuilt:new"

    for event in [redo(ledger, "regenerates", question, "Why?", "two"), *ledger.events[-2:]]:
        session.events.append(event)
        session.last_seq = event.seq or 0
        kept = incremental.project(session, filter_key=APP)
        assert kept == project(session, filter_key=APP)
    assert incremental.counters.reasons == {"rebuilt:new": 1, "rebuilt:superseded": 1}
    assert kept.origin == "incremental" and [i.message.content for i in kept.items] == ["Why?", "two"]


class _Recording:
    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="the VPN: a certificate expired")


async def test_a_summary_made_after_a_redo_leaves_the_replaced_turn_out_and_moves_past_it() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    question = turn.user("Why is the VPN down?")
    turn.tool_round("lookup", "vpn-gw-1 rebooted")
    turn.answer("The router rebooted.")
    turn.completion()
    redo(ledger, "regenerates", question, "Why is the VPN down?", "A certificate expired.")
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
    await ledger.append_to(service, session)
    summarizer = _Recording()

    outcome = await summarize_session(service, session.key, filter_key=APP, summarizer=summarizer, cascade=False)

    [request] = summarizer.requests
    assert [e.text for e in request.events if e.message is not None] == [
        "Why is the VPN down?",
        "A certificate expired.",
    ]
    assert outcome.primary.reason == "updated"
    stored = await service.get_summary(session.key, filter_key=APP)
    assert stored is not None and stored.last_seq == len(ledger.events)
