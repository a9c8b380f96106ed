"""The demo's two extensions (issue 20, item 4), on the typed extension points of
`runs.core.callbacks`:

- `Redactor`: masks secrets (API keys, `password=...`-style pairs, bearer tokens, private
  key blocks) and card numbers (13-19 digits that pass the Luhn check) in every message
  before it reaches the model. As a `before_model` callback it records what it masked on
  the step's assistant event; as a request filter of the OpenAI provider
  (`Redactor.filter`) it covers every upstream request, also the summary and memory
  extraction calls, which build their requests elsewhere. The ledger keeps what the user
  wrote: redaction is about what leaves for the model.
- `ApprovalPolicy`: a `before_tool` callback that vetoes a destructive tool (named in
  `destructive`, or a tool with a true `destructive` attribute) unless the user's message
  of the current run approves it (`approve <tool name>`). The veto is the tool's result,
  so the model tells the user what to approve; the approval is itself a message in the
  ledger, so the behaviour is durable across processes and restarts, needs no extra state
  and works on every surface.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from runs.core.callbacks import CallbackContext, ReplaceRequest, ToolCallContext, Veto
from runs.core.llm.base import ModelRequest
from runs.core.textmemo import TextMemo
from sessions_app.core.events import Message, ToolCall

logger = logging.getLogger(__name__)

CARD_MASK = "[REDACTED CARD]"
SECRET_MASK = "[REDACTED]"

# Labelled secrets: the label stays (the model may need to know a password was given),
# the value goes. Quoted values may hold spaces; unquoted ones end at whitespace or ,;&
_PAIR = re.compile(
    r"""(?ix)
    (?P<key>\b(?:pass(?:word|wd)?|pwd|secret|client[_-]?secret|api[_-]?key|apikey|access[_-]?key|
        auth[_-]?token|access[_-]?token|refresh[_-]?token|token|private[_-]?key)\b)
    (?P<sep>\s*[=:]\s*)
    (?P<value>"[^"\n]+"|'[^'\n]+'|[^\s,;&]+)
    """
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*")
# Well-known key shapes: OpenAI/Anthropic style sk-, GitHub, Slack, AWS access key ids, Google.
_KEY = re.compile(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35})\b"
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
# 13-19 digits, optionally grouped by single spaces or dashes; Luhn decides.
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")


def luhn_valid(digits: str) -> bool:
    """Whether a digit string passes the Luhn checksum (every card number does)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _redact(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    found: Counter[str] = Counter()

    def count(kind: str, mask: str) -> str:
        found[kind] += 1
        return mask

    text = _PRIVATE_KEY.sub(lambda m: count("private key", SECRET_MASK), text)
    text = _KEY.sub(lambda m: count("api key", SECRET_MASK), text)
    text = _BEARER.sub(lambda m: count("bearer token", f"{m.group(1)} {SECRET_MASK}"), text)
    text = _PAIR.sub(
        lambda m: (
            m.group(0)
            if m.group("value").strip("\"'") == SECRET_MASK
            else count("secret", f"{m.group('key')}{m.group('sep')}{SECRET_MASK}")
        ),
        text,
    )

    def card(match: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            return count("card number", CARD_MASK)
        return match.group(0)

    return _CARD.sub(card, text), tuple(found.items())


# Every model call sends the run's history again: each text is scanned once (issue 23).
_REDACTED = TextMemo(_redact, max_chars=4_000_000, max_text=65_536)


class Redactor:
    """Masks secrets and card numbers in what goes to the model (see the module docstring)."""

    name = "redactor"

    def redact_text(self, text: str) -> tuple[str, Counter[str]]:
        """`text` with each secret and card number masked, and how many of each kind."""
        if not text:
            return text, Counter()
        redacted, found = _REDACTED(text)
        return redacted, Counter(dict(found))

    def redact_request(self, request: ModelRequest) -> tuple[ModelRequest, Counter[str]]:
        """The request with every message's text and tool-call arguments redacted."""
        found: Counter[str] = Counter()
        messages: list[Message] = []
        for message in request.messages:
            content, seen = self.redact_text(message.content)
            found.update(seen)
            calls: list[ToolCall] = []
            for call in message.tool_calls:
                arguments, seen = self.redact_text(call.arguments)
                found.update(seen)
                calls.append(replace(call, arguments=arguments) if seen else call)
            changed = content != message.content or any(
                a is not b for a, b in zip(calls, message.tool_calls, strict=True)
            )
            messages.append(replace(message, content=content, tool_calls=tuple(calls)) if changed else message)
        if not found:
            return request, found
        return replace(request, messages=tuple(messages)), found

    def filter(self, request: ModelRequest) -> ModelRequest:
        """The provider-level form (`OpenAIModel(request_filters=...)`): every upstream request."""
        redacted, found = self.redact_request(request)
        if found:
            logger.info("redactor masked %s in a model request", describe(found))
        return redacted

    def __call__(self, context: CallbackContext, request: ModelRequest) -> ReplaceRequest | None:
        """The `before_model` form: the change is recorded on the step's assistant event."""
        redacted, found = self.redact_request(request)
        if not found:
            return None
        return ReplaceRequest(request=redacted, note=f"masked {describe(found)}")


def describe(found: Counter[str]) -> str:
    """'2 card numbers, 1 secret': what a redaction masked, for the ledger and the log."""
    return ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(found.items()))


class ApprovalPolicy:
    """Veto destructive tools until the user approves them in the run's message."""

    name = "approval_policy"

    def __init__(self, destructive: Iterable[str] = ()) -> None:
        self.destructive = frozenset(destructive)

    def needs_approval(self, context: ToolCallContext, call: ToolCall) -> bool:
        return call.name in self.destructive or bool(getattr(context.tool, "destructive", False))

    @staticmethod
    def approved(text: str, tool: str) -> bool:
        """Whether `text` approves `tool`: 'approve restart_service' (also 'I approve ...'),
        not 'do not approve restart_service'."""
        for match in re.finditer(rf"(?i)\bapproved?\b[^.\n]*\b{re.escape(tool)}\b", text):
            if not re.search(r"(?i)\b(?:not|never|don't|do\s+not)\s+$", text[: match.start()]):
                return True
        return False

    def __call__(self, context: ToolCallContext, call: ToolCall) -> Veto | None:
        if not self.needs_approval(context, call):
            return None
        if self.approved(context.invocation.message.content, call.name):
            return None
        return Veto(
            reason=(
                f"{call.name} is destructive and needs the user's approval. Nothing was done. Ask the user to "
                f"reply 'approve {call.name}' if they want it run, then call it again."
            )
        )


__all__ = ["ApprovalPolicy", "Redactor", "describe", "luhn_valid"]
