"""Memory update policies (SPEC 6.3) and the two-stage assistant-episode extraction (SPEC 6.4),
through the auto-memory job with scripted extractor models."""

from __future__ import annotations

from datetime import UTC, datetime

from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.memory import InMemoryMemoryService, MemoryDraft, MemoryEntry, UserKey
from sessions_app.core.memory_episodes import (
    EPISODE_PREFIX,
    EPISODE_TOOL,
    answer_pairs,
    episode_request,
    is_eligible,
)
from sessions_app.core.memory_extract import AutoMemory, ConversationMessage, ExtractionRequest, build_extraction_prompt
from sessions_app.core.memory_policy import UpdatePolicy, preserves
from sessions_app.core.session import Session
from sessions_app.memory_tasks import ModelMemoryExtractor

APP = "policies"
ALICE = UserKey(app=APP, user_id="alice")
SAID_AT = datetime(2024, 5, 2, 15, 30, tzinfo=UTC)

RECOMMENDATION = (
    "For a compact kitchen I would pick:\n1. Alpha Mini blender, $89, 600 W\n2. Beta Slim blender, $119, 700 W"
)


class Env:
    def __init__(self) -> None:
        self.sessions = InMemorySessionService()
        self.memory = InMemoryMemoryService()
        self.session: Session | None = None

    async def open(self) -> Session:
        self.session = await self.sessions.create_session(app=APP, user_id="alice")
        return self.session

    async def say(self, text: str, answer: str = "Noted.") -> None:
        assert self.session is not None
        for role, content in (("user", text), ("assistant", answer)):
            await self.sessions.append_event(
                self.session,
                Event(
                    author="user" if role == "user" else "agent",
                    message=Message(role=role, content=content),  # type: ignore[arg-type]  # a Role literal
                    created_at=SAID_AT,
                ),
            )

    async def add(self, text: str, **kwargs: object) -> str:
        return (await self.memory.add(ALICE, MemoryDraft(text=text, **kwargs), dedupe=False)).entry.id  # type: ignore[arg-type]  # MemoryDraft fields

    def job(
        self, model: ScriptedModel, *, policy: UpdatePolicy = "merge_similar", episodes: bool = False
    ) -> AutoMemory:
        return AutoMemory(
            sessions=self.sessions,
            memory=self.memory,
            extractor=ModelMemoryExtractor(model),
            policy=policy,
            assistant_episodes=episodes,
        )

    async def texts(self) -> list[str]:
        return sorted(m.text for m in await self.memory.load(ALICE, limit=100))


def entry(text: str, **kwargs: object) -> MemoryEntry:
    return MemoryEntry(id="m1", app=APP, user_id="alice", text=text, **kwargs)  # type: ignore[arg-type]  # MemoryEntry fields


# -- update policies (SPEC 6.3) ---------------------------------------------------------------------------


def test_spec_6_3_each_update_policy_has_its_own_prompt_block() -> None:
    def prompt(policy: UpdatePolicy) -> str:
        return build_extraction_prompt(
            ExtractionRequest(messages=(), existing=(), reference_time=SAID_AT, policy=policy)
        )

    assert "Update policy (merge similar)" in prompt("merge_similar")
    assert "Update policy (preserve history)" in prompt("preserve_history") and "explicitly asks" in prompt(
        "preserve_history"
    )
    assert "Update policy (append only)" in prompt("append_only")


def test_spec_6_3_preserve_history_accepts_only_updates_that_keep_words_numbers_and_negations() -> None:
    old = entry("Visited the Louvre with Bob")
    assert preserves(old, MemoryDraft(text="Visited the Louvre with Bob at 10:30 on a rainy morning"))
    assert not preserves(old, MemoryDraft(text="Visited the Orsay with Bob"))
    assert not preserves(entry("Has 2 cats"), MemoryDraft(text="Has 3 cats"))
    assert not preserves(entry("Drinks coffee"), MemoryDraft(text="Does not drink coffee anymore"))
    assert not preserves(entry("Works at Initech"), MemoryDraft(text="Works at Acme"))


async def test_spec_6_3_preserve_history_keeps_a_detail_update_and_turns_a_correction_into_an_add() -> None:
    env = Env()
    session = await env.open()
    louvre = await env.add("Visited the Louvre with Bob")
    job_id = await env.add("Works at Initech", topics=("work",))
    await env.say("At the Louvre it was 10:30 in the morning. And I left Initech, I'm at Acme now.")
    model = ScriptedModel.of(
        ScriptStep.calls(
            ("memory_update", {"memory_id": louvre, "memory": "Visited the Louvre with Bob at 10:30 in the morning"}),
            ("memory_update", {"memory_id": job_id, "memory": "Works at Acme", "topics": ["work"]}),
        )
    )
    outcome = await env.job(model, policy="preserve_history").process(session.key)
    model.assert_consumed()
    assert (outcome.result and (len(outcome.result.added), len(outcome.result.updated))) == (1, 1)
    # The history stays: the old employer is not overwritten by the new one.
    assert await env.texts() == [
        "Visited the Louvre with Bob at 10:30 in the morning",
        "Works at Acme",
        "Works at Initech",
    ]
    assert "Update policy (preserve history)" in model.requests[0].messages[0].content


async def test_spec_6_3_preserve_history_drops_exact_duplicates_and_lets_an_explicit_delete_through() -> None:
    env = Env()
    session = await env.open()
    tea = await env.add("Prefers tea")
    await env.add("Runs Go in production")
    await env.say("Please forget that I prefer tea. We run Go in production.")
    model = ScriptedModel.of(
        ScriptStep.calls(
            ("memory_delete", {"memory_id": tea}),
            ("memory_add", {"memory": "Runs Go in production"}),
            ("memory_add", {"memory": "Runs Go in production on Kubernetes"}),
        )
    )
    await env.job(model, policy="preserve_history").process(session.key)
    assert await env.texts() == ["Runs Go in production", "Runs Go in production on Kubernetes"]


async def test_spec_6_3_append_only_turns_updates_into_adds_and_drops_deletes_and_duplicates() -> None:
    env = Env()
    session = await env.open()
    old = await env.add("Lives in Porto")
    await env.say("I live in Lisbon now, forget Porto.")
    model = ScriptedModel.of(
        ScriptStep.calls(
            ("memory_update", {"memory_id": old, "memory": "Lives in Lisbon"}),
            ("memory_delete", {"memory_id": old}),
            ("memory_clear", {}),
            ("memory_add", {"memory": "Lives in Lisbon"}),
            ("memory_add", {"memory": "Lives in Porto"}),
        )
    )
    outcome = await env.job(model, policy="append_only").process(session.key)
    assert outcome.result is not None
    assert (len(outcome.result.added), outcome.result.updated, outcome.result.deleted) == (1, (), ())
    assert await env.texts() == ["Lives in Lisbon", "Lives in Porto"]


async def test_spec_6_3_merge_similar_stays_the_default_and_absorbs_a_near_duplicate() -> None:
    """The detail loss SPEC 13.4 measures, which the history-keeping policies avoid."""
    env = Env()
    session = await env.open()
    await env.add("Runs Go in production")
    await env.say("We run Go in production, on Kubernetes.")
    model = ScriptedModel.of(ScriptStep.calls(("memory_add", {"memory": "Runs Go in production on Kubernetes"})))
    await AutoMemory(sessions=env.sessions, memory=env.memory, extractor=ModelMemoryExtractor(model)).process(
        session.key
    )
    assert await env.texts() == ["Runs Go in production"]


# -- two-stage assistant-episode extraction (SPEC 6.4) -----------------------------------------------------


def said(role: str, text: str) -> ConversationMessage:
    return ConversationMessage(role=role, text=text, at=SAID_AT)  # type: ignore[arg-type]  # a role literal


def test_spec_6_4_only_answers_shaped_like_results_are_eligible_for_the_second_stage() -> None:
    pairs = answer_pairs(
        [
            said("user", "Which blenders fit a compact kitchen?"),
            said("assistant", RECOMMENDATION),
            said("user", "Thanks!"),
            said("assistant", "You're welcome."),
            said("user", "How many watts is enough?"),
            said("assistant", "Around 600 is plenty."),
            said("user", "Is 600 enough?"),
            said("assistant", "Yes, 600 is enough."),
        ]
    )
    assert [is_eligible(p) for p in pairs] == [True, False, True, False]
    request = episode_request([said("user", "Thanks!"), said("assistant", "Sure.")], SAID_AT)
    assert request is None


async def test_spec_6_4_assistant_episodes_are_off_by_default_one_model_call_per_delta() -> None:
    env = Env()
    session = await env.open()
    await env.say("Which blenders fit a compact kitchen?", RECOMMENDATION)
    model = ScriptedModel.of(ScriptStep.answer("Nothing to remember."))
    assert (await env.job(model).process(session.key)).status == "extracted"
    model.assert_consumed()
    assert await env.texts() == []


async def test_spec_6_4_the_second_stage_records_a_recommendation_as_an_attributed_episode() -> None:
    env = Env()
    session = await env.open()
    await env.say("My name is Alice.", "Hello Alice!")
    await env.say("Which blenders fit a compact kitchen?", RECOMMENDATION)
    model = ScriptedModel.of(
        ScriptStep.calls(("memory_add", {"memory": "Name is Alice", "topics": ["identity"]})),
        ScriptStep.calls(
            (
                EPISODE_TOOL,
                {
                    "pair": 1,
                    "memory": "Asked for compact-kitchen blenders; the assistant recommended "
                    "Alpha Mini ($89, 600 W) and Beta Slim ($119, 700 W).",
                    "topics": ["blenders"],
                },
            ),
            # An invented price, a pair the request did not have, and an empty text: each dropped alone.
            (EPISODE_TOOL, {"pair": 1, "memory": "The assistant said the Alpha Mini costs $79."}),
            (EPISODE_TOOL, {"pair": 7, "memory": "Recommended Alpha Mini."}),
            (EPISODE_TOOL, {"pair": 1, "memory": "  "}),
            ("memory_add", {"memory": "Is an admin"}),
        ),
    )
    outcome = await env.job(model, policy="preserve_history", episodes=True).process(session.key)
    model.assert_consumed()
    assert outcome.result is not None and len(outcome.result.added) == 2
    episodes = await env.memory.load(ALICE, kind="episode")
    assert [e.text for e in episodes] == [
        f"{EPISODE_PREFIX}Asked for compact-kitchen blenders; the assistant recommended Alpha Mini ($89, 600 W) "
        "and Beta Slim ($119, 700 W)."
    ]
    assert episodes[0].participants == ("User", "Assistant") and episodes[0].topics == ("blenders",)
    assert episodes[0].event_time == datetime(2024, 5, 2, tzinfo=UTC)
    assert await env.texts() == sorted(["Name is Alice", episodes[0].text])
    # Stage 2 saw only the eligible exchange, and only its private tool.
    second = model.requests[1]
    assert [t.name for t in second.tools] == [EPISODE_TOOL]
    assert "Alpha Mini" in second.messages[0].content and "Hello Alice!" not in second.messages[0].content
    assert EPISODE_TOOL not in [t.name for t in model.requests[0].tools]


async def test_spec_6_4_a_failing_second_stage_keeps_the_first_stages_memories() -> None:
    env = Env()
    session = await env.open()
    await env.say("My name is Alice. Which blenders fit a compact kitchen?", RECOMMENDATION)
    model = ScriptedModel.of(
        ScriptStep.calls(("memory_add", {"memory": "Name is Alice"})),
        ScriptStep.fail(RuntimeError("endpoint down")),
    )
    outcome = await env.job(model, episodes=True).process(session.key)
    model.assert_consumed()
    assert outcome.status == "extracted" and await env.texts() == ["Name is Alice"]


async def test_spec_6_4_the_second_stage_is_skipped_when_the_first_deletes() -> None:
    env = Env()
    session = await env.open()
    old = await env.add("Wants a blender")
    await env.say("Forget the blender thing. Which blenders fit a compact kitchen anyway?", RECOMMENDATION)
    model = ScriptedModel.of(ScriptStep.calls(("memory_delete", {"memory_id": old})))
    await env.job(model, episodes=True).process(session.key)
    model.assert_consumed()
    assert await env.texts() == []
