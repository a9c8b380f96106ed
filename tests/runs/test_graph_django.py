"""Graph checkpoints in the database: the store contract on both backends, a paused demo
run resumed by a brand-new runner from the database alone, and the resume API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from agentsite.demo.graph import build_troubleshoot_agent
from runs.backends import DjangoCheckpointStore, DjangoRunStore
from runs.core.agents.graph import (
    Checkpoint,
    CheckpointStore,
    InMemoryCheckpointStore,
    PendingInterrupt,
    resume_graph_run,
)
from runs.core.agents.graph.events import OBJECT_INTERRUPT
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event
from sessions_app.core.session import SessionKey

# The Django backends work from worker threads, so their tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)

APP = "agentsite"


# -- the store contract -------------------------------------------------------------------------


@pytest.fixture(params=["memory", "django"])
def store(request: pytest.FixtureRequest) -> CheckpointStore:
    return InMemoryCheckpointStore() if request.param == "memory" else DjangoCheckpointStore()


async def make_run(user: Any) -> str:
    """A run row to hang checkpoints on (the Django store's foreign key)."""
    service = DjangoSessionService()
    session = await service.create_session(app=APP, user_id=str(user.pk), agent="troubleshoot")
    record = await DjangoRunStore().create(
        RunRecord(
            id=f"run-{session.id[:8]}",
            app=APP,
            user_id=str(user.pk),
            session_id=session.id,
            agent="troubleshoot",
            request_id=f"req-{session.id[:8]}",
            status="completed",
        )
    )
    return record.id


async def test_checkpoints_round_trip_and_the_newest_is_latest(store: CheckpointStore, alice: Any) -> None:
    run_id = await make_run(alice)
    first = await store.put(Checkpoint(run_id=run_id, graph="g", step=0, state={"x": 1}, next_nodes=("a",)))
    paused = await store.put(
        Checkpoint(
            run_id=run_id,
            graph="g",
            step=1,
            state={"x": 2, "nested": {"list": [1, "two"]}},
            next_nodes=("b", "c"),
            barriers={"a+b->c": ("a",)},
            writes={"b": {"x": 3}},
            resume_values={"c": ("yes",)},
            interrupt=PendingInterrupt(id="i1", node="c", payload={"question": "ok?"}, index=1),
            parent_id=first.id,
        )
    )
    assert first.id and paused.id and first.id != paused.id
    loaded = await store.get(paused.id)
    assert loaded is not None
    assert loaded.to_dict() == {**paused.to_dict(), "created_at": loaded.created_at.isoformat()}
    assert loaded.waiting and loaded.interrupt == PendingInterrupt(
        id="i1", node="c", payload={"question": "ok?"}, index=1
    )
    assert (await store.latest(run_id)) == loaded
    assert [c.step for c in await store.list(run_id)] == [0, 1]
    assert await store.latest("no-such-run") is None and await store.get("nope") is None


async def test_a_pause_is_claimed_once_and_a_claim_can_be_given_back(store: CheckpointStore, alice: Any) -> None:
    run_id = await make_run(alice)
    paused = await store.put(
        Checkpoint(
            run_id=run_id,
            graph="g",
            step=1,
            state={},
            next_nodes=("c",),
            interrupt=PendingInterrupt(id="i1", node="c", payload="ok?"),
        )
    )
    assert await store.claim(paused.id, by="req-1")
    assert not await store.claim(paused.id, by="req-2")
    await store.release(paused.id, by="req-2")  # not its claim: nothing changes
    assert (await store.get(paused.id)).resumed_by == "req-1"  # type: ignore[union-attr]  # stored above
    await store.release(paused.id, by="req-1")
    assert (await store.get(paused.id)).waiting  # type: ignore[union-attr]  # stored above
    assert await store.claim(paused.id, by="req-2")


# -- resume from the database in a fresh runner ----------------------------------------------------


def fresh_runner() -> Runner:
    """Everything new: agent, graph, stores; only the database is shared."""
    return Runner(
        app=APP,
        agents=[build_troubleshoot_agent(checkpoints=DjangoCheckpointStore())],
        session_service=DjangoSessionService(),
        run_store=DjangoRunStore(),
    )


async def collect(handle: Any) -> list[Event]:
    return [e async for e in handle.events()]


async def test_a_paused_demo_run_resumes_in_a_fresh_runner_from_the_database(alice: Any) -> None:
    user_id = str(alice.pk)
    first_runner = fresh_runner()
    paused = await first_runner.start(
        user_id=user_id, message="Why does payments.internal.example.com fail TLS handshakes?", stream=True
    )
    events = await collect(paused)
    await first_runner.close()

    question = next(e for e in events if e.object == OBJECT_INTERRUPT)
    assert question.text.startswith("Approve this incident report?")
    draft = [e.text for e in events if e.role == "assistant" and e.text.startswith("**Draft incident report")]
    assert len(draft) == 1 and "certificate expired" in draft[0]
    # The evidence came from both tools, called in the same superstep.
    tools = [e.message.tool_name for e in events if e.is_tool_result and e.message]
    assert sorted(tools) == ["inspect_certificate", "search_logs"]  # type: ignore[type-var]  # names are set
    del first_runner  # "the server restarted": nothing of it is used again

    second_runner = fresh_runner()
    resumed = await resume_graph_run(
        second_runner, user_id=user_id, run_id=paused.run_id, value={"approved": True}, message="Approved.", stream=True
    )
    after = await collect(resumed)
    record = await resumed.wait()
    await second_runner.close()

    assert record.status == "completed" and record.session_id == paused.session_id
    final = [e.text for e in after if e.role == "assistant" and not e.partial]
    assert final[-1].startswith("**Incident report: payments") and final[-1].endswith("Approved: this report is final.")
    checkpoints = await DjangoCheckpointStore().list(resumed.run_id)
    assert checkpoints[-1].finished and checkpoints[-1].state["decision"] == {"approved": True, "comment": ""}
    assert checkpoints[0].parent_id == (await DjangoCheckpointStore().latest(paused.run_id)).id  # type: ignore[union-attr]  # the pause
    ledger = await DjangoSessionService().list_events(
        SessionKey(app=APP, user_id=user_id, session_id=paused.session_id), limit=200
    )
    assert [e.text for e in ledger if e.role == "user"] == [
        "Why does payments.internal.example.com fail TLS handshakes?",
        "Approved.",
    ]


async def test_rejecting_the_draft_discards_it(alice: Any) -> None:
    runner = fresh_runner()
    paused = await runner.start(user_id=str(alice.pk), message="auth-gateway TLS errors", stream=True)
    await collect(paused)
    resumed = await resume_graph_run(
        runner,
        user_id=str(alice.pk),
        run_id=paused.run_id,
        value={"approved": False, "comment": "wrong host"},
        stream=True,
    )
    after = await collect(resumed)
    await runner.close()
    answer = [e.text for e in after if e.role == "assistant" and not e.partial][-1]
    assert answer == "Rejected: the draft report was discarded and nothing was filed. Reason given: wrong host"


# -- the resume API -------------------------------------------------------------------------------


def wait_finished(client: Any, run_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/api/runs/{run_id}/").json()
        if run["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


def start_paused_run(client: Any) -> dict[str, Any]:
    response = client.post(
        "/api/runs/",
        {"message": "payments TLS handshake failures", "agent": "troubleshoot", "wait": True},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_agents_api_lists_the_graph_agent(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of())
    agents = {a["name"]: a for a in alice_api.get("/api/agents/").json()["results"]}
    assert agents["troubleshoot"]["kind"] == "graph" and agents["troubleshoot"]["default"] is False


def test_a_paused_run_shows_its_interrupt_and_resume_finishes_it(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    run = start_paused_run(alice_api)
    assert run["status"] == "completed"
    detail = alice_api.get(f"/api/runs/{run['id']}/").json()
    assert detail["interrupt"]["node"] == "approve"
    assert detail["interrupt"]["payload"]["options"] == ["approve", "reject"]
    listed = alice_api.get("/api/runs/", {"session_id": run["session_id"]}).json()["results"]
    assert listed[0]["interrupt"]["id"] == detail["interrupt"]["id"]

    response = alice_api.post(
        f"/api/runs/{run['id']}/resume/", {"value": {"approved": True}, "message": "Approve"}, format="json"
    )
    assert response.status_code == 201, response.content
    resumed = response.json()
    assert resumed["id"] != run["id"] and resumed["session_id"] == run["session_id"]
    final = wait_finished(alice_api, resumed["id"])
    assert final["status"] == "completed" and "interrupt" not in final
    assert final["answer"].endswith("Approved: this report is final.")
    assert "interrupt" not in alice_api.get(f"/api/runs/{run['id']}/").json()

    again = alice_api.post(f"/api/runs/{run['id']}/resume/", {"value": "approve"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_not_waiting"


def test_resume_answers_404_for_someone_elses_run(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    run = start_paused_run(alice_api)
    response = bob_api.post(f"/api/runs/{run['id']}/resume/", {"value": "approve"}, format="json")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert bob_api.post("/api/runs/nope/resume/", {"value": 1}, format="json").status_code == 404
    assert "interrupt" in alice_api.get(f"/api/runs/{run['id']}/").json()  # still waiting


@pytest.mark.parametrize("body", [{}, {"value": None}, {"message": "hi"}, {"value": "ok", "message": 5}])
def test_resume_refuses_a_bad_body_naming_the_field(
    alice_api: Any, use_model: Callable[[Model], None], body: Any
) -> None:
    use_model(ScriptedModel.of())
    run = start_paused_run(alice_api)
    response = alice_api.post(f"/api/runs/{run['id']}/resume/", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and error["message"], error
    assert error.get("field") == ("message" if body.get("value") is not None else "value"), error


def test_resume_refuses_a_body_that_is_not_an_object(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of())
    run = start_paused_run(alice_api)
    response = alice_api.post(f"/api/runs/{run['id']}/resume/", ["approve"], format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"


def test_resuming_a_run_that_does_not_wait_answers_409(alice_api: Any, use_model: Callable[[Model], None]) -> None:
    use_model(ScriptedModel.of("hello"))
    plain = alice_api.post("/api/runs/", {"message": "hi", "wait": True}, format="json").json()
    response = alice_api.post(f"/api/runs/{plain['id']}/resume/", {"value": "approve"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_not_waiting"
    assert "not a graph run" in response.json()["error"]["message"]
