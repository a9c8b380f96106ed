"""The Chinese interface in a real browser (issue 21): a new user logs in in English,
switches to 中文 with the keyboard, and the chat (its page and its scripts' strings) is
Chinese and still answers; the choice lasts past logging out; a browser that prefers
Chinese gets the Chinese login page at once. Uses test_browser.py's Chromium and helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401 (fixtures used by name)
    PASSWORD,
    _require_chromium,
    browser,
    carol,
    log_in,
    open_page,
    shoot,
)
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(tmp_path: Path, transactional_db: Any, carol: Any) -> Iterator[LiveServer]:  # noqa: F811
    # No auto memory: its extraction job would run on the same process as the chat.
    env = {"DJANGO_DEBUG": "1", "AGENTSITE_MODEL": "offline", "AGENTSITE_MEMORY_AUTO": "0"}
    with live_daphne(tmp_path, env=env) as live:
        yield live


def test_a_new_user_logs_in_in_english_switches_to_chinese_and_the_chat_answers(
    server: LiveServer,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, locale="en-US")
    log_in(page, server)  # the English login page: "Username", "Password", "Log in"
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("#chat-title")).to_have_text("New chat")

    # The switch, by keyboard only: focus the select, pick 简体中文, Tab to its button, Enter.
    switch = page.get_by_label("Language")
    switch.focus()
    switch.select_option("zh-hans")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Switch")).to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_load_state()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    assert page.url == f"{server.url}/"

    # The page's own strings and the scripts' (from the JavaScript catalog) are Chinese.
    expect(page.locator("#chat-title")).to_have_text("新对话")
    expect(page.get_by_role("link", name="新对话")).to_be_visible()
    expect(page.locator("#composer-hint")).to_have_text("按 Enter 发送，Shift+Enter 换行")
    assert page.evaluate("gettext('Send message')") == "发送消息"
    expect(page.get_by_label("语言")).to_have_value("zh-hans")

    # A suggestion, in Chinese, starts a run that answers (in Chinese: the offline planner
    # answers in the language of the question), and what the scripts draw around it is Chinese too.
    suggestion = page.get_by_role("button", name="为什么 payments.internal.example.com 的 TLS 握手失败？")
    suggestion.click()
    expect(page.locator(".msg-user .msg-bubble")).to_contain_text("TLS 握手失败")
    answer = page.locator(".msg-assistant .msg-bubble")
    expect(answer).to_contain_text("2026-11-14")
    expect(answer).to_contain_text("证书")
    expect(page.locator("#run-status")).to_have_text("完成")
    expect(page.locator(".msg-user .msg-author")).to_have_text("你")
    expect(page.locator(".msg-assistant .trace-link")).to_have_text("追踪")
    expect(page.locator(".msg-assistant .msg-figures")).to_contain_text("次模型调用")
    expect(page.locator(".msg-assistant").get_by_role("button", name="复制消息")).to_be_visible()
    expect(page.locator(".tool-card").first).to_contain_text("完成")
    shoot(page, "chat-chinese.png")

    # The ledger page of this chat follows the same choice.
    page.get_by_role("link", name="账本").click()
    expect(page.get_by_role("heading", name="上下文")).to_be_visible()
    expect(page.locator("#filter-count")).to_contain_text("个事件")
    shoot(page, "ledger-chinese.png", full_page=False)
    page.get_by_role("link", name="返回对话").click()

    # The choice is remembered in the cookie: after logging out the login page is Chinese.
    page.get_by_role("button", name="退出登录").click()
    expect(page.get_by_role("heading", name="你已退出登录")).to_be_visible()
    page.get_by_role("link", name="重新登录").click()
    page.get_by_label("用户名").fill("carol")
    page.get_by_label("密码").fill(PASSWORD)
    page.get_by_role("button", name="登录").click()
    page.wait_for_url(f"{server.url}/")
    expect(page.locator("#chat-title")).to_have_text("新对话")
    assert page.js_errors == []


def test_a_browser_that_prefers_chinese_gets_the_chinese_login_page(server: LiveServer, browser: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    page = open_page(browser, locale="zh-CN")
    page.goto(f"{server.url}/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.get_by_role("heading", name="登录")).to_be_visible()
    shoot(page, "login-chinese.png")
    page.get_by_label("用户名").fill("carol")
    page.get_by_label("密码").fill(PASSWORD)
    page.get_by_role("button", name="登录").click()
    page.wait_for_url(f"{server.url}/")
    expect(page.locator("#send-button .send-label")).to_have_text("发送")
    # A refused request from the page's script reads in Chinese, its code as it was.
    response = page.request.get(f"{server.url}/api/sessions/nope/", headers={"Accept-Language": "zh-CN"})
    assert response.status == 404
    assert response.json()["error"] == {"code": "not_found", "message": "未找到会话 'nope'"}
    assert page.js_errors == []
