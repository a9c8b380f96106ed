"""The incremental projection (issue 18, item 6) equals the projection made from the ledger.

Random ledgers are grown step by step as a run grows its session (tool rounds, answers,
orphan calls and results, reused call ids, other agents, seeded turns, other branches,
summaries that advance, cover the running turn or cut a turn, windows loaded anew or
extended back, turns regenerated or edited, also in chains and out of the window); after each step the kept projection and the request built from it must
equal `project`'s and the request `build_context` makes from scratch.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import ContextGovernance
from runs.core.context.incremental import PROJECTIONS, IncrementalProjection
from runs.core.context.projection import project
from runs.core.context.request import build_context
from runs.core.context.seeding import SEED_EXTENSION
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse, ToolSpec
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey
from tests.sessions.ledger_builders import APP, Ledger

AGENT = "support"
OPS = (
    "turn",
    "round",
    "round",
    "round",
    "call_only",
    "result_only",
    "answer",
    "completion",
    "foreign",
    "seeded",
    "branch",
    "summary",
    "summary_all",
    "new_window",
    "load_back",
    "big_round",
    "regenerate",
    "edit",
)


@dataclass
class _World:
    ledger: Ledger = field(default_factory=lambda: Ledger(agent=AGENT))
    session: Session | None = None
    invocation: str | None = None
    counter: int = 0

    def add(self, event: Event) -> None:
        stamped = self.ledger.add(event.replace(invocation_id=self.invocation, request_id=f"req-{self.invocation}"))
        assert self.session is not None
        self.session.events.append(stamped)
        self.session.last_seq = stamped.seq or 0

    def call_id(self, reuse: bool) -> str:
        self.counter += 1
        return "call_1" if reuse else f"call_{self.counter}"


def _apply(world: _World, op: str, flag: bool) -> None:
    assert world.session is not None
    if op == "turn" or world.invocation is None:
        world.counter += 1
        world.invocation = f"inv-{world.counter}"
        world.add(Event(author="user", message=Message(role="user", content=f"question {world.counter}")))
        if op == "turn":
            return
    if op in ("round", "big_round", "call_only"):
        call = world.call_id(reuse=flag)
        arguments = json.dumps({"q": "x" * (400 if op == "big_round" else 3)})
        world.add(
            Event(
                author=AGENT,
                message=Message(role="assistant", tool_calls=(ToolCall(id=call, name="lookup", arguments=arguments),)),
                finish_reason="tool_calls",
            )
        )
        if op != "call_only":
            content = ("result " * (600 if op == "big_round" else 3)) + call
            world.add(
                Event(
                    author=AGENT,
                    object=OBJECT_TOOL_RESPONSE,
                    message=Message(
                        role="tool",
                        content=content,
                        tool_call_id=call,
                        tool_name="lookup",
                    ),
                )
            )
    elif op == "result_only":
        call = "call_1" if flag else f"call_{world.counter}"
        world.add(
            Event(
                author=AGENT,
                object=OBJECT_TOOL_RESPONSE,
                message=Message(
                    role="tool",
                    content="late result",
                    tool_call_id=call,
                    tool_name="lookup",
                ),
            )
        )
    elif op == "answer":
        world.add(Event(author=AGENT, message=Message(role="assistant", content="an answer"), done=True))
    elif op == "completion":
        world.add(Event(author=APP, object=OBJECT_RUNNER_COMPLETION, done=True))
    elif op == "foreign":
        call = world.call_id(reuse=False)
        world.add(Event(author="researcher", message=Message(role="assistant", content="I found things")))
        if flag:
            world.add(
                Event(
                    author="researcher",
                    message=Message(role="assistant", tool_calls=(ToolCall(id=call, name="search", arguments="{}"),)),
                )
            )
            world.add(
                Event(
                    author="researcher",
                    object=OBJECT_TOOL_RESPONSE,
                    message=Message(
                        role="tool",
                        content="found",
                        tool_call_id=call,
                        tool_name="search",
                    ),
                )
            )
    elif op == "seeded":
        world.counter += 1
        world.invocation = f"inv-{world.counter}"
        seed = {SEED_EXTENSION: True}
        world.add(Event(author="user", message=Message(role="user", content="seeded q"), extensions=seed))
        world.add(Event(author=AGENT, message=Message(role="assistant", content="seeded a"), extensions=seed))
    elif op == "branch":
        world.add(Event(author=AGENT, filter_key=f"{APP}/other", message=Message(role="assistant", content="branch")))
    elif op in ("summary", "summary_all"):
        events = world.ledger.events
        through = len(events) if op == "summary_all" or len(events) < 3 else max(1, len(events) - (2 if flag else 4))
        version = (world.session.summaries[APP].version + 1) if APP in world.session.summaries else 1
        world.session.summaries = {APP: world.ledger.summary(f"summary v{version}", through=through, version=version)}
    elif op == "new_window":
        # The next run's session: a new list of the same event objects (the session cache),
        # sometimes cut at a later start.
        events = world.session.events
        start = min(len(events) // 3, 5) if flag else 0
        world.session = Session(
            app=APP,
            user_id="alice",
            id="s-1",
            events=list(events[start:]),
            summaries=dict(world.session.summaries),
            last_seq=world.session.last_seq,
        )
    elif op in ("regenerate", "edit"):
        # Issue 21 (runs.turns): a new turn naming the user message it redoes: the last one
        # (a chain when that is a redo itself), or for an edit with `flag` the first one.
        asked = [e for e in world.ledger.events if e.author == "user" and e.message is not None]
        target = asked[0] if op == "edit" and flag and asked else (asked[-1] if asked else None)
        world.counter += 1
        world.invocation = f"inv-{world.counter}"
        key = "regenerates" if op == "regenerate" else "edit_of"
        extensions = {key: target.id} if target is not None else {}
        world.add(
            Event(author="user", message=Message(role="user", content=f"again {world.counter}"), extensions=extensions)
        )
    elif op == "load_back":
        events = world.session.events
        if events and (events[0].seq or 0) > 1:
            world.session.events.insert(0, world.ledger.events[(events[0].seq or 0) - 2])


def _request(session: Session, active: str | None, *, incremental: IncrementalProjection | None) -> tuple[object, ...]:
    built = build_context(
        session,
        filter_key=APP,
        instruction="Be brief.",
        tools=[ToolSpec(name="lookup", description="d", parameters={})],
        governance=ContextGovernance(context_window=4096),
        window=4096,
        active_invocation_id=active,
        agent_name=AGENT,
        fit_to=2800,
        projections=incremental,
    )
    stats = built.stats()
    stats.pop("projection", None)
    return built.request, built.items, stats


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.booleans(), st.booleans()), min_size=1, max_size=60))
def test_the_incremental_projection_and_request_equal_the_ones_made_from_the_ledger(
    steps: list[tuple[str, bool, bool]],
) -> None:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    for op, flag, inactive in steps:
        _apply(world, op, flag)
        session = world.session
        active = None if inactive else world.invocation
        kept = incremental.project(session, filter_key=APP, active_invocation_id=active, agent_name=AGENT)
        fresh = project(session, filter_key=APP, active_invocation_id=active, agent_name=AGENT)
        assert kept == fresh, (op, kept.origin)
        assert _request(session, active, incremental=incremental) == _request(session, active, incremental=None)


def test_a_run_of_tool_rounds_is_projected_incrementally_and_counted() -> None:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    _apply(world, "turn", False)
    for _ in range(20):
        _apply(world, "round", False)
        kept = incremental.project(
            world.session, filter_key=APP, active_invocation_id=world.invocation, agent_name=AGENT
        )
        assert kept == project(world.session, filter_key=APP, active_invocation_id=world.invocation, agent_name=AGENT)
    assert incremental.counters.rebuilt == 1 and incremental.counters.incremental == 19
    assert kept.origin == "incremental"
    # A summary that advances makes the state again; one that covers the running turn is
    # the plain projection, counted as a fallback.
    _apply(world, "summary", False)
    assert (
        incremental.project(
            world.session, filter_key=APP, active_invocation_id=world.invocation, agent_name=AGENT
        ).origin
        == "fallback:intra_run"
    )
    assert incremental.counters.fallback == 1 and incremental.counters.reasons["rebuilt:summary"] == 1


def test_the_request_stats_say_how_the_projection_was_made() -> None:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    origins = []
    for op in ("turn", "round", "round"):
        _apply(world, op, False)
        built = build_context(
            world.session,
            filter_key=APP,
            instruction="",
            tools=[],
            governance=ContextGovernance(),
            window=8192,
            active_invocation_id=world.invocation,
            projections=incremental,
        )
        origins.append(built.stats()["projection"])
    assert origins == ["rebuilt:new", "incremental", "incremental"]


class _Forgetting:
    """A model that makes the next request of every run be projected from the ledger."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    def info(self) -> ModelInfo:
        return self.inner.info()

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        PROJECTIONS.clear()
        async for response in self.inner.generate(request):
            yield response


async def test_runs_through_the_runner_send_what_a_projection_from_the_ledger_would() -> None:
    async def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: what to look up
        """
        return f"found {q} " * 30

    async def play(forget: bool) -> tuple[list[ModelRequest], list[str]]:
        steps: list[ScriptStep | str] = []
        for turn in range(4):
            steps += [
                ScriptStep.call("lookup", {"q": f"{turn}-a"}, id=f"call_{turn}a"),
                ScriptStep.call("lookup", {"q": f"{turn}-b"}, id=f"call_{turn}b"),
                f"answer {turn}",
            ]
        scripted = ScriptedModel.of(*steps)
        agent = LLMAgent(
            name=AGENT,
            model=_Forgetting(scripted) if forget else scripted,
            instruction="Be brief.",
            tools=[FunctionTool(lookup)],
            governance=ContextGovernance(context_window=8192),
        )
        runner = Runner(app=APP, agents=[agent], session_service=CachedSessionService(InMemorySessionService()))
        session_id = None
        for turn in range(4):
            handle = await runner.start(user_id="alice", session_id=session_id, message=f"question {turn}")
            await handle.wait()
            session_id = handle.session_id
        assert session_id is not None
        events = await runner.session_service.list_events(SessionKey(app=APP, user_id="alice", session_id=session_id))
        return scripted.requests, [e.extensions["context"]["projection"] for e in events if "context" in e.extensions]

    PROJECTIONS.clear()
    kept, origins = await play(forget=False)
    fresh, fresh_origins = await play(forget=True)
    assert [r.messages for r in kept] == [r.messages for r in fresh] and len(kept) == 12
    # The first call of the process makes the state; every later one, across the four
    # runs, only adds the new events.
    assert origins[:1] == ["rebuilt:new"] and set(origins[1:]) == {"incremental"}
    assert set(fresh_origins) == {"rebuilt:new"}
