"""History projection (SPEC 4.3-4.5): summary block + events after the boundary, with repairs."""

from __future__ import annotations

from typing import Any

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import ContextGovernance
from runs.core.context.projection import format_summary, project
from runs.core.context.request import build_context
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary, select_summary
from tests.sessions.ledger_builders import APP, T0, Ledger, assert_tool_calls_paired, roles


def messages(
    session: Session, *, active: str | None = None, instruction: str = "Be brief.", **kwargs: Any
) -> list[Any]:
    built = build_context(
        session,
        filter_key=APP,
        instruction=instruction,
        tools=[],
        governance=kwargs.pop("governance", None),
        window=8192,
        active_invocation_id=active,
        **kwargs,
    )
    return list(built.request.messages)


def test_without_a_summary_the_history_is_the_loaded_ledger() -> None:
    ledger = Ledger()
    ledger.simple_turn("check A", "A is open.", tool=("lookup", '{"id": "A"}'))
    ledger.turn().user("and now?")
    sent = messages(ledger.session())
    assert roles(sent) == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[0].content == "Be brief." and sent[-1].content == "and now?"


def test_the_summary_block_follows_the_instruction_and_replaces_what_it_covers() -> None:
    ledger = Ledger()
    ledger.simple_turn("first question", "first answer")
    ledger.simple_turn("second question", "second answer")
    summary = ledger.summary("they asked twice", through=3)
    sent = messages(ledger.session(summaries=[summary]))
    assert roles(sent) == ["system", "system", "user", "assistant"]
    assert sent[1].content == format_summary("they asked twice", "system")
    assert (
        "<summary_of_previous_interactions>\nthey asked twice\n</summary_of_previous_interactions>" in sent[1].content
    )
    assert [m.content for m in sent[2:]] == ["second question", "second answer"]


def test_user_injection_opens_the_first_user_message_with_the_block() -> None:
    ledger = Ledger()
    ledger.simple_turn("first", "1")
    ledger.simple_turn("second", "2")
    governance = ContextGovernance(summary_injection="user")
    sent = messages(ledger.session(summaries=[ledger.summary("s", through=3)]), governance=governance)
    assert roles(sent) == ["system", "user", "assistant"]
    assert sent[1].content.startswith(format_summary("s", "user")) and sent[1].content.endswith("\n\nsecond")


def test_an_intra_run_summary_keeps_the_user_message_and_only_the_latest_round_as_the_resume_tail() -> None:
    ledger = Ledger()
    ledger.simple_turn("old", "old answer")
    turn = ledger.turn()
    turn.user("now")
    for n in range(3):
        turn.tool_round("lookup", f"result {n}")
    summary = ledger.summary("everything so far", through=len(ledger.events))  # covers the active turn too
    built = build_context(
        ledger.session(summaries=[summary]),
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=None,
        window=8192,
        active_invocation_id=turn.invocation_id,
    )
    sent = list(built.request.messages)
    assert roles(sent) == ["system", "system", "user", "assistant", "tool"]
    assert sent[2].content == "now" and sent[4].content == "result 2"  # SPEC 4.5 resume tail
    assert [i.resume_tail for i in built.items] == [False, True, True]
    assert built.projection.intra_run and built.stats()["intra_run_summary"] and built.stats()["resume_tail"] == 2
    # Without an active turn the same boundary hides it all.
    assert roles(messages(ledger.session(summaries=[summary]))) == ["system", "system"]


def test_resume_tail_results_the_model_already_answered_become_current_invocation_placeholders() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("investigate")
    turn.tool_round("lookup", "first " + "x " * 3000)
    tail_call = turn.tool_round("lookup", "second " + "y " * 3000, args={"query": "z " * 3000})
    summary = ledger.summary("rounds one and two", through=len(ledger.events))
    turn.tool_round("lookup", "third " + "w " * 3000)  # after the boundary: the model read the tail
    governance = ContextGovernance(manifest_check=True)
    built = build_context(
        ledger.session(summaries=[summary]),
        filter_key=APP,
        instruction="",
        tools=[],
        governance=governance,
        window=100_000,
        active_invocation_id=turn.invocation_id,
        current_unit=f"req:req-{turn.invocation_id}",
    )
    tail = [i for i in built.items if i.resume_tail]
    result = next(i for i in tail if i.message.role == "tool")
    assert result.message.tool_call_id == tail_call and "reason: current_invocation_summary" in result.message.content
    assert result.event is not None and result.event.id in result.message.content
    call = next(i for i in tail if i.message.tool_calls)
    assert call.compaction == "args" and "_context_note" in call.message.tool_calls[0].arguments
    assert built.items[-1].message.content.startswith("third")  # after the boundary: verbatim
    assert built.compaction.resume_tail == 2
    assert built.manifest is not None and not built.manifest.dropped


def test_unread_resume_tail_results_stay_verbatim() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("investigate")
    turn.tool_round("lookup", "first " + "x " * 3000)
    turn.tool_round("lookup", "second " + "y " * 3000)
    summary = ledger.summary("both rounds", through=len(ledger.events))  # made right before this call
    built = build_context(
        ledger.session(summaries=[summary]),
        filter_key=APP,
        instruction="",
        tools=[],
        governance=ContextGovernance(),
        window=100_000,
        active_invocation_id=turn.invocation_id,
        current_unit=f"req:req-{turn.invocation_id}",
    )
    assert built.items[-1].message.content.startswith("second") and built.items[-1].compaction is None


def test_a_run_over_its_budget_without_a_summary_is_fitted_oldest_results_first() -> None:
    ledger = Ledger()
    ledger.simple_turn("earlier", "earlier answer")
    turn = ledger.turn()
    turn.user("read everything")
    for n in range(6):
        turn.tool_round("read_log", f"chunk {n} " + "log line " * 400)
    governance = ContextGovernance(manifest_check=True)
    plain = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=governance,
        window=4096,
        active_invocation_id=turn.invocation_id,
        current_unit=f"req:req-{turn.invocation_id}",
    )
    assert plain.sent_tokens > 4096
    fitted = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=governance,
        window=4096,
        active_invocation_id=turn.invocation_id,
        current_unit=f"req:req-{turn.invocation_id}",
        fit_to=2867,
    )
    assert fitted.sent_tokens <= 2867
    results = [i for i in fitted.items if i.message.role == "tool"]
    assert results[-1].compaction is None and results[-1].message.content.startswith("chunk 5")  # unread: kept
    replaced = [r.compaction is not None for r in results]
    assert replaced == sorted(replaced, reverse=True) and 0 < sum(replaced) < 6  # oldest first, only as needed
    assert all("reason: current_invocation_summary" in r.message.content for r in results if r.compaction)
    assert any(m.role == "user" and m.content == "read everything" for m in fitted.request.messages)
    assert fitted.compaction.fallback == sum(replaced) == fitted.stats()["compaction"]["fallback"]


def test_a_latest_round_too_large_for_the_window_is_cut_only_as_far_as_needed() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("read it")
    turn.tool_round("read_log", "head " + "log line " * 3000 + " tail")
    fitted = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="",
        tools=[],
        governance=ContextGovernance(),
        window=4096,
        active_invocation_id=turn.invocation_id,
        current_unit=f"req:req-{turn.invocation_id}",
        fit_to=2867,
    )
    result = fitted.items[-1]
    assert result.compaction == "pass2" and result.event is not None and result.event.id in result.message.content
    # Cut to the window less the answer reserve, not further: the model keeps what fits.
    assert 3000 < fitted.sent_tokens <= 4096 - 409


def test_other_agents_events_are_one_merged_context_message_and_still_accounted_for() -> None:
    ledger = Ledger(agent="research")
    turn = ledger.turn()
    turn.user("write a report")
    turn.tool_round("lookup", "facts about tls")
    turn.answer("TLS facts gathered.")
    built = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="",
        tools=[],
        governance=ContextGovernance(manifest_check=True),
        window=8192,
        active_invocation_id=turn.invocation_id,
        agent_name="write",
    )
    sent = list(built.request.messages)
    assert roles(sent) == ["user", "user"]
    assert sent[1].content.splitlines()[0].startswith("For context: [research] called tool `lookup`")
    assert sent[1].content.splitlines()[-1] == "For context: [research] said: TLS facts gathered."
    assert built.manifest is not None and built.manifest.counts().get("verbatim") == 4
    # The same events are the agent's own turns for the agent that wrote them.
    own = build_context(
        ledger.session(),
        filter_key=APP,
        instruction="",
        tools=[],
        governance=None,
        window=8192,
        active_invocation_id=turn.invocation_id,
        agent_name="research",
    )
    assert roles(own.request.messages) == ["user", "assistant", "tool", "assistant"]


def test_a_hidden_tool_call_with_shown_results_comes_back_with_only_those_calls() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("two lookups")
    turn.calls(("lookup", {"id": 1}, "c1"), ("lookup", {"id": 2}, "c2"))
    turn.result("c1", "one")
    turn.result("c2", "two")
    turn.answer("done")
    # The boundary falls between the two results: c1 is covered, c2 is not.
    summary = ledger.summary("they asked for lookups", through=3)
    projection = project(ledger.session(summaries=[summary]), filter_key=APP)
    kinds = [i.kind for i in projection.items]
    assert kinds == ["anchor", "restored_call", "event", "event"]
    restored = projection.items[1].message
    assert [c.id for c in restored.tool_calls] == ["c2"] and restored.content == ""
    assert_tool_calls_paired([i.message for i in projection.items])


def test_a_turn_whose_user_message_is_hidden_gets_it_back_as_an_anchor() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("what broke?")
    turn.tool_round("search_logs", "timeouts")
    turn.answer("timeouts broke it")
    summary = ledger.summary("asked what broke", through=3)  # user, call, result
    projection = project(ledger.session(summaries=[summary]), filter_key=APP)
    assert [(i.kind, i.message.content) for i in projection.items] == [
        ("anchor", "what broke?"),
        ("event", "timeouts broke it"),
    ]


def test_orphans_become_plain_context_that_keeps_their_payload() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("go")
    turn.calls(("lookup", {"id": "X"}, "lost"))  # a run cancelled before its result
    turn.completion()
    later = ledger.turn()
    later.user("again")
    later.result("ghost", "a result without its call", tool="lookup")
    later.answer("ok")
    sent = messages(ledger.session())
    assert roles(sent) == ["system", "user", "user", "user", "user", "assistant"]
    assert (
        sent[2].content
        == 'For context: [support] called tool `lookup` with arguments {"id": "X"}; no result of it is recorded.'
    )
    assert sent[4].content == "For context: [support] tool `lookup` (call ghost) returned: a result without its call"
    assert_tool_calls_paired(sent)


def test_results_are_moved_up_to_follow_their_call() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("go")
    turn.calls(("lookup", {}, "c1"))
    turn.answer("interleaved text")
    turn.result("c1", "late result")
    sent = messages(ledger.session())
    assert roles(sent) == ["system", "user", "assistant", "tool", "assistant"]
    assert sent[3].tool_call_id == "c1"


def test_tool_call_ids_reused_across_turns_pair_by_position() -> None:
    ledger = Ledger()
    for answer in ("first", "second", "third"):
        turn = ledger.turn()
        turn.user(f"ask {answer}")
        turn.calls(("lookup", {}, "call_1"))  # the same id every turn, as some providers do
        turn.result("call_1", f"{answer} result")
        turn.answer(answer)
    summary = ledger.summary("first turn", through=4)  # up to turn 1's answer
    sent = messages(ledger.session(summaries=[summary]))
    assert roles(sent) == ["system", "system"] + ["user", "assistant", "tool", "assistant"] * 2
    assert [m.content for m in sent if m.role == "tool"] == ["second result", "third result"]
    assert_tool_calls_paired(sent)


def test_a_history_never_opens_with_an_assistant_message() -> None:
    ledger = Ledger()
    ledger.simple_turn("q1", "a1")
    ledger.simple_turn("q2", "a2")
    cut = Session(app=APP, user_id="alice", id="s", events=ledger.events[1:])  # a window cut after q1
    sent = messages(cut)
    assert roles(sent) == ["system", "user", "user", "assistant"]
    assert sent[1].content == "For context: [support] said: a1"


def test_events_of_other_filter_keys_are_not_shown() -> None:
    ledger = Ledger()
    ledger.simple_turn("mine", "ok")
    Ledger(filter_key="other", events=ledger.events).simple_turn("theirs", "nope")
    assert [m.content for m in messages(ledger.session())][1:] == ["mine", "ok"]


def test_the_summary_of_the_key_wins_else_every_summary_of_a_parent_key_joins() -> None:
    def summary(key: str, text: str, last_seq: int) -> Summary:
        return Summary(
            filter_key=key,
            text=text,
            boundary=SummaryBoundary(cutoff_at=T0, last_event_id=f"e{last_seq}", last_seq=last_seq),
        )

    exact, parent, whole = summary("app/child", "child", 5), summary("app", "parent", 3), summary("", "whole", 5)
    assert select_summary({"app/child": exact, "app": parent}, "app/child") is exact
    joined = select_summary({"app": parent, "": whole}, "app/child")
    assert joined is not None and joined.text == "whole\n\nparent"
    # The earliest boundary, without an event id: nothing is hidden that one of them misses.
    assert joined.boundary is not None and (joined.boundary.last_seq, joined.boundary.last_event_id) == (3, "")
    assert select_summary({"other": parent}, "app") is None
    assert select_summary({"app": Summary(filter_key="app", text="")}, "app") is None


def test_projection_never_writes_to_the_session() -> None:
    ledger = Ledger()
    ledger.simple_turn("q", "a", tool=("lookup", "x" * 9000))
    ledger.simple_turn("q2", "a2")
    session = ledger.session(summaries=[ledger.summary("s", through=2)])
    before_events, before_summaries = list(session.events), dict(session.summaries)
    messages(session, governance=ContextGovernance())
    assert session.events == before_events and session.summaries == before_summaries


async def test_a_governed_runner_loads_only_the_events_after_the_summary_boundary() -> None:
    loads: list[dict[str, Any]] = []

    class Spy(InMemorySessionService):
        async def get_session(self, key: SessionKey, **kwargs: Any) -> Session | None:
            session = await super().get_session(key, **kwargs)
            loads.append({**kwargs, "seqs": [e.seq for e in session.events] if session else None})
            return session

    service = Spy()
    model = ScriptedModel.of("one", "two", "three")
    agent = LLMAgent(name="support", model=model, instruction="Be brief.")
    runner = Runner(app=APP, agents=[agent], session_service=service, load_after_summary=True)
    first = await runner.start(user_id="alice", message="1")
    await first.wait()
    second = await runner.start(user_id="alice", session_id=first.session_id, message="2")
    await second.wait()
    key = SessionKey(app=APP, user_id="alice", session_id=first.session_id)
    events = await service.list_events(key)
    last = events[-1]
    await service.advance_summary(
        key,
        Summary(
            filter_key=APP,
            text="two turns",
            boundary=SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or 0),
        ),
    )
    third = await runner.start(user_id="alice", session_id=first.session_id, message="3")
    await third.wait()
    assert loads[-1] == {"event_limit": 400, "after_summary": APP, "seqs": []}
    sent = model.requests[-1].messages
    assert roles(sent) == ["system", "system", "user"] and sent[-1].content == "3"
