"""The admin as an approval gate (issue 21), in a real browser: a reviewer opens a learned
skill candidate, reads its evidence grouped by session (the session named and linked to its
ledger, each event once) and the new skill as a document, is refused an approval without a
reason, then approves it from the candidate's own page with a reason, which the page shows.
Uses test_browser.py's Chromium and helpers; the candidate is learned before the browser
starts (the README's skill-learning prompt on the offline planner, the review job eager)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.core.llm.base import Model
from tests.integration.test_browser import _require_chromium, browser, open_page, shoot  # noqa: F401
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

README_PROMPT = (
    "The payments service fails TLS handshakes, check the certificate of payments.internal.example.com "
    "and search the logs and tickets"
)
# The tools the offline planner called, in order (the site's agent also searches past sessions).
SKILL = "search-logs-inspect-certificate-lookup-ticket"


@pytest.fixture
def candidate(
    alice_api: Any,
    use_model: Callable[[Model], None],
    eager_celery: None,
    settings: Any,
    admin_user: Any,
) -> tuple[int, str, str]:
    """(candidate id, session id, skill name): the README prompt's run, reviewed and gated,
    waiting for a person."""
    from evolution_app import models as orm
    from runs.core.llm.offline import OfflineModel

    settings.AGENTSITE_EVOLUTION = True
    settings.AGENTSITE_EVOLUTION_MODEL = "offline"
    settings.AGENTSITE_EVOLUTION_GATES = ["spec", "safety", "effectiveness", "human"]
    settings.AGENTSITE_EVOLUTION_REPLAY = "auto"
    settings.AGENTSITE_MEMORY_AUTO = False
    use_model(OfflineModel())
    response = alice_api.post("/api/runs/", {"message": README_PROMPT, "wait": True}, format="json")
    assert response.status_code == 201, response.content
    learned = orm.SkillCandidate.objects.get()
    assert learned.name.startswith(SKILL) and learned.status == "pending_review"
    return learned.pk, response.json()["session_id"], learned.name


@pytest.fixture
def admin_server(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    env = {"DJANGO_DEBUG": "1", "AGENTSITE_MODEL": "offline", "AGENTSITE_MEMORY_AUTO": "0", "AGENTSITE_EVOLUTION": "0"}
    with live_daphne(tmp_path, env=env) as live:
        yield live


def test_a_reviewer_approves_a_candidate_from_its_page_with_a_reason(
    candidate: tuple[int, str, str],  # before the browser: its event loop forbids ORM calls
    admin_server: LiveServer,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    candidate_id, session_id, name = candidate
    page = open_page(browser)
    page.goto(f"{admin_server.url}/admin/login/?next=/admin/evolution_app/skillcandidate/{candidate_id}/change/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("password")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/admin/evolution_app/skillcandidate/{candidate_id}/change/")

    # Evidence: one group for the session, named and linked to its ledger; each event once.
    evidence = page.locator(".evolution-evidence")
    heading = evidence.locator("h4")
    expect(heading).to_have_count(1)
    expect(heading).to_contain_text(session_id)
    expect(heading).to_contain_text("alice")
    expect(heading.get_by_role("link")).to_have_attribute("href", f"/admin/sessions_app/session/{session_id}/change/")
    links = [text for text in evidence.locator("li a").all_inner_texts()]
    assert links and len(links) == len(set(links)), links  # each cited event once
    # The new skill reads as a document, not a diff against an empty file; words wrap whole.
    document = page.locator(".evolution-documents pre").first
    expect(document).to_contain_text(f"name: {name}")
    expect(page.locator("table.diff")).to_have_count(0)
    assert document.evaluate("e => getComputedStyle(e).wordBreak") == "normal"
    assert evidence.locator("li").first.evaluate("e => getComputedStyle(e).overflowWrap") == "normal"
    expect(page.locator("div.field-status")).to_contain_text("pending review")
    shoot(page, "admin-candidate-pending.png", full_page=True)

    # No reason, no decision: the browser asks for one (the field is required) ...
    decision = page.locator("#candidate-decision")
    reason = decision.get_by_label("Reason:")
    decision.get_by_role("button", name="Approve and publish").click()
    assert reason.evaluate("e => e.validity.valueMissing") is True
    assert reason.evaluate("e => e.validationMessage")  # the browser's own "fill in this field"
    expect(page.locator("div.field-status")).to_contain_text("pending review")
    # ... and a reason of blanks is refused by the server, which says what is missing.
    reason.fill("   ")
    decision.get_by_role("button", name="Approve and publish").click()
    expect(page.locator(".messagelist .error")).to_contain_text(
        "Nothing decided: Give a reason: it is kept with the decision in the audit trail."
    )
    expect(page.locator("div.field-status")).to_contain_text("pending review")

    # With a reason: published, and the decision and reason are on the page.
    decision.get_by_label("Reason:").fill("The procedure matches our TLS runbook; the replay was not worse.")
    decision.get_by_role("button", name="Approve and publish").click()
    # (The admin capitalises a message's first letter.)
    expect(page.locator(".messagelist li")).to_contain_text(re.compile(rf"{name}: published as revision 1", re.I))
    expect(page.locator("div.field-status")).to_contain_text("published")
    expect(page.locator("div.field-decided_by")).to_contain_text("admin")
    expect(page.locator("div.field-decision_reason")).to_contain_text("The procedure matches our TLS runbook")
    expect(page.locator("#candidate-decision")).to_have_count(0)  # decided: no buttons any more
    expect(page.locator("div.field-revision")).to_contain_text(f"{name} r1 (published)")
    shoot(page, "admin-candidate-approved.png", full_page=True)
    expect(page.get_by_role("button", name="Save", exact=True)).to_have_count(0)  # nothing else to write
    assert page.js_errors == []
