"""Admin: reviewers read ledgers; nothing there edits or deletes a single event."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token

from sessions_app import models as orm
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.mapping import event_to_row
from sessions_app.services import session_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(alice: Any) -> orm.Session:
    session = session_create(user=alice, agent="support", title="TLS")
    steps = [
        Event(author="user", message=Message(role="user", content="why does TLS fail?")),
        Event(
            author="support",
            message=Message(
                role="assistant",
                tool_calls=(
                    ToolCall(
                        id="c1", name="inspect_certificate", arguments='{"host": "payments.internal.example.com"}'
                    ),
                ),
            ),
        ),
        Event(
            author="support",
            object="tool.response",
            state_delta={"checked": True},
            message=Message(role="tool", content='{"expired": true}', tool_call_id="c1"),
        ),
    ]
    for seq, event in enumerate(steps, start=1):
        event_to_row(event, session_id=session.id, seq=seq, tokens=1).save()
    return session


def test_the_session_page_shows_its_ledger(admin_client: Any, ledger: orm.Session) -> None:
    page = admin_client.get(f"/admin/sessions_app/session/{ledger.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    for text in ("why does TLS fail?", "inspect_certificate", "payments.internal.example.com", "checked", "result of"):
        assert text in html


def test_events_cannot_be_changed_or_deleted_through_the_admin(admin_client: Any, ledger: orm.Session) -> None:
    event = ledger.events.get(seq=1)
    page = admin_client.get(f"/admin/sessions_app/event/{event.pk}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert admin_client.post(f"/admin/sessions_app/event/{event.pk}/change/", {"text": "rewritten"}).status_code == 403
    assert admin_client.post(f"/admin/sessions_app/event/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ledger.events.get(seq=1).text == "why does TLS fail?"


def test_the_ledger_refuses_updates_and_single_deletes_in_code(ledger: orm.Session) -> None:
    event = ledger.events.get(seq=1)
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        orm.Event.objects.filter(session=ledger).update(text="x")
    with pytest.raises(PermissionError):
        orm.Event.objects.filter(session=ledger).delete()


def test_deleting_a_session_removes_its_whole_ledger(ledger: orm.Session) -> None:
    ledger.delete()
    assert orm.Event.objects.count() == 0


def test_create_api_token_prints_the_token_alone_on_the_last_line(alice: Any) -> None:
    out = io.StringIO()
    call_command("create_api_token", "alice", stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last == Token.objects.get(user=alice).key
    again = io.StringIO()
    call_command("create_api_token", "alice", stdout=again)
    assert again.getvalue().strip() == last
    rotated = io.StringIO()
    call_command("create_api_token", "alice", "--rotate", stdout=rotated)
    assert rotated.getvalue().strip() not in {last, ""}


def test_create_api_token_for_an_unknown_user_fails_clearly() -> None:
    with pytest.raises(CommandError, match="'nobody'"):
        call_command("create_api_token", "nobody")


def test_runs_and_a2a_tasks_are_listed_read_only(admin_client: Any) -> None:
    for path in ("/admin/runs/run/", "/admin/runs/a2atask/"):
        page = admin_client.get(path)
        assert page.status_code == 200, path
        assert admin_client.get(path + "add/").status_code == 403
