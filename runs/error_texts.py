"""Error texts in the user's language (issue 21): core errors and the websocket's error frames.

`runs.core` raises errors in English and never imports Django's translation; each error a
person reads carries a stable `error_code` and the `params` its text was made from
(`runs.core.errors`). A surface says it in the user's language:

- `core_error_text(exc)`: by the error's code and params, in the active language (REST's
  envelope, `agentsite.errors`); `translated_error(error)`: a run record's error (REST's run);
- `localize_frame_text(text, language)`: a websocket error frame (`{"type": "error", "error":
  {"code", "message", "field"?}}`), or a run's AG-UI RUN_ERROR, with its `message` in
  `language`; the `code` and the `field` never change. The socket's own messages, the redo frames' and core errors' are
  recognised by their English template (`TEMPLATES`); one not listed stays English.
- `socket_language(scope)`: the language a socket's handshake asks for, by the rule the HTTP
  side uses (`LocaleMiddleware`): the language switch's cookie, else `Accept-Language`, else
  `LANGUAGE_CODE`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.utils import translation
from django.utils.translation import gettext, gettext_noop

from runs.core.errors import AgentsiteError

CORE_TEXTS: Mapping[str, str] = {
    "unknown_agent": gettext_noop("agent %(agent)s not found"),
    "duplicate_request": gettext_noop("request id %(request_id)s was already used"),
    "too_many_runs": gettext_noop("you have %(active)s runs in progress; the limit is %(limit)s: wait for one to end"),
    "event_limit": gettext_noop("the run exceeded the limit of %(limit)s events and was stopped"),
    "run_not_active": gettext_noop("run %(run)s is not running here"),
    "queue_full": gettext_noop("run %(run)s already has %(limit)s queued messages; the limit is %(limit)s"),
}
"""English templates (msgids) of core errors by `error_code`; `params` fill them."""

TEMPLATES: tuple[str, ...] = (
    *CORE_TEXTS.values(),
    # The socket's own (runs/surfaces/websocket/consumers.py).
    gettext_noop("live updates are unavailable; this socket follows the saved events instead"),
    gettext_noop("%(field)s contains a NUL character (U+0000) at index %(index)s"),
    gettext_noop("%(field)s contains a lone surrogate (U+%(codepoint)s) at index %(index)s"),
    gettext_noop("frames must be JSON text, not binary"),
    gettext_noop("the frame is not valid JSON: %(detail)s"),
    gettext_noop("a frame must be a JSON object"),
    gettext_noop("type must be a string"),
    gettext_noop(
        "unknown frame type %(kind)s; expected 'run', 'cancel', 'message', 'withdraw', 'regenerate' or 'edit'"
    ),
    gettext_noop("unknown frame type %(kind)s; expected 'run', 'cancel', 'message' or 'withdraw'"),
    gettext_noop("the server could not handle this frame; the socket stays open"),
    gettext_noop("%(field)s must be a non-empty string"),
    gettext_noop("run %(run)s not found in this session"),
    gettext_noop("run %(run)s already ended (%(status)s)"),
    gettext_noop("run %(run)s already ended"),
    gettext_noop("run %(run)s is running, but the process that runs it did not answer"),
    gettext_noop("message is %(length)s characters; the limit is %(limit)s"),
    gettext_noop("message is empty"),
    # The redo frames (runs/surfaces/websocket/turn_frames.py, runs/turns.py: the same msgids).
    gettext_noop("session %(value)s not found"),
    gettext_noop("%(field)s contains a NUL character (U+0000)"),
    gettext_noop("%(field)s contains a lone surrogate"),
    gettext_noop("event %(event)s not found in this session"),
    gettext_noop("event %(event)s is not a message you sent (%(author)s/%(role)s)"),
    gettext_noop("session %(session)s has no message to answer again"),
    gettext_noop("session %(session)s has a reply in progress: wait for it to end, or cancel it"),
    # A run's own failure (runs.core's runner and agents: the error event's message, whose
    # `type` is the stable code), as the stream's RUN_ERROR carries it.
    gettext_noop("the run could not start: %(reason)s"),
    gettext_noop("a before_run callback stopped the run: %(reason)s"),
    gettext_noop("the model ended its stream without a final response"),
    gettext_noop("the answer did not match the output schema after %(attempts)s attempt(s): %(detail)s"),
    gettext_noop("the agent used all %(steps)s steps without a final answer"),
    gettext_noop("run interrupted"),
    gettext_noop("the run ended as %(status)s"),
    gettext_noop("the run failed"),
)
"""English templates (msgids, `%(name)s` placeholders) of every error text a socket may send."""

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_ERROR_FRAME_PREFIX = '{"type": "error"'
_RUN_ERROR_PREFIX = '{"type":"RUN_ERROR"'  # AG-UI's, as pydantic writes it (runs.surfaces.websocket.frames)


def _pattern(template: str) -> re.Pattern[str]:
    """A regex that matches the English text made from `template` and captures its values
    (a name used twice must hold the same value twice)."""
    parts: list[str] = []
    seen: set[str] = set()
    end = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[end : match.start()]))
        name = match.group(1)
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
        seen.add(name)
        end = match.end()
    parts.append(re.escape(template[end:]))
    return re.compile("".join(parts), re.DOTALL)


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((_pattern(t), t) for t in TEMPLATES)


def translate_text(message: str) -> str:
    """`message`, an English error text, in the active language when it was made from one
    of `TEMPLATES` (the values it names kept as they are); otherwise unchanged."""
    for pattern, template in _patterns():
        found = pattern.fullmatch(message)
        if found is not None:
            return gettext(template) % found.groupdict()
    return message


def core_error_text(exc: BaseException) -> str:
    """The text of a core error in the active language: by its `error_code` and `params`
    when `CORE_TEXTS` has the code, else `translate_text` of its English text."""
    if isinstance(exc, AgentsiteError):
        template = CORE_TEXTS.get(exc.error_code)
        if template is not None and exc.params:
            return gettext(template) % dict(exc.params)
    return translate_text(str(exc))


def translated_error(error: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run record's `error` (`{"type", "message", "code"?}`) with its message in the active
    language (`translate_text`); its type and code unchanged. None stays None."""
    if error is None:
        return None
    message = error.get("message")
    return {**error, "message": translate_text(message)} if isinstance(message, str) else dict(error)


def socket_language(scope: Mapping[str, Any]) -> str:
    """The language a websocket's handshake (ASGI `scope`) asks for: `LocaleMiddleware`'s
    rule (`get_language_from_request`) on its cookie and `Accept-Language` headers."""
    request = HttpRequest()
    for name, value in scope.get("headers") or ():
        header = bytes(name).decode("latin-1").lower()
        if header == "cookie":
            request.COOKIES = parse_cookie(bytes(value).decode("latin-1"))
        elif header == "accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = bytes(value).decode("latin-1")
    return translation.get_language_from_request(request)


def localize_frame_text(text: str, language: str | None) -> str:
    """A frame's JSON `text`, with the `message` of an error frame, or of a run's RUN_ERROR,
    in `language` (`code` and `field` unchanged); any other frame as it is. Cheap for the
    frames that are neither (a prefix test): every frame of a run's stream passes here."""
    if not language or not (text.startswith(_ERROR_FRAME_PREFIX) or text.startswith(_RUN_ERROR_PREFIX)):
        return text
    frame = json.loads(text)
    run_error = frame.get("type") == "RUN_ERROR"
    holder = frame if run_error else frame.get("error")
    if not isinstance(holder, dict) or not isinstance(holder.get("message"), str):
        return text
    with translation.override(language):
        translated = translate_text(holder["message"])
    if translated == holder["message"]:
        return text
    if run_error:
        return json.dumps({**frame, "message": translated}, ensure_ascii=False, separators=(",", ":"))
    return json.dumps({**frame, "error": {**holder, "message": translated}})
