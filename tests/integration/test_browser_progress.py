"""Issue 21 in a real browser: the demo's fleet scan shows a moving progress bar in its tool
card, and Cancel stops it where it was (Chromium driven by Playwright against a live Daphne
with the offline planner, as in tests/integration/test_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401  (fixtures used by name)
    Frames,
    _require_chromium,
    browser,
    carol,
    log_in,
    open_page,
    send,
    shoot,
)
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FLEET_QUESTION = "Scan the whole fleet's certificates"
BAR = '.tool-card[data-tool-name="scan_fleet"] progress'


@pytest.fixture
def scan_server(tmp_path: Path, transactional_db: Any, carol: Any) -> Iterator[LiveServer]:  # noqa: F811
    # Twelve steps of a second: slow enough to watch the bar and cancel half-way, and a
    # scan that did not stop would move the bar within the checks below.
    env = {
        "DJANGO_DEBUG": "1",
        "AGENTSITE_MODEL": "offline",
        "AGENTSITE_DEMO_SCAN_DELAY_S": "12",
        "AGENTSITE_MEMORY_AUTO": "0",
    }
    with live_daphne(tmp_path, env=env) as live:
        yield live


def bar_value(page: Any) -> float:
    return float(page.eval_on_selector(BAR, "bar => bar.value"))


def test_the_fleet_scan_shows_a_moving_progress_bar_and_cancel_stops_it(
    scan_server: LiveServer,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    frames = Frames(page)
    log_in(page, scan_server)
    send(page, FLEET_QUESTION)

    card = page.locator('.tool-card[data-tool-name="scan_fleet"]')
    expect(card).to_be_visible()
    expect(card.locator(".tool-args")).to_contain_text('"scope": "fleet"')
    expect(card.locator("progress")).to_have_attribute("max", "12")
    # The bar moves: it reaches one value, then a higher one.
    page.wait_for_function(f"document.querySelector({BAR!r}).value >= 1")
    first = bar_value(page)
    page.wait_for_function(f"document.querySelector({BAR!r}).value > {first}")
    expect(card.locator(".tool-progress-note")).to_contain_text("hosts scanned")
    shoot(page, "chat-progress.png")

    page.get_by_role("button", name="Cancel the running reply").click()
    expect(page.locator(".notice-inline", has_text="Run cancelled")).to_be_visible()
    expect(card).to_have_attribute("data-status", "cancelled")
    stopped_at = bar_value(page)
    assert 0 < stopped_at < 12
    # Three steps' time: an uncancelled scan would have moved the bar by now.
    page.wait_for_timeout(3000)
    assert bar_value(page) == stopped_at
    shoot(page, "chat-progress-cancelled.png")

    progress = [f for f in frames.of_type("CUSTOM") if f.get("name") == "agentsite.tool.progress"]
    assert len(progress) >= 2 and {f["value"]["toolName"] for f in progress} == {"scan_fleet"}
    assert [f["value"]["done"] for f in progress] == sorted(f["value"]["done"] for f in progress)
    assert not frames.of_type("TOOL_CALL_RESULT")
    finished = frames.of_type("RUN_FINISHED")
    assert finished and finished[-1]["outcome"] == {"type": "cancelled"}
    assert page.js_errors == []
