"""English and Simplified Chinese (issue 21): pages, the JavaScript catalog and API error
messages follow the language switch's cookie, else Accept-Language; error codes never change.
The committed catalogs are complete and their compiled .mo files match the .po sources."""

from __future__ import annotations

import gettext
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db(transaction=True)

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9,en;q=0.5"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en-US,en;q=0.9"}
CATALOGS = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
DOMAINS = ("django", "djangojs")


def html_lang(response: Any) -> str:
    match = re.search(r'<html lang="([^"]+)">', response.content.decode())
    assert match, "the page has no <html lang>"
    return match.group(1)


def error(response: Any) -> dict[str, Any]:
    return response.json()["error"]


# -- pages -----------------------------------------------------------------------------------


def test_pages_are_english_without_a_language_preference(client: Any) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    assert html_lang(response) == "en"
    assert response["Content-Language"] == "en"
    html = response.content.decode()
    assert '<h1 id="login-heading">Log in</h1>' in html
    assert "登录" not in html


def test_accept_language_chinese_gives_the_chinese_login_page(client: Any) -> None:
    response = client.get("/login/", **ZH)
    assert html_lang(response) == "zh-hans"
    assert response["Content-Language"] == "zh-hans"
    html = response.content.decode()
    assert '<h1 id="login-heading">登录</h1>' in html
    assert '<label for="id_username">用户名</label>' in html
    assert "Username" not in html
    # The switch offers both languages, each named in itself, the current one selected.
    assert '<option value="zh-hans" lang="zh-hans" selected>简体中文</option>' in html
    assert '<option value="en" lang="en">English</option>' in html


def test_an_unsupported_language_falls_back_to_english(client: Any) -> None:
    response = client.get("/login/", HTTP_ACCEPT_LANGUAGE="de-DE,de;q=0.9")
    assert html_lang(response) == "en"


def test_the_chat_and_ledger_pages_are_chinese(client: Any, alice: Any, alice_api: Any) -> None:
    session = alice_api.post("/api/sessions/", {"agent": "support"}, format="json").json()
    client.force_login(alice)

    chat = client.get(f"/chat/{session['id']}/", **ZH).content.decode()
    for text in ("新对话", "发送", "按 Enter 发送，Shift+Enter 换行", "搜索对话", "退出登录", "账本", "跳到消息输入框"):
        assert text in chat, text
    for text in (">Send<", "New chat", "Log out", "Search chats"):
        assert text not in chat, text
    # The JavaScript catalog comes before the scripts that use it.
    assert chat.index('src="/jsi18n/"') < chat.index("agentsite/chat.js")

    ledger = client.get(f"/sessions/{session['id']}/", **ZH).content.decode()
    for text in ("会话账本", "返回对话", "上下文", "正在加载下一次模型调用将看到的内容…"):
        assert text in ledger, text
    assert "Session ledger" not in ledger

    english = client.get(f"/chat/{session['id']}/", **EN).content.decode()
    assert "New chat" in english and "新对话" not in english


def test_the_trace_page_is_chinese(client: Any, alice: Any, alice_api: Any) -> None:
    run = alice_api.post("/api/runs/", {"message": "hello", "wait": True}, format="json").json()
    client.force_login(alice)
    html = client.get(f"/runs/{run['id']}/trace/", **ZH).content.decode()
    for text in ("运行追踪", "模型调用", "工具调用", "返回对话", "<dd>已完成</dd>"):
        assert text in html, text
    assert "Run trace" not in html
    # The machine words of the timeline read in Chinese; their data attributes stay as they are.
    assert re.search(
        r'<tr class="trace-row trace-model" data-kind="model" data-status="ok"[^>]*>\s*<th[^>]*>[^<]*</th>\s*'
        r"<td>模型\s*</td>\s*<td>成功\s*</td>",
        html,
    ), html


def test_the_admin_is_chinese(admin_client: Any) -> None:
    html = admin_client.get("/admin/", **ZH).content.decode()
    assert "站点管理" in html  # Django's own catalog: "Site administration"
    # The switch is in the admin's user links too, the current language selected.
    assert '<select id="admin-language" name="language" class="language-select">' in html
    assert '<option value="zh-hans" lang="zh-hans" selected>简体中文</option>' in html


def test_the_javascript_catalog_follows_the_language(client: Any) -> None:
    chinese = client.get("/jsi18n/", **ZH)
    assert chinese.status_code == 200
    assert json.dumps("复制消息") in chinese.content.decode()  # "Copy message" in chatlist.js
    english = client.get("/jsi18n/", **EN).content.decode()
    assert json.dumps("复制消息") not in english


# -- the switch ------------------------------------------------------------------------------


def test_the_switch_sets_the_cookie_and_the_cookie_wins_over_accept_language(client: Any, alice: Any) -> None:
    client.force_login(alice)
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"}, **EN)
    assert response.status_code == 302 and response["Location"] == "/"
    cookie = response.cookies[settings.LANGUAGE_COOKIE_NAME]
    assert cookie.value == "zh-hans"
    assert int(cookie["max-age"]) == settings.LANGUAGE_COOKIE_AGE

    page = client.get("/", **EN)  # the browser still prefers English: the choice wins
    assert html_lang(page) == "zh-hans"
    assert "新对话" in page.content.decode()

    back = client.post("/i18n/setlang/", {"language": "en", "next": "/"}, **ZH)
    assert back.cookies[settings.LANGUAGE_COOKIE_NAME].value == "en"
    assert html_lang(client.get("/", **ZH)) == "en"


def test_the_logged_out_page_switches_back_to_the_login_page(client: Any, alice: Any) -> None:
    client.force_login(alice)
    html = client.post("/logout/", **ZH).content.decode()
    assert "你已退出登录" in html
    assert '<input name="next" type="hidden" value="/login/">' in html


def test_a_missing_page_is_chinese(client: Any) -> None:
    response = client.get("/no/such/page/", **ZH)
    assert response.status_code == 404
    assert '<h1 id="nf-heading">未找到</h1>' in response.content.decode()


def test_the_switch_refuses_a_foreign_next_url(client: Any) -> None:
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "https://evil.example/"})
    assert response.status_code == 302
    assert not response["Location"].startswith("https://evil.example")


# -- API errors: the message is translated, the code is not ------------------------------------


def test_a_missing_session_is_reported_in_chinese_with_the_same_code(alice_api: Any) -> None:
    english = alice_api.get("/api/sessions/nope/", **EN)
    chinese = alice_api.get("/api/sessions/nope/", **ZH)
    assert english.status_code == chinese.status_code == 404
    assert error(english) == {"code": "not_found", "message": "session 'nope' not found"}
    assert error(chinese) == {"code": "not_found", "message": "未找到会话 'nope'"}


def test_validation_errors_keep_their_code_and_field_in_chinese(alice_api: Any) -> None:
    english = alice_api.post("/api/runs/", {"message": "   "}, format="json", **EN)
    chinese = alice_api.post("/api/runs/", {"message": "   "}, format="json", **ZH)
    assert english.status_code == chinese.status_code == 400
    assert error(english) == {"code": "invalid", "message": "must not be empty", "field": "message"}
    assert error(chinese) == {"code": "invalid", "message": "不能为空", "field": "message"}


def test_framework_errors_and_unknown_endpoints_are_translated_too(client: Any, alice_api: Any) -> None:
    anonymous = client.get("/api/sessions/", **ZH)
    assert anonymous.status_code == 401
    assert error(anonymous)["code"] == "not_authenticated"
    assert re.search(r"[\u4e00-\u9fff]", error(anonymous)["message"]), error(anonymous)

    missing = alice_api.get("/api/no-such-thing/", **ZH)
    assert missing.status_code == 404
    assert error(missing) == {"code": "not_found", "message": "没有这个接口：'/api/no-such-thing/'"}


def test_a_missing_run_is_reported_in_chinese_off_the_request_thread(alice_api: Any) -> None:
    # Cancel is served from a pool thread (agentsite.api.views.off_thread): the language goes with it.
    response = alice_api.post("/api/runs/r-none/cancel/", **ZH)
    assert response.status_code == 404
    assert error(response) == {"code": "not_found", "message": "未找到运行 'r-none'"}


# -- the catalogs ----------------------------------------------------------------------------


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_catalog_is_complete_and_its_mo_matches_the_po(domain: str) -> None:
    polib = pytest.importorskip("polib", reason="polib (requirements.txt) reads the .po catalog")
    po = polib.pofile(str(CATALOGS / f"{domain}.po"))
    entries = [e for e in po if not e.obsolete]
    assert entries
    assert [e.msgid for e in entries if "fuzzy" in e.flags] == []
    assert [e.msgid for e in entries if not e.translated()] == []
    with (CATALOGS / f"{domain}.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    expected: dict[Any, str] = {}
    for e in entries:
        msgid = f"{e.msgctxt}\x04{e.msgid}" if e.msgctxt else e.msgid  # how GNU gettext keys a context
        if e.msgid_plural:
            expected[(msgid, 0)] = e.msgstr_plural[0]
        else:
            expected[msgid] = e.msgstr
    found = {key: value for key, value in compiled._catalog.items() if key != ""}
    assert found == expected, f"{domain}.mo is out of date: compile {domain}.po (README, Languages)"


def _marked_strings() -> set[str]:
    """Every msgid that the templates, scripts and Python sources mark, by xgettext as makemessages runs it."""
    from django.utils.translation.template import templatize

    root = Path(settings.BASE_DIR)
    found: set[str] = set()

    def extract(language: str, text: str, keywords: list[str]) -> None:
        # With its header (charset UTF-8): without one xgettext writes ASCII and drops the rest.
        args = ["xgettext", f"--language={language}", "--from-code=UTF-8", "-o", "-", "-"]
        args += [f"--keyword={k}" for k in keywords]
        out = subprocess.run(args, input=text, capture_output=True, text=True, check=True).stdout
        polib = pytest.importorskip("polib")
        found.update(e.msgid for e in polib.pofile(out))

    python_keywords = ["gettext_noop", "gettext_lazy", "ngettext_lazy:1,2", "pgettext:1c,2", "pgettext_lazy:1c,2"]
    for path in sorted((root / "templates").rglob("*.html")):
        extract("Python", templatize(path.read_text(), origin=str(path)), python_keywords)
    for path in sorted((root / "runs" / "static" / "agentsite").glob("*.js")):
        extract("JavaScript", path.read_text(), ["gettext_noop", "ngettext:1,2", "pgettext:1c,2"])
    for app in ("agentsite", "runs", "sessions_app", "skills_app", "evolution_app"):
        for path in sorted((root / app).rglob("*.py")):
            text = path.read_text()
            if "django.utils.translation" in text:
                extract("Python", text, python_keywords)
    return found


@pytest.mark.skipif(shutil.which("xgettext") is None, reason="xgettext (GNU gettext) is not installed")
def test_every_marked_string_of_the_pages_scripts_and_errors_is_in_the_catalogs() -> None:
    polib = pytest.importorskip("polib", reason="polib (requirements.txt) reads the .po catalog")
    known = {e.msgid for domain in DOMAINS for e in polib.pofile(str(CATALOGS / f"{domain}.po")) if e.translated()}
    missing = sorted(_marked_strings() - known)
    assert missing == [], "run makemessages and translate these (README, Languages)"
