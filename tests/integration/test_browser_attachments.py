"""Issue 20, item 3, in a real browser (Chromium, Playwright, live Daphne with the offline
planner): an image attached with the attach button shows as a chip, then as a thumbnail in
the sent message; the run stores it as an artifact of the session, the offline model says
it cannot see it, and after a reload the transcript's thumbnail is the stored artifact."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401  (fixtures)
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

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")


def test_an_attached_image_shows_as_a_thumbnail_in_the_transcript_and_after_a_reload(
    offline_server: LiveServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    log_in(page, offline_server)
    page.locator("#attach-input").set_input_files(files=[{"name": "dot.png", "mimeType": "image/png", "buffer": PNG}])
    chip = page.locator("#attachment-tray .attachment-chip")
    expect(chip).to_contain_text("dot.png")
    expect(chip.locator("img.attachment-thumb")).to_be_visible()

    send(page, "What is in this picture?")
    sent = page.locator(".msg-user")
    expect(sent.locator("img.attachment-thumb")).to_be_visible()
    expect(sent).to_contain_text("dot.png")
    expect(page.locator("#attachment-tray")).to_be_hidden()
    answer = page.locator(".msg-assistant .msg-bubble")
    expect(answer).to_contain_text("I cannot see images or read attached files")
    expect(answer).to_contain_text("dot.png (image/png, 68 B)")
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    shoot(page, "chat-attachment.png")

    # After a reload the thumbnail is the session's stored artifact, and it loads.
    page.reload()
    thumb = page.locator(".msg-user img.attachment-thumb")
    expect(thumb).to_be_visible()
    assert "/artifacts/" in (thumb.get_attribute("src") or "")
    page.wait_for_function(
        "() => { const i = document.querySelector('.msg-user img.attachment-thumb'); "
        "return i && i.complete && i.naturalWidth === 1; }"
    )
    assert page.js_errors == []
