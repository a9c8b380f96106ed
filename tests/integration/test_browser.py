"""The chat UI in a real browser: Chromium driven by Playwright against a live Daphne.

Daphne runs `agentsite.asgi:application` in a subprocess on the pytest-django test
database (with `DJANGO_DEBUG=1`, so it serves the static files too). One server uses the
offline planner; another talks to a local `ScriptedOpenAIServer` that streams slowly, so a
run lasts long enough to drop its socket or cancel it. Screenshots land in
`$AGENTSITE_SCREENSHOTS_DIR` for a human to look at (by default a temporary folder: a test
run writes nothing into the checkout).

All database work happens before the browser starts: Playwright's sync API keeps an event
loop running in this thread, and Django refuses ORM calls from inside one.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daphne import LiveServer, live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(os.environ.get("AGENTSITE_SCREENSHOTS_DIR") or Path(tempfile.gettempdir()) / "agentsite-screenshots")
TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"
OFFLINE_BADGE = "Offline planner: deterministic rules, not a language model"
PASSWORD = "carol-password-1"
EXPECT_TIMEOUT_MS = 20_000

# Plain prose (no markdown marks) so the rendered text can be compared with what was sent.
RECONNECT_ANSWER = (
    "The payments service fails its TLS handshakes because the serving certificate of "
    "payments.internal.example.com expired on the fourteenth of November. Checkout calls "
    "payments over TLS and every call since then has been refused. Renew the certificate, "
    "deploy it with its full chain and reload the service; then add an expiry alert thirty "
    "days ahead so it cannot happen again."
)
LONG_ANSWER = " ".join(f"Paragraph {n} of a very long answer that nobody should wait for." for n in range(1, 200))


def normalized(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="carol", password=PASSWORD)


@pytest.fixture
def offline_server(tmp_path: Path, transactional_db: Any, carol: Any) -> Iterator[LiveServer]:
    with live_daphne(tmp_path, env={"DJANGO_DEBUG": "1", "AGENTSITE_MODEL": "offline"}) as live:
        yield live


@pytest.fixture
def scripted_model() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as model:
        yield model


@pytest.fixture
def slow_server(
    tmp_path: Path, transactional_db: Any, carol: Any, scripted_model: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    env = {
        "DJANGO_DEBUG": "1",
        "AGENTSITE_MODEL": "scripted-openai-model",
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTSITE_MODEL_MAX_RETRIES": "0",
        # The scripted model answers requests in order and this test scripts only the chat turns:
        # a memory extraction after the first run would take the second turn's answer.
        "AGENTSITE_MEMORY_AUTO": "0",
    }
    with live_daphne(tmp_path, env=env) as live:
        yield live


@pytest.fixture(autouse=True)
def _require_chromium() -> None:
    """Skip before any server starts when the machine has no Chromium."""
    if not CHROMIUM.exists():
        print(f"\nbrowser tests skipped: no Chromium at {CHROMIUM}; install it with `apt-get install chromium`")
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Frames:
    """Every websocket frame the page sends and receives, decoded."""

    def __init__(self, page: Any) -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        self.sockets = 0
        page.on("websocket", self._attach)

    def _attach(self, socket: Any) -> None:
        self.sockets += 1
        socket.on("framesent", lambda payload: self.sent.append(json.loads(payload)))
        socket.on("framereceived", lambda payload: self.received.append(json.loads(payload)))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]

    def wait_for(self, page: Any, kind: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The frames of `kind` once at least one has arrived (frames are delivered by the
        page's event loop, so this waits on the page, not with time.sleep)."""
        for _ in range(int(timeout_s / 0.05)):
            if found := self.of_type(kind):
                return found
            page.wait_for_timeout(50)
        raise AssertionError(f"no {kind} frame within {timeout_s} s; received {[f.get('type') for f in self.received]}")


def open_page(browser: Any, **context: Any) -> Any:
    page = browser.new_context(viewport={"width": 1360, "height": 860}, **context).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.js_errors = errors
    return page


def log_in(page: Any, server: LiveServer) -> None:
    page.goto(f"{server.url}/")
    assert page.url.startswith(f"{server.url}/login/")  # the chat needs a login
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/")


def send(page: Any, text: str) -> None:
    composer = page.get_by_label("Message", exact=True)
    composer.fill(text)
    composer.press("Enter")


def shoot(page: Any, name: str, **options: Any) -> None:
    page.mouse.move(0, 0)
    page.wait_for_timeout(350)  # let colour transitions and the sidebar slide finish
    page.screenshot(path=str(SCREENSHOTS / name), **options)


def test_chat_streams_the_offline_answer_with_a_tool_card_and_shows_it_once_after_reload(
    offline_server: LiveServer, browser: Any
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    frames = Frames(page)
    log_in(page, offline_server)
    shoot(page, "login-then-empty-chat.png")
    expect(page.locator("#model-badge")).to_have_text(OFFLINE_BADGE)

    send(page, TLS_QUESTION)
    card = page.locator('.tool-card[data-tool-name="inspect_certificate"]')
    expect(card).to_be_visible()
    expect(card.locator(".tool-args")).to_contain_text('"host": "payments.internal.example.com"')
    expect(card).to_have_attribute("data-status", "done")
    card.locator(".tool-result summary").click()
    expect(card.locator(".tool-result pre")).to_contain_text('"expired": true')
    answer = page.locator(".msg-assistant .msg-bubble")
    expect(answer).to_contain_text("certificate expired on 2026-11-14")
    expect(answer).to_contain_text("not a language model")
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    shoot(page, "chat-answer.png")

    # The answer came as deltas of one message (the fan-out merges the adjacent deltas of a
    # burst, and the offline planner's answer is one burst: docs/websocket.md), and the UI
    # drew one bubble from them, whose text is the deltas' text.
    accepted = frames.of_type("run.accepted")
    assert len(accepted) == 1 and frames.sent[0] == {"type": "run", "message": TLS_QUESTION, "agent": "support"}
    assistant_ids = {f["messageId"] for f in frames.of_type("TEXT_MESSAGE_START") if f["role"] == "assistant"}
    deltas = [f for f in frames.of_type("TEXT_MESSAGE_CONTENT") if f["messageId"] in assistant_ids]
    assert len(assistant_ids) == 1 and deltas
    assert "certificate expired on 2026-11-14" in "".join(f["delta"] for f in deltas)
    assert page.locator(".msg-user").count() == 1
    assert page.locator(".msg-assistant").count() == 1
    assert page.locator(".tool-card").count() == 1
    assert re.fullmatch(rf"{offline_server.url}/chat/[0-9a-f-]+/", page.url)
    expect(page.locator('.session-link[aria-current="page"]')).to_contain_text("Why does payments")

    # Reload: the whole conversation comes back from the ledger, each piece exactly once.
    page.reload()
    expect(page.locator("#connection-status")).to_have_text("Live")
    expect(answer).to_contain_text("certificate expired on 2026-11-14")
    expect(page.locator(".msg-user .msg-bubble")).to_have_text(TLS_QUESTION)
    assert page.locator(".msg-assistant").count() == 1
    assert page.locator(".tool-card").count() == 1
    expect(card).to_have_attribute("data-status", "done")
    shoot(page, "chat-reloaded.png")

    # Small screens and dark mode.
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 390, "height": 820})
    shoot(page, "chat-mobile-dark.png")
    page.get_by_role("button", name="Show chats").click()
    expect(page.locator("#sidebar .session-link").first).to_be_visible()
    shoot(page, "chat-mobile-sidebar-dark.png")
    page.keyboard.press("Escape")
    page.set_viewport_size({"width": 1360, "height": 860})
    page.emulate_media(color_scheme="light")

    # The ledger page: every event, filterable.
    page.get_by_role("link", name="Ledger").click()
    page.wait_for_url(re.compile(r".*/sessions/[0-9a-f-]+/$"))
    rows = page.locator("#ledger-table tbody tr")
    expect(rows).to_have_count(5)
    page.get_by_label("Role").select_option("tool")
    expect(page.locator("#ledger-table tbody tr:visible")).to_have_count(1)
    expect(page.locator("#filter-count")).to_have_text("Showing 1 of 5 events")
    page.get_by_label("Role").select_option("")
    page.get_by_label("Tool").select_option("inspect_certificate")
    expect(page.locator("#ledger-table tbody tr:visible")).to_have_count(2)  # the call and its result
    page.get_by_label("Tool").select_option("")
    # The context inspector: the next request block by block, and a chart of the model calls.
    inspector = page.locator("#context-inspector")
    expect(inspector.locator("#context-status")).to_contain_text("model call(s) recorded")
    expect(inspector.locator("#context-chart svg polyline.sent")).to_have_count(1)
    expect(inspector.locator("#context-totals")).to_contain_text("Next call sends")
    expect(inspector.locator("#context-blocks li.kind-instruction").first).to_be_visible()
    shoot(page, "ledger.png", full_page=True)
    page.emulate_media(color_scheme="dark")
    shoot(page, "ledger-dark.png", full_page=True)
    assert page.js_errors == []


def test_a_dropped_socket_reconnects_without_duplicates_a_long_run_cancels_and_a_failure_shows_in_place(
    slow_server: LiveServer, scripted_model: ScriptedOpenAIServer, browser: Any
) -> None:
    from playwright.sync_api import expect

    scripted_model.script(
        ServerStep.answer(RECONNECT_ANSWER, chunk_size=6, chunk_delay_s=0.08),
        ServerStep.answer(LONG_ANSWER, chunk_size=4, chunk_delay_s=0.2),
        ServerStep.error(400, "scripted refusal of this request"),
    )
    page = open_page(browser, color_scheme="light")
    frames = Frames(page)
    log_in(page, slow_server)
    expect(page.locator("#model-badge")).to_have_text("Model: scripted-openai-model (openai)")

    # 1. The socket drops mid-answer: the page reconnects and the answer ends up whole, once.
    send(page, "Why do the payments TLS handshakes fail?")
    streaming = page.locator(".msg-assistant.msg-streaming .msg-bubble")
    expect(streaming).to_contain_text("certificate")  # some, not all, of the text is in
    assert normalized(streaming.inner_text()) != normalized(RECONNECT_ANSWER)
    page.evaluate("window.agentsiteChat.state.socket.close()")
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    assert frames.sockets >= 2
    answers = page.locator(".msg-assistant .msg-bubble")
    expect(answers).to_have_count(1)
    assert normalized(answers.first.inner_text()) == normalized(RECONNECT_ANSWER)
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator("#connection-status")).to_have_text("Live")

    # 2. A long run: the button turns into Cancel, which sends a cancel for that run.
    send(page, "Now write me something very long.")
    second = page.locator(".msg-assistant .msg-bubble").nth(1)
    expect(second).to_contain_text("Paragraph 2")
    cancel = page.get_by_role("button", name="Cancel the running reply")
    expect(cancel).to_be_visible()
    shoot(page, "chat-streaming.png")
    cancel.click()
    expect(page.locator(".notice-inline", has_text="Run cancelled")).to_be_visible()
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    run_id = frames.of_type("run.accepted")[-1]["run_id"]
    assert {"type": "cancel", "run_id": run_id} in frames.sent
    finished = [f for f in frames.of_type("RUN_FINISHED") if f["runId"] == run_id]
    assert finished and finished[-1]["outcome"] == {"type": "cancelled"}
    assert "Paragraph 199" not in second.inner_text()
    expect(page.locator(".msg-assistant.msg-streaming")).to_have_count(0)
    shoot(page, "chat-cancelled.png")

    # 3. A failed run: its error shows in place, and again (once) after a reload.
    send(page, "And now?")
    failure = page.locator(".notice-inline", has_text="The run failed")
    expect(failure).to_contain_text("scripted refusal of this request")
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    shoot(page, "chat-error.png")
    page.reload()
    expect(page.locator("#connection-status")).to_have_text("Live")
    expect(failure).to_have_count(1)
    expect(failure).to_contain_text("scripted refusal of this request")
    expect(page.locator(".msg-user")).to_have_count(3)
    expect(page.locator(".msg-assistant")).to_have_count(1)  # a cancelled reply's deltas are not kept
    assert page.js_errors == []


def test_the_troubleshooting_graph_shows_its_nodes_waits_for_approval_and_finishes_after_it(
    offline_server: LiveServer, browser: Any
) -> None:
    """Issue 8, done when: in the browser the demo graph shows its nodes progressing, stops
    for approval, and finishes after approval (a reload while it waits keeps the prompt)."""
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    frames = Frames(page)
    log_in(page, offline_server)
    page.get_by_label("Agent").select_option("troubleshoot")
    expect(page.locator("#model-badge")).to_have_text("Graph: deterministic steps, no model")
    send(page, TLS_QUESTION)

    progress = page.locator(".graph-card")
    expect(progress.locator('.graph-node[data-node="check_certificate"]')).to_be_visible()
    expect(progress.locator('.graph-node[data-node="collect_logs"]')).to_be_visible()
    approval = page.get_by_role("group", name="Approval needed")
    expect(approval).to_contain_text("Approve this incident report?")
    # The card comes with the interrupt event; the run's end follows it.
    paused = frames.wait_for(page, "RUN_FINISHED")[-1]
    assert paused["outcome"]["type"] == "interrupt"

    # The prompt survives a reload: it comes back from the runs API.
    page.reload()
    expect(page.locator("#connection-status")).to_have_text("Live")
    expect(approval).to_be_visible()
    shoot(page, "graph-approval.png")
    approval.get_by_role("button", name="Approve").click()
    expect(approval.locator(".approval-status")).to_contain_text("Approved")
    expect(page.locator(".msg-assistant .msg-bubble").last).to_contain_text("Approved: this report is final.")
    expect(page.locator('.graph-node[data-node="publish"]').last).to_be_visible()
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    expect(page.locator(".msg-user", has_text="Approve")).to_have_count(1)
    steps = {f["stepName"] for f in frames.of_type("STEP_FINISHED")}
    assert {"plan", "collect_logs", "check_certificate", "decide", "draft_report", "publish"} <= steps
    shoot(page, "graph-finished.png")
    assert page.js_errors == []


def test_a_message_typed_while_the_reply_streams_is_queued_then_taken_by_the_same_run(
    slow_server: LiveServer, scripted_model: ScriptedOpenAIServer, browser: Any
) -> None:
    """Issue 19, item 1: the message box stays open while a run streams; what is sent shows
    as queued, can be withdrawn, and moves into the conversation when the run takes it,
    before its next model step."""
    import dataclasses

    from playwright.sync_api import expect

    slow_lookup = dataclasses.replace(
        ServerStep.calls(
            ("lookup_ticket", {"ticket_id": "INC-1042"}, "call_inc1042"),
            text="Let me check that ticket for you, one moment please. ",
        ),
        chunk_size=2,
        fragment_size=1,
        chunk_delay_s=0.2,  # about 10 s
    )
    scripted_model.script(
        slow_lookup, ServerStep.answer("INC-1042 is open, and so is INC-1187.", chunk_size=4, chunk_delay_s=0.05)
    )
    page = open_page(browser, color_scheme="light")
    frames = Frames(page)
    log_in(page, slow_server)
    send(page, "Is ticket INC-1042 open?")
    expect(page.locator(".msg-assistant.msg-streaming .msg-bubble")).to_contain_text("Let me")
    run_id = frames.wait_for(page, "run.accepted")[-1]["run_id"]

    # The box stays open: a message sent now is queued, and can be taken back.
    composer = page.get_by_label("Message", exact=True)
    expect(composer).to_be_enabled()
    send(page, "never mind this one")
    tray = page.locator("#queued-tray")
    first = tray.locator(".queued-item", has_text="never mind this one")
    expect(first.locator(".queued-state")).to_have_text("Queued")
    first.get_by_role("button", name="Withdraw").click()
    expect(first).to_have_count(0)
    expect(composer).to_have_value("never mind this one")  # back in the box

    composer.fill("")
    send(page, "And is INC-1187 open too?")
    queued = tray.locator(".queued-item", has_text="And is INC-1187 open too?")
    expect(queued.locator(".queued-state")).to_have_text("Queued")
    shoot(page, "chat-queued.png")
    # A reload while it waits keeps it in the tray (GET /api/runs/<id>/messages/).
    page.reload()
    expect(queued.locator(".queued-state")).to_have_text("Queued")

    # Taken before the run's next model step: it moves into the conversation, after the tool call.
    expect(queued).to_have_count(0)
    expect(tray).to_be_hidden()
    users = page.locator(".msg-user .msg-bubble")
    expect(users).to_have_count(2)
    expect(users.nth(1)).to_have_text("And is INC-1187 open too?")
    expect(page.locator(".msg-assistant .msg-bubble").last).to_contain_text("so is INC-1187")
    expect(page.get_by_role("button", name="Send message")).to_be_enabled()
    shoot(page, "chat-queued-taken.png")

    assert {"type": "message", "run_id": run_id, "message": "And is INC-1187 open too?"} in frames.sent
    consumed = frames.of_type("message.consumed")
    assert [(f["run_id"], f["state"]) for f in consumed] == [(run_id, "consumed")]
    assert len(frames.of_type("run.accepted")) == 1  # one run did it all
    second = scripted_model.requests[1]["messages"]
    assert second[-2]["role"] == "tool" and second[-1] == {"role": "user", "content": "And is INC-1187 open too?"}
    assert all(m.get("content") != "never mind this one" for m in second)
    assert page.js_errors == []


def test_each_answer_links_to_its_runs_trace_which_shows_the_model_and_tool_calls(
    offline_server: LiveServer, browser: Any
) -> None:
    """Issue 21: a run trace reachable from each answer, live and after a reload."""
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    log_in(page, offline_server)
    send(page, TLS_QUESTION)
    link = page.locator(".msg-assistant .trace-link")
    expect(link).to_have_count(1)
    # The run record's figures under the answer (tokens in / out, latency, model calls).
    figures = page.locator(".msg-assistant .msg-figures")
    expect(figures).to_contain_text("model call")
    assert int(figures.get_attribute("data-model-calls") or "0") >= 1
    page.reload()  # the ledger replay links the answer too
    expect(link).to_have_count(1)
    expect(figures).to_have_count(1)
    expect(figures).to_contain_text(re.compile(r"tokens in · [\d,]+ out · \d+\.\d s · [1-9]\d* model calls?"))
    shoot(page, "chat-answer-figures.png")

    link.click()
    table = page.get_by_role("table", name="Timeline of the run")
    expect(table).to_be_visible()
    expect(table.locator('tr[data-kind="tool"]', has_text="inspect_certificate")).to_have_attribute("data-status", "ok")
    expect(table.locator('tr[data-kind="model"]').first).to_be_visible()
    page.get_by_role("link", name="Back to the chat").click()
    expect(page.locator(".msg-assistant .msg-bubble")).to_contain_text("certificate expired on 2026-11-14")
    assert page.js_errors == []
