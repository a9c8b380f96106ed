"""The context inspector labels a regenerated turn `superseded` (issue 21), in a real browser
against the scripted model: after Regenerate, the ledger page's manifest of the next request
has a superseded row that says the newer turn replaces it, and the upstream got no trace of
the replaced answer. Uses test_browser.py's live Daphne, Chromium and helpers (its scripted
server runs without auto memory)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401 (fixtures used by name)
    _require_chromium,
    browser,
    carol,
    log_in,
    open_page,
    scripted_model,
    send,
    slow_server,
)
from tests.support.daphne import LiveServer
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_the_inspector_marks_a_regenerated_turn_superseded(
    slow_server: LiveServer,  # noqa: F811
    scripted_model: ScriptedOpenAIServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    scripted_model.script(
        ServerStep.answer("REPLACED: the certificate expired."),
        ServerStep.answer("Newer: the gateway's certificate expired at noon."),
    )
    page = open_page(browser)
    log_in(page, slow_server)
    send(page, "What broke the payments gateway?")
    answers = page.locator(".msg-assistant:visible .msg-bubble")
    expect(answers).to_have_text(["REPLACED: the certificate expired."])
    page.get_by_role("button", name="Regenerate this answer").click()
    expect(answers).to_have_text(["Newer: the gateway's certificate expired at noon."])
    assert "REPLACED" not in json.dumps(scripted_model.requests[-1])

    page.get_by_role("link", name="Ledger").click()
    page.wait_for_url(re.compile(r".*/sessions/[0-9a-f-]+/$"))
    superseded = page.locator("#context-manifest tr.manifest-superseded")
    expect(superseded).to_have_count(1)
    expect(superseded).to_contain_text("replaced by a regenerated or edited turn")
    expect(page.locator("#context-manifest-heading")).to_contain_text("superseded")
    assert page.js_errors == []
