"""The A2A TaskStore contract, run against the SDK's in-memory store and our Django one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

from runs.surfaces.a2a.auth import A2AUser
from runs.surfaces.a2a.task_store import DjangoTaskStore

# The Django store works from worker threads, so its tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Backend:
    store: TaskStore
    alice: ServerCallContext
    bob: ServerCallContext


def _backend(store: TaskStore, django_user_model: Any) -> Backend:
    # Users are made here, in sync code: the tests themselves run inside an event loop.
    alice = ServerCallContext(user=A2AUser(django_user_model.objects.create_user(username="alice")))
    bob = ServerCallContext(user=A2AUser(django_user_model.objects.create_user(username="bob")))
    return Backend(store=store, alice=alice, bob=bob)


@pytest.fixture(params=["memory", "django"])
def backend(request: pytest.FixtureRequest, django_user_model: Any) -> Backend:
    store = InMemoryTaskStore() if request.param == "memory" else DjangoTaskStore(agent="support")
    return _backend(store, django_user_model)


@pytest.fixture
def django_backend(django_user_model: Any) -> Backend:
    return _backend(DjangoTaskStore(agent="support"), django_user_model)


def make_task(task_id: str, *, context_id: str = "ctx-1", state: int = TaskState.TASK_STATE_WORKING) -> Task:
    task = Task(
        id=task_id,
        context_id=context_id,
        status=TaskStatus(state=state),
        history=[Message(message_id=f"m-{task_id}", role=Role.ROLE_USER, parts=[Part(text="Why does TLS fail?")])],
        artifacts=[Artifact(artifact_id="a-1", name="response", parts=[Part(text="The certificate expired.")])],
    )
    task.status.timestamp.GetCurrentTime()
    task.metadata.update({"agentsite_run_id": "run-1"})
    return task


async def test_a_saved_task_reads_back_whole(backend: Backend) -> None:
    task = make_task("t-1")
    await backend.store.save(task, backend.alice)
    loaded = await backend.store.get("t-1", backend.alice)
    assert loaded == task
    assert loaded is not None and loaded.artifacts[0].parts[0].text == "The certificate expired."
    assert loaded.metadata.fields["agentsite_run_id"].string_value == "run-1"


async def test_saving_again_replaces_the_task(backend: Backend) -> None:
    await backend.store.save(make_task("t-1"), backend.alice)
    done = make_task("t-1", state=TaskState.TASK_STATE_COMPLETED)
    done.status.message.CopyFrom(Message(message_id="m-2", role=Role.ROLE_AGENT, parts=[Part(text="Renew it.")]))
    await backend.store.save(done, backend.alice)
    loaded = await backend.store.get("t-1", backend.alice)
    assert loaded is not None and loaded.status.state == TaskState.TASK_STATE_COMPLETED
    assert loaded.status.message.parts[0].text == "Renew it."


async def test_a_deleted_task_is_gone(backend: Backend) -> None:
    await backend.store.save(make_task("t-1"), backend.alice)
    await backend.store.delete("t-1", backend.alice)
    assert await backend.store.get("t-1", backend.alice) is None
    await backend.store.delete("t-1", backend.alice)  # deleting twice is harmless


async def test_another_users_task_is_invisible_and_untouchable(backend: Backend) -> None:
    await backend.store.save(make_task("t-1"), backend.alice)
    assert await backend.store.get("t-1", backend.bob) is None
    assert list((await backend.store.list(ListTasksRequest(), backend.bob)).tasks) == []
    await backend.store.delete("t-1", backend.bob)
    assert await backend.store.get("t-1", backend.alice) is not None


async def test_list_filters_by_context_and_state_newest_first(backend: Backend) -> None:
    for index, (context_id, state) in enumerate(
        [
            ("ctx-1", TaskState.TASK_STATE_COMPLETED),
            ("ctx-2", TaskState.TASK_STATE_COMPLETED),
            ("ctx-1", TaskState.TASK_STATE_FAILED),
        ]
    ):
        await backend.store.save(make_task(f"t-{index}", context_id=context_id, state=state), backend.alice)
        await asyncio.sleep(0.002)  # distinct update times
    everything = await backend.store.list(ListTasksRequest(), backend.alice)
    assert [t.id for t in everything.tasks] == ["t-2", "t-1", "t-0"]
    assert everything.total_size == 3
    in_ctx1 = await backend.store.list(ListTasksRequest(context_id="ctx-1"), backend.alice)
    assert [t.id for t in in_ctx1.tasks] == ["t-2", "t-0"]
    completed = await backend.store.list(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED), backend.alice)
    assert [t.id for t in completed.tasks] == ["t-1", "t-0"]


async def test_list_pages_with_the_token_it_returns(backend: Backend) -> None:
    for index in range(5):
        await backend.store.save(make_task(f"t-{index}"), backend.alice)
        await asyncio.sleep(0.002)
    seen: list[str] = []
    token = ""
    while True:
        page = await backend.store.list(ListTasksRequest(page_size=2, page_token=token), backend.alice)
        seen.extend(t.id for t in page.tasks)
        token = page.next_page_token
        if not token:
            break
    assert seen == ["t-4", "t-3", "t-2", "t-1", "t-0"]


async def test_django_store_keeps_each_agents_tasks_apart(django_backend: Backend) -> None:
    backend = django_backend
    await backend.store.save(make_task("t-1"), backend.alice)
    other_agent = DjangoTaskStore(agent="general")
    assert await other_agent.get("t-1", backend.alice) is None
    with pytest.raises(Exception, match="already in use"):
        await other_agent.save(make_task("t-1"), backend.alice)


async def test_django_store_keeps_nothing_for_an_anonymous_caller(django_backend: Backend) -> None:
    backend = django_backend
    anonymous = ServerCallContext()
    with pytest.raises(PermissionError):
        await backend.store.save(make_task("t-1"), anonymous)
    assert await backend.store.get("t-1", anonymous) is None


def test_the_stored_row_says_whose_task_it_is(django_user_model: Any) -> None:
    from runs.models import A2ATask

    alice = django_user_model.objects.create_user(username="alice")
    store = DjangoTaskStore(agent="support")
    asyncio.run(
        store.save(
            make_task("t-1", context_id="session-9", state=TaskState.TASK_STATE_COMPLETED),
            ServerCallContext(user=A2AUser(alice)),
        )
    )
    row = A2ATask.objects.get(pk="t-1")
    assert (row.user_id, row.agent, row.context_id, row.state) == (
        alice.pk,
        "support",
        "session-9",
        "TASK_STATE_COMPLETED",
    )
    assert row.payload["status"]["state"] == "TASK_STATE_COMPLETED"
