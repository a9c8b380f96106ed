"""The auto-memory Celery job on Django: durable cursor, one effect per delta, the Runner's
post-run hook, and a whole run through the API with the offline model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from runs.core.agents.llm import LLMAgent
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app import models as orm
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.memory_extract import ExtractedCall, ExtractionRequest
from sessions_app.core.session import Session
from sessions_app.memory_tasks import memory_extract, memory_extract_task

pytestmark = pytest.mark.django_db(transaction=True)


def open_session(user: Any) -> Session:
    return async_to_sync(DjangoSessionService().create_session)(app="agentsite", user_id=str(user.pk))


def say(session: Session, *texts: str) -> None:
    service = DjangoSessionService()
    for text in texts:
        async_to_sync(service.append_event)(session, Event(author="user", message=Message(role="user", content=text)))
        async_to_sync(service.append_event)(
            session, Event(author="support", message=Message(role="assistant", content="Noted."))
        )


def remembered(user: Any) -> list[str]:
    return sorted(orm.Memory.objects.filter(user=user).values_list("text", flat=True))


def test_running_the_task_twice_extracts_the_delta_once_and_the_cursor_is_durable(alice: Any) -> None:
    session = open_session(alice)
    say(session, "My name is Alice. We run Go in production.")
    first = memory_extract_task(session.id)
    second = memory_extract_task(session.id)
    assert (first["status"], first["added"], first["last_seq"]) == ("extracted", 2, 2)
    assert second["status"] == "nothing_new"
    assert remembered(alice) == ["Name is Alice", "Runs Go in production"]
    assert orm.MemoryCursor.objects.get(session_id=session.id).last_seq == 2


def test_a_restarted_worker_neither_re_extracts_nor_skips(alice: Any, eager_celery: None) -> None:
    session = open_session(alice)
    say(session, "We run Go in production.")
    assert memory_extract(session_id=session.id)["status"] == "extracted"
    say(session, "I prefer terse answers.")

    class KilledWorker:
        """A worker that dies after reading the delta, before writing anything."""

        async def extract(self, request: ExtractionRequest) -> list[ExtractedCall]:
            raise SystemExit("worker killed")

    with pytest.raises(SystemExit):
        memory_extract(session_id=session.id, extractor=KilledWorker())
    assert orm.MemoryCursor.objects.get(session_id=session.id).last_seq == 2
    # A fresh worker (new services, nothing shared in process memory but the database).
    resumed = memory_extract_task.delay(session.id).result  # eager: already done
    assert (resumed["status"], resumed["added"], resumed["last_seq"]) == ("extracted", 1, 4)
    assert remembered(alice) == ["Prefers terse answers", "Runs Go in production"]
    assert memory_extract_task(session.id)["status"] == "nothing_new"


def test_the_task_of_a_deleted_session_does_nothing(alice: Any) -> None:
    assert memory_extract_task("no-such-session") == {"status": "missing"}


def test_a_session_deleted_while_the_task_reads_it_ends_the_task_as_missing(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat deleted right after its run: the job read the session, then it was gone before
    the job read its events (a traceback in the worker before)."""
    session = open_session(alice)
    say(session, "I run Go in production.")
    read = DjangoSessionService.get_session

    async def read_then_deleted(self: DjangoSessionService, *args: Any, **kwargs: Any) -> Any:
        found = await read(self, *args, **kwargs)
        await orm.Session.objects.filter(id=session.id).adelete()
        return found

    monkeypatch.setattr(DjangoSessionService, "get_session", read_then_deleted)
    assert memory_extract_task(session.id) == {"status": "missing"}


def test_memories_are_written_for_the_sessions_owner_only(alice: Any, bob: Any) -> None:
    session = open_session(bob)
    say(session, "My name is Bob.")
    memory_extract_task(session.id)
    assert remembered(bob) == ["Name is Bob"] and remembered(alice) == []


async def test_post_run_hooks_get_the_final_record_and_a_failing_hook_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[RunRecord] = []

    async def record(run: RunRecord) -> None:
        seen.append(run)

    async def broken(run: RunRecord) -> None:
        raise RuntimeError("broker down")

    runner = Runner(
        app="hooks",
        agents=[LLMAgent(name="a", model=ScriptedModel.of("done"))],
        session_service=InMemorySessionService(),
        post_run=[broken, record],
    )
    with caplog.at_level(logging.ERROR):
        handle = await runner.start(user_id="u", message="hi")
        final = await handle.wait()
    assert final.status == "completed"
    assert [(r.id, r.status, r.session_id) for r in seen] == [(final.id, "completed", handle.session_id)]
    assert "post-run hook" in caplog.text


def test_a_run_through_the_api_remembers_what_the_user_said(
    alice: Any, alice_api: Any, use_model: Callable[[Model], None], eager_celery: None
) -> None:
    use_model(ScriptedModel.of("Hello Alice."))
    response = alice_api.post(
        "/api/runs/",
        {
            "message": "Hi, my name is Alice and we run Go in production.",
            "wait": True,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert remembered(alice) == ["Name is Alice", "Runs Go in production"]
    listed = alice_api.get("/api/memories/", {"q": "production"}).json()["results"]
    assert [m["memory"] for m in listed] == ["Runs Go in production"]


def test_spec_6_3_auto_memory_is_on_by_default_also_with_a_model_endpoint() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTSITE_", "OPENAI_", "DATABASE_URL", "REDIS_URL"))
    }
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.AGENTSITE_SUMMARY_MODEL, s.AGENTSITE_MEMORY_AUTO, s.AGENTSITE_MEMORY_UPDATE_POLICY)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpt-4o-mini", "True", "merge_similar"]


def test_spec_6_3_auto_memory_extracts_through_an_openai_compatible_endpoint(
    alice: Any, openai_server: Any, settings: Any
) -> None:
    from tests.support.openai_server import ServerStep

    settings.AGENTSITE_SUMMARY_MODEL = "gpt-4o-mini"
    settings.OPENAI_BASE_URL = openai_server.base_url
    settings.OPENAI_API_KEY = "sk-test"
    session = open_session(alice)
    pasted = "\n".join(f"2024-05-02 10:00:0{i} ERROR gateway: upstream reset" for i in range(4))
    say(session, "I moved to Lisbon last year.", f"Why does this keep happening?\n{pasted}")
    openai_server.script(
        ServerStep.calls(
            ("memory_add", {"memory": "Lives in Lisbon", "kind": "fact", "topics": ["location"]}),
            ("memory_add", "{not json"),
        )
    )
    outcome = memory_extract_task(session.id)
    openai_server.assert_consumed()
    assert (outcome["status"], outcome["added"], outcome["last_seq"], outcome["skipped_messages"]) == (
        "extracted",
        1,
        4,
        2,
    )
    assert remembered(alice) == ["Lives in Lisbon"]
    sent = openai_server.requests[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["memory_add", "memory_update", "memory_delete"]
    assert sent["messages"][0]["role"] == "system" and "Update policy (merge similar)" in sent["messages"][0]["content"]
    # The pasted log never reaches the model; the clean exchange does.
    conversation = [m["content"] for m in sent["messages"][1:]]
    assert conversation == [
        "I moved to Lisbon last year.",
        "Noted.",
        "Extract and manage memories from the conversation above.",
    ]
    assert memory_extract_task(session.id)["status"] == "nothing_new"
