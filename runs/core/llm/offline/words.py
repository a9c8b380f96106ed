"""What the offline planner reads in a text: content-word stems (lowercased, lightly
stemmed, stopwords out) and the identifiers a request names (hosts, ticket ids, quoted
strings, numbers)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sessions_app.core.text import FUNCTION_WORDS, stem

# The shared function words (sessions_app.core.text), and what a request to a support desk
# says around its topic ("please check ...", "what happened yesterday").
_STOPWORDS = FUNCTION_WORDS | frozenset(
    """
    after again because before but check doing done earlier ever get give happen happened having
    hello help here hi know last let look more most need now past please recent recently seen show
    tell thank thanks today while whom wrong yesterday
    """.split()
)

# Cross-language hints: the seed scenario is written in Chinese, the tools in English.
_CJK_HINTS: tuple[tuple[str, str], ...] = (
    ("证书", "certificate"),
    ("日志", "logs"),
    ("工单", "ticket"),
    ("错误", "error"),
    ("报错", "error"),
    ("失败", "fails"),
    ("过期", "expired"),
    ("握手", "handshake"),
    ("服务", "service"),
    ("支付", "payments"),
    ("搜索", "search"),
    ("查询", "search"),
    ("认证", "auth"),
    ("扫描", "scan"),
    ("所有主机", "fleet"),
    ("全部主机", "fleet"),
    ("集群", "fleet"),
    ("重启", "restart"),
    ("主机", "host"),
    ("网关", "gateway"),
    ("结账", "checkout"),
    ("历史", "past"),
    ("事故", "incident"),
)

_FILE_SUFFIXES = frozenset("py md txt json log pem csv yaml yml html js ts toml ini cfg conf sh png jpg".split())
_HOST = re.compile(
    r"(?<![\w.@-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9])(?![\w-])", re.I
)
_TICKET = re.compile(r"(?<![\w-])([A-Za-z][A-Za-z0-9]{1,9}-\d{1,9})(?![\w-])")
_QUOTED = re.compile(r'"([^"\n]{1,200})"|“([^”\n]{1,200})”|`([^`\n]{1,200})`|(?<!\w)\'([^\'\n]{1,200})\'(?!\w)')
_NUMBER = re.compile(r"(?<![\w.:/-])(\d{1,9})(?![\w:/-]|\.\d)")
_WORD = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


def _vocabulary(text: str) -> list[str]:
    """Content-word stems of a text, in order, without duplicates (hyphenated words also
    count by their parts)."""
    return list(_stems_of(text))


@functools.lru_cache(maxsize=4096)
def _stems_of(text: str) -> tuple[str, ...]:
    # Tool names, descriptions and schemas are re-read on every planning step of every run.
    stems: list[str] = []
    for word in _WORD.findall(text.lower()):
        parts = [word] if not re.search(r"[-_]", word) else [word, *re.split(r"[-_]", word)]
        for part in parts:
            if len(part) > 1 and part not in _STOPWORDS and not part.isdigit():
                stems.append(stem(part))
    return tuple(dict.fromkeys(stems))


@dataclass(frozen=True, kw_only=True)
class _Word:
    text: str  # as written, lowercased
    stem: str
    position: int


@dataclass(kw_only=True)
class _Analysis:
    """What the planner reads out of the user's request."""

    text: str
    words: list[_Word] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)

    @property
    def stems(self) -> list[str]:
        return list(dict.fromkeys(w.stem for w in self.words))


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _analyse(text: str) -> _Analysis:
    analysis = _Analysis(text=text)
    masked = text
    for match in _QUOTED.finditer(text):
        value = next(g for g in match.groups() if g is not None).strip()
        if value:
            analysis.quoted.append(value)
    # Identifiers are blanked out (same length, so positions hold) before words are read.
    for match in _HOST.finditer(text):
        host = match.group(1).lower()
        if host.rsplit(".", 1)[-1] not in _FILE_SUFFIXES and host not in analysis.hosts:
            analysis.hosts.append(host)
        masked = _blank(masked, match.start(1), match.end(1))
    for match in _TICKET.finditer(masked):
        ticket = match.group(1).upper()
        if ticket not in analysis.tickets:
            analysis.tickets.append(ticket)
        masked = _blank(masked, match.start(1), match.end(1))
    analysis.numbers = [int(n) for n in _NUMBER.findall(masked)]
    for match in _WORD.finditer(masked.lower()):
        word = match.group(0)
        if word in _STOPWORDS or word.isdigit() or len(word) < 2:
            continue
        analysis.words.append(_Word(text=word, stem=stem(word), position=match.start()))
    for hint, english in _CJK_HINTS:
        index = text.find(hint)
        if index >= 0:
            analysis.words.append(_Word(text=english, stem=stem(english), position=index))
    analysis.words.sort(key=lambda w: w.position)
    return analysis
