"""Issue 21's "Done when", as one walk in Chromium, in English and in Chinese: a new user
logs in, runs the demo's long tool (the fleet scan) and watches its progress bar move,
cancels it, asks again and regenerates the answer, opens the answer's trace, renames the chat
and searches the chats; then a reviewer approves a learned skill candidate from its page with
a reason. The browser's language (Accept-Language) picks the interface's; every name the
walk looks for is the catalog's text for that language, so a string left untranslated, or a
translation the page does not use, fails here. Uses test_browser.py's Chromium and helpers
and test_browser_approval.py's learned candidate; all database work happens before the
browser starts."""

from __future__ import annotations

import gettext
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings

from tests.integration.test_browser import (  # noqa: F401 (fixtures used by name)
    PASSWORD,
    TLS_QUESTION,
    _require_chromium,
    browser,
    carol,
    open_page,
    shoot,
)
from tests.integration.test_browser_approval import candidate  # noqa: F401 (a fixture)
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FLEET_QUESTION = "Scan the whole fleet's certificates"
SCAN_STEPS = 12
BAR = '.tool-card[data-tool-name="scan_fleet"] progress'
LOCALES = {"en": "en-US", "zh-hans": "zh-CN"}
REASON = "The procedure matches our TLS runbook; the replay was not worse."


class Catalog:
    """The interface's strings in one language: the project's catalogs (pages, scripts) and
    Django's own (the admin's login), read with Python's gettext, not Django's (the browser's
    event loop runs in this thread)."""

    def __init__(self, language: str) -> None:
        self.language = language
        self.translations: gettext.NullTranslations = gettext.NullTranslations()
        if language == "en":
            return
        django_root = Path(django.__file__).parent
        sources = [
            (Path(settings.BASE_DIR) / "locale", "django"),
            (Path(settings.BASE_DIR) / "locale", "djangojs"),
            (django_root / "contrib" / "admin" / "locale", "django"),
            (django_root / "conf" / "locale", "django"),
        ]
        chain = [
            gettext.translation(domain, localedir=str(folder), languages=["zh_Hans"]) for folder, domain in sources
        ]
        for fallback in chain[1:]:
            chain[0].add_fallback(fallback)
        self.translations = chain[0]

    def __call__(self, msgid: str, **values: str) -> str:
        text = self.translations.gettext(msgid)
        assert self.language == "en" or text != msgid, f"the catalogs have no Chinese for {msgid!r}"
        return text % values if values else text


@pytest.fixture
def billing_chat(carol: Any) -> str:  # noqa: F811
    from sessions_app import services

    return str(services.session_create(user=carol, agent="support", title="Billing question").id)


@pytest.fixture
def walk_server(tmp_path: Path, transactional_db: Any, carol: Any) -> Iterator[LiveServer]:  # noqa: F811
    # The scan takes twelve steps of a second: long enough to watch the bar and cancel it.
    # No auto memory (it would share the process's runs), no evolution (no new candidates).
    env = {
        "DJANGO_DEBUG": "1",
        "AGENTSITE_MODEL": "offline",
        "AGENTSITE_DEMO_SCAN_DELAY_S": str(SCAN_STEPS),
        "AGENTSITE_MEMORY_AUTO": "0",
        "AGENTSITE_EVOLUTION": "0",
    }
    with live_daphne(tmp_path, env=env) as live:
        yield live


def bar_value(page: Any) -> float:
    return float(page.eval_on_selector(BAR, "bar => bar.value"))


@pytest.mark.parametrize("language", list(LOCALES))
def test_a_new_user_and_a_reviewer_walk_through_the_site(
    language: str,
    candidate: tuple[int, str, str],  # noqa: F811 (before the browser: its event loop forbids ORM calls)
    billing_chat: str,
    walk_server: LiveServer,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    t = Catalog(language)
    page = open_page(browser, locale=LOCALES[language])

    # A new user logs in; the login page is already in the browser's language.
    page.goto(f"{walk_server.url}/")
    expect(page.locator("html")).to_have_attribute("lang", language)
    page.get_by_label(t("Username")).fill("carol")
    page.get_by_label(t("Password")).fill(PASSWORD)
    page.get_by_role("button", name=t("Log in")).click()
    page.wait_for_url(f"{walk_server.url}/")
    expect(page.locator("#chat-title")).to_have_text(t("New chat"))

    # The long tool: its progress bar moves, and Cancel stops it where it was.
    composer = page.get_by_label(t("Message"), exact=True)
    composer.fill(FLEET_QUESTION)
    composer.press("Enter")
    card = page.locator('.tool-card[data-tool-name="scan_fleet"]')
    expect(card.locator("progress")).to_have_attribute("max", str(SCAN_STEPS))
    page.wait_for_function(f"document.querySelector({BAR!r}).value >= 1")
    first = bar_value(page)
    page.wait_for_function(f"document.querySelector({BAR!r}).value > {first}")
    shoot(page, f"walk-{language}-progress.png")
    page.get_by_role("button", name=t("Cancel the running reply")).click()
    expect(page.locator(".notice-inline", has_text=t("Run cancelled"))).to_be_visible()
    expect(card).to_have_attribute("data-status", "cancelled")
    stopped_at = bar_value(page)
    assert 0 < stopped_at < SCAN_STEPS

    # Ask again, then regenerate the answer: the newest version shows, the first one is kept.
    expect(page.get_by_role("button", name=t("Send message"))).to_be_enabled()
    composer.fill(TLS_QUESTION)
    composer.press("Enter")
    answers = page.locator(".msg-assistant:visible .msg-bubble")
    expect(answers.last).to_contain_text("2026-11-14")
    regenerate = page.get_by_role("button", name=t("Regenerate this answer"))
    expect(regenerate).to_be_enabled()
    regenerate.click()
    versions = page.get_by_role("group", name=t("Versions of this message and its answer"))
    expect(versions).to_contain_text("2 / 2")
    expect(answers.last).to_contain_text("2026-11-14")
    shoot(page, f"walk-{language}-regenerated.png")

    # The answer's trace: a timeline of its run with the tool call, and the way back.
    chat_url = page.url
    page.locator(".msg-assistant:visible .trace-link").last.click()
    page.wait_for_url("**/trace/")
    timeline = page.get_by_role("table", name=t("Timeline of the run"))
    expect(timeline.locator('tr[data-kind="tool"]', has_text="inspect_certificate")).to_have_attribute(
        "data-status", "ok"
    )
    shoot(page, f"walk-{language}-trace.png")
    page.get_by_role("link", name=t("Back to the chat")).click()
    page.wait_for_url(chat_url)
    # The chat page ends its start (the conversation loaded from the ledger) by focusing the
    # message box; a rename begun before that would lose its field's focus, which ends it.
    expect(page.get_by_label(t("Message"), exact=True)).to_be_focused()

    # Rename the chat inline, then search the chats by title.
    sidebar = page.locator("#session-list")
    open_item = sidebar.locator("li", has=page.locator('.session-link[aria-current="page"]'))
    billing_item = sidebar.locator("li", has=page.locator(f'[data-session-id="{billing_chat}"]'))
    rename = open_item.locator(".session-rename")
    title = open_item.locator(".session-title").inner_text()
    expect(rename).to_have_attribute("aria-label", t("Rename chat “%(title)s”", title=title))
    rename.click()
    field = page.get_by_label(t("New chat name (Enter saves, Escape cancels)"))
    expect(field).to_be_focused()
    field.fill("Fleet and TLS outage")
    field.press("Enter")
    expect(open_item.locator(".session-title")).to_have_text("Fleet and TLS outage")
    expect(page.locator("#chat-title")).to_have_text("Fleet and TLS outage")
    search = page.get_by_label(t("Search chats by title"))
    search.fill("tls outage")
    expect(open_item).to_be_visible()
    expect(billing_item).to_be_hidden()
    search.fill("no such chat")
    expect(page.get_by_text(t("No chat title matches."))).to_be_visible()
    search.press("Escape")
    expect(billing_item).to_be_visible()
    shoot(page, f"walk-{language}-chats.png")
    assert page.js_errors == []

    # A reviewer approves the learned candidate from its own page, with a reason.
    candidate_id, _, _ = candidate
    reviewer = open_page(browser, locale=LOCALES[language])
    change = f"/admin/evolution_app/skillcandidate/{candidate_id}/change/"
    reviewer.goto(f"{walk_server.url}/admin/login/?next={change}")
    reviewer.get_by_label(t("Username")).fill("admin")
    reviewer.get_by_label(t("Password")).fill("password")
    reviewer.get_by_role("button", name=t("Log in")).click()
    reviewer.wait_for_url(f"**{change}")
    decision = reviewer.locator("#candidate-decision")
    decision.get_by_label(t("Reason:")).fill(REASON)
    decision.get_by_role("button", name=t("Approve and publish")).click()
    expect(reviewer.locator("#candidate-decision")).to_have_count(0)  # decided: no buttons any more
    expect(reviewer.locator("div.field-decided_by")).to_contain_text("admin")
    expect(reviewer.locator("div.field-decision_reason")).to_contain_text(REASON)
    expect(reviewer.locator("div.field-revision")).to_contain_text("r1")
    shoot(reviewer, f"walk-{language}-approved.png", full_page=True)
    assert reviewer.js_errors == []
