"""Regenerate an answer, edit and resend a message, and the artifacts panel (issue 21, chat
features), in a real browser against the scripted model (so each answer differs): both go
over the chat's websocket (`regenerate` and `edit` frames), as messages do; the
newest version of a redone turn is shown with buttons to see the earlier ones, before and
after a reload; an edit opens in place (Escape cancels), and one of an older message is
marked with a link to its original; a file a run saves appears in the Files panel without
a reload. Uses test_browser.py's live Daphne, Chromium and helpers;
its scripted server runs without auto memory (AGENTSITE_MEMORY_AUTO=0)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401 (fixtures used by name)
    Frames,
    _require_chromium,
    browser,
    carol,
    log_in,
    open_page,
    scripted_model,
    send,
    shoot,
    slow_server,
)
from tests.support.daphne import LiveServer
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUESTION = "What broke the payments gateway?"
EDITED = "What broke the payments gateway on Friday?"
SATURDAY = "What broke the payments gateway on Saturday?"
REPORT = "# Gateway report\n\nThe certificate expired.\n"


def test_regenerate_edit_and_resend_and_the_files_panel(
    slow_server: LiveServer,  # noqa: F811
    scripted_model: ScriptedOpenAIServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    scripted_model.script(
        ServerStep.answer("First answer: the certificate expired."),
        ServerStep.answer("Second answer: an expired certificate on the gateway."),
        ServerStep.answer("Edited answer: on Friday the certificate expired at noon."),
        ServerStep.calls(("artifact_save", {"filename": "report.md", "content": REPORT, "mime": "text/markdown"})),
        ServerStep.answer("I saved the report as report.md."),
        ServerStep.answer("On Saturday nothing broke."),
    )
    page = open_page(browser)
    frames = Frames(page)
    rest_redos: list[str] = []
    page.on("request", lambda r: rest_redos.append(r.url) if r.url.endswith(("/regenerate/", "/edit/")) else None)
    log_in(page, slow_server)
    send(page, QUESTION)
    visible_answers = page.locator(".msg-assistant:visible .msg-bubble")
    expect(visible_answers).to_have_text(["First answer: the certificate expired."])

    # Regenerate: a new answer replaces the first on screen; the first is one click away.
    regenerate = page.get_by_role("button", name="Regenerate this answer")
    expect(regenerate).to_be_enabled()
    regenerate.click()
    expect(visible_answers).to_have_text(["Second answer: an expired certificate on the gateway."])
    expect(page.locator(".msg-user:visible")).to_have_count(1)
    versions = page.get_by_role("group", name="Versions of this message and its answer")
    expect(versions).to_contain_text("2 / 2")
    expect(versions).to_contain_text("Version 2 of 2")  # what a screen reader reads
    expect(page.get_by_role("button", name="Regenerate this answer")).to_be_enabled()
    shoot(page, "chat-regenerated.png")

    versions.get_by_role("button", name="Show the previous version").click()
    expect(visible_answers).to_have_text(["First answer: the certificate expired."])
    expect(versions).to_contain_text("1 / 2")
    # The previous button is disabled at the first version: focus went to the next one.
    expect(versions.get_by_role("button", name="Show the next version")).to_be_focused()
    expect(page.get_by_role("button", name="Regenerate this answer")).to_have_count(0)
    page.keyboard.press("Enter")
    expect(visible_answers).to_have_text(["Second answer: an expired certificate on the gateway."])

    # Edit in place: Escape cancels and gives focus back to the Edit button.
    user = page.locator(".msg-user:visible")
    edit = user.get_by_role("button", name="Edit and resend this message")
    edit.click()
    field = page.get_by_label("Edit your message (Enter sends, Shift+Enter adds a line, Escape cancels)")
    expect(field).to_be_focused()
    expect(field).to_have_value(QUESTION)
    field.fill("never sent")
    field.press("Escape")
    expect(field).to_have_count(0)
    expect(edit).to_be_focused()
    expect(user.locator(".msg-text")).to_have_text(QUESTION)

    # Resend the edited text: a new turn, shown as the newest version, marked edited.
    edit.click()
    field.fill(EDITED)
    field.press("Enter")
    expect(visible_answers).to_have_text(["Edited answer: on Friday the certificate expired at noon."])
    expect(page.locator(".msg-user:visible .msg-text")).to_have_text([EDITED])
    expect(page.locator(".msg-user:visible .msg-author")).to_contain_text("edited")
    expect(versions).to_contain_text("3 / 3")
    shoot(page, "chat-edited.png")

    # The Files panel: empty, then the file a run saves appears without a reload.
    files = page.locator("#artifacts-toggle")
    files.click()
    expect(files).to_have_attribute("aria-expanded", "true")
    panel = page.get_by_role("region", name="Files in this chat")
    expect(panel).to_contain_text("No files yet")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(files).to_be_focused()
    send(page, "Write the report as a file.")
    expect(page.locator(".msg-assistant:visible .msg-bubble").last).to_have_text("I saved the report as report.md.")
    expect(files.locator(".artifacts-count")).to_have_text("1")
    files.click()
    item = panel.locator(".artifact-item")
    expect(item).to_have_count(1)
    expect(item).to_contain_text("report.md")
    expect(item).to_contain_text("text/markdown")
    expect(item).to_contain_text("1 version")
    link = item.get_by_role("link", name="Download report.md (newest version)")
    href = link.get_attribute("href")
    assert href is not None and "/artifacts/report.md?version=0" in href
    assert page.request.get(href).text() == REPORT
    shoot(page, "chat-files-panel.png")
    page.keyboard.press("Escape")

    # An edit of an older message stays where the ledger puts it (last), marked, with a
    # link back to the original.
    page.locator(".msg-user:visible").first.get_by_role("button", name="Edit and resend this message").click()
    field.fill(SATURDAY)
    field.press("Enter")
    expect(page.locator(".msg-assistant:visible .msg-bubble").last).to_have_text("On Saturday nothing broke.")
    expect(page.locator(".msg-user:visible .msg-text")).to_have_text([EDITED, "Write the report as a file.", SATURDAY])
    page.locator(".msg-user:visible").last.get_by_role("button", name="Show the original message").click()
    expect(page.locator(".msg-user:visible").first).to_be_focused()

    # After a reload: the same versions, the newest shown; the ledger says what each redoes.
    page.reload()
    expect(page.locator(".msg-assistant:visible .msg-bubble")).to_have_text(
        [
            "Edited answer: on Friday the certificate expired at noon.",
            "I saved the report as report.md.",
            "On Saturday nothing broke.",
        ]
    )
    expect(versions).to_contain_text("3 / 3")
    versions.get_by_role("button", name="Show the previous version").click()
    expect(page.locator(".msg-assistant:visible .msg-bubble").first).to_have_text(
        "Second answer: an expired certificate on the gateway."
    )
    expect(files.locator(".artifacts-count")).to_have_text("1")
    session_id = page.evaluate("window.agentsiteChat.state.sessionId")
    events = page.request.get(f"{slow_server.url}/api/sessions/{session_id}/events/").json()["results"]
    users = [e for e in events if e["role"] == "user"]
    assert [u["text"] for u in users] == [QUESTION, QUESTION, EDITED, "Write the report as a file.", SATURDAY]
    assert users[1]["regenerates"] == users[0]["id"]
    assert users[2]["edit_of"] == users[1]["id"]
    assert users[4]["edit_of"] == users[2]["id"]
    # Over the websocket, not REST: the frames sent, and each answered with the new turn.
    assert [f for f in frames.sent if f["type"] in ("regenerate", "edit")] == [
        {"type": "regenerate"},
        {"type": "edit", "event_id": users[1]["id"], "message": EDITED},
        {"type": "edit", "event_id": users[2]["id"], "message": SATURDAY},
    ]
    redone = [f for f in frames.of_type("run.accepted") if "turn_event_id" in f]
    assert [(f["turn_event_id"], f.get("regenerates"), f.get("edit_of")) for f in redone] == [
        (users[1]["id"], users[0]["id"], None),
        (users[2]["id"], None, users[1]["id"]),
        (users[4]["id"], None, users[2]["id"]),
    ]
    assert rest_redos == []
    assert scripted_model.remaining == 0
    assert page.js_errors == []


def test_a_failed_answer_can_be_tried_again(
    slow_server: LiveServer,  # noqa: F811
    scripted_model: ScriptedOpenAIServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    scripted_model.script(
        ServerStep.error(400, "scripted refusal of this request"),
        ServerStep.answer("The gateway is fine now."),
    )
    page = open_page(browser)
    log_in(page, slow_server)
    send(page, QUESTION)
    failure = page.locator(".notice-inline", has_text="The run failed")
    expect(failure).to_contain_text("scripted refusal of this request")
    again = failure.get_by_role("button", name="Answer this message again")
    expect(again).to_have_text("Try again")
    again.click()
    expect(page.locator(".msg-assistant:visible .msg-bubble")).to_have_text(["The gateway is fine now."])
    expect(failure).to_be_hidden()  # the failed try is version 1 of 2
    versions = page.get_by_role("group", name="Versions of this message and its answer")
    expect(versions).to_contain_text("2 / 2")
    versions.get_by_role("button", name="Show the previous version").click()
    expect(failure).to_be_visible()

    # A refused edit (the socket's error frame, as REST's 413) is said beside the message,
    # and the text stays in the field to fix.
    page.locator(".msg-user:visible").get_by_role("button", name="Edit and resend this message").click()
    field = page.get_by_label("Edit your message (Enter sends, Shift+Enter adds a line, Escape cancels)")
    field.fill("x" * 32001)
    field.press("Enter")
    expect(page.locator(".msg-editing .turn-error")).to_contain_text(
        "Not sent: message is 32001 characters; the limit is 32000"
    )
    expect(field).to_be_enabled()
    expect(field).to_be_focused()
    assert scripted_model.remaining == 0
    assert page.js_errors == []
