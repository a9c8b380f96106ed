"""Chat features users expect (issue 21), in a real browser: rename a chat inline (Escape
cancels), search the chats by title, copy a message, delete a chat (the open one leads to
a new chat). Uses test_browser.py's live Daphne, Chromium and helpers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401 (fixtures used by name)
    TLS_QUESTION,
    _require_chromium,
    browser,
    carol,
    log_in,
    offline_server,
    open_page,
    send,
    shoot,
)
from tests.support.daphne import LiveServer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def billing_chat(carol: Any) -> str:  # noqa: F811
    """A second chat of carol's, made before the browser starts (no ORM inside its loop)."""
    from sessions_app import services

    return str(services.session_create(user=carol, agent="support", title="Billing question").id)


def test_rename_search_copy_and_delete_chats(
    billing_chat: str,  # before the browser: its event loop forbids ORM calls
    offline_server: LiveServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, permissions=["clipboard-read", "clipboard-write"])
    log_in(page, offline_server)
    send(page, TLS_QUESTION)
    answer = page.locator(".msg-assistant .msg-bubble")
    expect(answer).to_contain_text("certificate expired on 2026-11-14")
    open_url = page.url
    sidebar = page.locator("#session-list")
    open_item = sidebar.locator("li", has=page.locator('.session-link[aria-current="page"]'))
    billing_item = sidebar.locator("li", has=page.locator(f'[data-session-id="{billing_chat}"]'))

    # Copy: the answer's text reaches the clipboard and the button says so.
    copy = page.locator(".msg-assistant").get_by_role("button", name="Copy message")
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "certificate expired on 2026-11-14" in copied
    assert page.locator(".msg-user").get_by_role("button", name="Copy message").count() == 1

    # Rename the open chat inline: the sidebar and the heading change, and it lasts a reload.
    open_item.get_by_role("button", name=f"Rename chat “{TLS_QUESTION[:20]}", exact=False).click()
    field = page.get_by_label("New chat name (Enter saves, Escape cancels)")
    expect(field).to_be_focused()
    field.fill("Payments TLS outage")
    field.press("Enter")
    expect(open_item.locator(".session-title")).to_have_text("Payments TLS outage")
    expect(page.locator("#chat-title")).to_have_text("Payments TLS outage")
    shoot(page, "chat-renamed.png")

    # Escape cancels a rename and gives focus back to the Rename button.
    rename_billing = billing_item.get_by_role("button", name="Rename chat “Billing question”")
    rename_billing.click()
    field.fill("never saved")
    field.press("Escape")
    expect(field).to_have_count(0)
    expect(billing_item.locator(".session-title")).to_have_text("Billing question")
    expect(rename_billing).to_be_focused()

    page.reload()
    expect(open_item.locator(".session-title")).to_have_text("Payments TLS outage")

    # Search filters the listed chats by title. Right after the reload the field was seen to
    # lose a query typed into it (2 runs in 13 on PostgreSQL: the value empty, every chat shown;
    # the cause, likely the browser restoring the reloaded page's form state, is not pinned
    # down), so the query is typed again until it holds; the filtering is then checked as before.
    search = page.get_by_label("Search chats by title")
    for _ in range(5):
        search.fill("payments tls")
        page.wait_for_timeout(200)
        if search.input_value() == "payments tls":
            break
    expect(search).to_have_value("payments tls")
    expect(open_item).to_be_visible()
    expect(billing_item).to_be_hidden()
    search.fill("no such chat")
    expect(page.get_by_text("No chat title matches.")).to_be_visible()
    search.press("Escape")
    expect(search).to_have_value("")
    expect(billing_item).to_be_visible()

    # Delete a chat that is not open: after the confirm dialog it leaves the list.
    dialogs: list[str] = []

    def accept(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    billing_item.get_by_role("button", name="Delete chat “Billing question”").click()
    expect(billing_item).to_have_count(0)
    assert dialogs and "Billing question" in dialogs[0]
    assert page.request.get(f"{offline_server.url}/api/sessions/{billing_chat}/").status == 404
    assert page.url == open_url

    # Delete the open chat: the page goes to a new chat.
    open_item.get_by_role("button", name="Delete chat “Payments TLS outage”").click()
    page.wait_for_url(f"{offline_server.url}/")
    expect(page.locator("#chat-title")).to_have_text("New chat")
    expect(page.locator("#session-list .session-link")).to_have_count(0)
    assert page.js_errors == []
