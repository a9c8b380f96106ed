"""Images and files in messages (issue 20, item 3).

Every surface turns what a client sent into `ContentPart`s with this module, before
anything is stored: `decode_data_url` and `upload_part` check each part (the type sniffed
from the bytes against `ALLOWED_TYPES`, never the client's word; the size limit) and
`check_count` the number per message. A refused part raises `AttachmentError` with the
HTTP status the surfaces answer (400 bad data, 413 too large or too many, 415 a type
outside the allow list), so a refused request stores nothing.

The parts of an accepted message hold their bytes in memory until the Runner stores them
as artifacts of the run's session (`store_attachments`), just before the user message
enters the ledger; the event then references the artifact (name and version) and never
inlines the bytes. For a model request, `load_attachments` reads the bytes back and
`openai_content` renders a message as OpenAI content parts: `image_url` with a data URL
(or the URL the client gave), text files as text, other files as `file` parts. The user
message gets SPEC 4.3.6's "Attached files" note (`attached_files_note`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote_to_bytes

from runs.core.errors import UsageError
from runs.core.invocation import Invocation
from runs.core.llm.base import ModelRequest
from sessions_app.core.artifact_tools import ARTIFACT_SERVICE
from sessions_app.core.artifacts import (
    USER_PREFIX,
    ArtifactScope,
    ArtifactService,
    InvalidArtifactNameError,
    validate_filename,
)
from sessions_app.core.events import ArtifactRef, ContentPart, Message

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TEXT_TYPES = ("text/plain", "text/csv", "application/json")
ALLOWED_TYPES = (*IMAGE_TYPES, "application/pdf", *TEXT_TYPES)
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_COUNT = 10
# SPEC 4.3.6: the note names at most 20 attachments.
NOTE_MAX_NAMES = 20
# A text file is sent to the model as text up to this many characters (about the fixed
# FILE_TOKEN_ESTIMATE), the rest cut with a marker: the budget counts a fixed estimate.
TEXT_FILE_MAX_CHARS = 4096
_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/csv": "csv",
    "application/json": "json",
}
_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,(?P<data>.*)$", re.S
)


class AttachmentError(ValueError):
    """A part a surface must refuse: `status` is 400, 413 or 415; `field` names the part."""

    def __init__(self, status: Literal[400, 413, 415], code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True, kw_only=True)
class AttachmentLimits:
    """How large one attachment may be, and how many one message may carry."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_count: int = DEFAULT_MAX_COUNT


def sniff(data: bytes, *, declared: str = "", name: str = "") -> str | None:
    """The allowed type the bytes are, or None. Binary types are told by their magic
    numbers; text (UTF-8 without control characters) is JSON when it parses as JSON and
    the client said JSON, CSV when it said CSV, else plain text."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\n\r\f" for c in text):
        return None
    said = (declared or "").split(";")[0].strip().lower()
    lower = name.lower()
    if said == "application/json" or lower.endswith(".json"):
        try:
            json.loads(text)
        except ValueError:
            return "text/plain"
        return "application/json"
    if said == "text/csv" or lower.endswith(".csv"):
        return "text/csv"
    return "text/plain"


def decode_data_url(url: str, *, field: str) -> tuple[str, bytes]:
    """The declared type and the bytes of a `data:` URL; 400 when it does not decode."""
    match = _DATA_URL.match(url)
    if match is None:
        raise AttachmentError(400, "invalid_data_url", f"{field} is not a valid data URL", field=field)
    raw = match.group("data")
    if match.group("b64"):
        data = decode_base64(raw, field=field)
    else:
        data = unquote_to_bytes(raw)
    return (match.group("mime") or "text/plain"), data


def decode_base64(text: str, *, field: str) -> bytes:
    """Strict base64 (blanks allowed); 400 naming `field` when it does not decode."""
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentError(400, "invalid_base64", f"{field} is not valid base64", field=field) from None


def upload_part(
    data: bytes,
    *,
    limits: AttachmentLimits,
    field: str,
    name: str = "",
    declared: str = "",
    kind: Literal["image", "file"] | None = None,
    detail: str | None = None,
) -> ContentPart:
    """A checked upload (bytes held in memory until the Runner stores them).

    `kind` "image" requires an image type; None lets the sniffed type decide.
    """
    if len(data) > limits.max_bytes:
        raise AttachmentError(
            413,
            "attachment_too_large",
            f"{field} is {len(data)} bytes, more than the limit of {limits.max_bytes} bytes",
            field=field,
        )
    if not data:
        raise AttachmentError(400, "empty_attachment", f"{field} is empty", field=field)
    mime = sniff(data, declared=declared, name=name)
    if mime is None or (kind == "image" and mime not in IMAGE_TYPES):
        allowed = IMAGE_TYPES if kind == "image" else ALLOWED_TYPES
        found = "not one of them" if mime is None else mime
        raise AttachmentError(
            415,
            "unsupported_media_type",
            f"{field}: the bytes are {found}; allowed types: {', '.join(allowed)}",
            field=field,
        )
    part_type: Literal["image", "file"] = "image" if mime in IMAGE_TYPES else "file"
    return ContentPart(
        type=part_type, name=display_name(name), mime=mime, size=len(data), detail=_detail(detail), data=data
    )


def display_name(name: str) -> str:
    """A client's file name as the ledger keeps it: control and format characters and lone
    surrogates dropped (no database text column takes a NUL), blanks trimmed, at most 200
    characters. It is a label: the artifact's name is made apart (`artifact_name`)."""
    kept = "".join(c for c in name if unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp"))
    return kept.strip()[:200]


def _detail(detail: str | None) -> str | None:
    """OpenAI's image `detail`, kept only when it is one of its values."""
    return detail if detail in ("auto", "low", "high") else None


def url_image_part(url: str, *, field: str, detail: str | None = None) -> ContentPart:
    """An image the client gave by http(s) URL: passed to the model as it is, not fetched."""
    if not re.match(r"^https?://[\x21-\x7e]+$", url) or len(url) > 2048:
        # Printable ASCII only (a client percent-encodes the rest): nothing the ledger cannot store.
        raise AttachmentError(
            400,
            "invalid_image_url",
            f"{field} must be an http(s) URL (printable ASCII, at most 2048 characters) or a data URL",
            field=field,
        )
    return ContentPart(type="image", name=url.rsplit("/", 1)[-1][:100] or "image", url=url, detail=_detail(detail))


def check_count(parts: Sequence[object], *, limits: AttachmentLimits, field: str) -> None:
    if len(parts) > limits.max_count:
        raise AttachmentError(
            413,
            "too_many_attachments",
            f"{field} has {len(parts)} attachments; the limit is {limits.max_count}",
            field=field,
        )


def artifact_name(part: ContentPart, index: int) -> str:
    """The session artifact name an upload is stored under: the client's file name when it
    is a safe one (never user-scoped), else `attachment-<n>.<ext>`; a short random prefix
    keeps two uploads of `image.png` apart in the list (versions still count per name)."""
    prefix = uuid.uuid4().hex[:8]
    name = part.name
    if name and not name.startswith(USER_PREFIX):
        try:
            return validate_filename(f"{prefix}-{name}"[:200])
        except InvalidArtifactNameError:
            pass
    return f"{prefix}-attachment-{index + 1}.{_EXTENSIONS.get(part.mime, 'bin')}"


async def store_attachments(message: Message, *, artifacts: ArtifactService, scope: ArtifactScope) -> Message:
    """`message` with each in-memory upload saved as an artifact of `scope`'s session and
    referenced by name and version (its bytes dropped from the message)."""
    if not any(p.data is not None and p.artifact is None for p in message.parts):
        return message
    stored: list[ContentPart] = []
    for index, part in enumerate(message.parts):
        if part.data is None or part.artifact is not None:
            stored.append(part)
            continue
        filename = artifact_name(part, index)
        info = await artifacts.save(scope, filename, part.data, mime=part.mime)
        stored.append(
            dataclasses.replace(
                part,
                name=part.name or filename,
                artifact=ArtifactRef(filename=info.filename, version=info.version),
                size=info.size,
                data=None,
            )
        )
    return dataclasses.replace(message, parts=tuple(stored))


async def load_attachments(
    messages: Sequence[Message], *, artifacts: ArtifactService | None, scope: ArtifactScope | None
) -> tuple[Message, ...]:
    """The messages with the bytes of each artifact part loaded (for the model request);
    a part whose artifact is gone stays without bytes (`openai_content` says so)."""
    out: list[Message] = []
    for message in messages:
        if artifacts is None or scope is None or not any(p.artifact and p.data is None for p in message.parts):
            out.append(message)
            continue
        parts: list[ContentPart] = []
        for part in message.parts:
            if part.artifact is not None and part.data is None:
                loaded = await artifacts.load(scope, part.artifact.filename, version=part.artifact.version)
                part = dataclasses.replace(part, data=loaded.data) if loaded is not None else part
            parts.append(part)
        out.append(dataclasses.replace(message, parts=tuple(parts)))
    return tuple(out)


def describe_part(part: ContentPart) -> str:
    """`name (type, size)`, as the note and the offline model show an attachment."""
    size = f", {_human_size(part.size)}" if part.size else ""
    return f"{part.name or 'unnamed'} ({part.mime or 'image by URL'}{size})"


def _human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def attached_files_note(parts: Sequence[ContentPart]) -> str | None:
    """SPEC 4.3.6: the text part that names a user message's attachments (at most 20)."""
    attached = [p for p in parts if p.type != "text"]
    if not attached:
        return None
    names = [describe_part(p) for p in attached[:NOTE_MAX_NAMES]]
    more = len(attached) - len(names)
    tail = f"; and {more} more" if more > 0 else ""
    return "Attached files: " + "; ".join(names) + tail


def with_attached_note(message: Message) -> Message:
    """A user message with attachments gets the "Attached files" note as a text part
    (once: a message that has one keeps it)."""
    if message.role != "user" or not message.attachments or any(p.type == "text" for p in message.parts):
        return message
    note = attached_files_note(message.parts)
    return dataclasses.replace(message, parts=(*message.parts, ContentPart(type="text", text=note or "")))


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def openai_content(message: Message) -> str | list[dict[str, Any]]:
    """The OpenAI `content` of a message: its text alone when it has no parts, else a
    list of parts (text, then each attachment, then the note)."""
    if not message.parts:
        return message.content
    content: list[dict[str, Any]] = []
    if message.content:
        content.append({"type": "text", "text": message.content})
    for part in message.parts:
        content.append(_openai_part(part))
    return content


def _openai_part(part: ContentPart) -> dict[str, Any]:
    if part.type == "text":
        return {"type": "text", "text": part.text}
    if part.type == "image" and (part.url or part.data is not None):
        image: dict[str, Any] = {"url": part.url or _data_url(part.mime, part.data or b"")}
        if part.detail:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if part.data is None:
        return {"type": "text", "text": f"[attachment {describe_part(part)} is no longer available]"}
    if part.mime in TEXT_TYPES:
        text = part.data.decode("utf-8", errors="replace")
        if len(text) > TEXT_FILE_MAX_CHARS:
            text = text[:TEXT_FILE_MAX_CHARS] + f"\n[... {len(text) - TEXT_FILE_MAX_CHARS} characters truncated ...]"
        return {"type": "text", "text": f"File {part.name} ({part.mime}):\n{text}"}
    return {"type": "file", "file": {"filename": part.name or "file", "file_data": _data_url(part.mime, part.data)}}


async def store_turn_attachments(
    turn: Sequence[Message], *, services: Mapping[str, Any], app: str, user_id: str, session_id: str
) -> list[Message]:
    """The Runner's step before the user turn enters the ledger: each message's uploads
    stored as artifacts of the session (`store_attachments`)."""
    if not any(p.data is not None and p.artifact is None for m in turn for p in m.parts):
        return list(turn)
    artifacts = services.get(ARTIFACT_SERVICE)
    if artifacts is None:
        raise UsageError("this runner has no artifact service: messages with attachments cannot be stored")
    scope = ArtifactScope(app=app, user_id=user_id, session_id=session_id)
    return [await store_attachments(m, artifacts=artifacts, scope=scope) for m in turn]


async def with_attachment_bytes(request: ModelRequest, invocation: Invocation) -> ModelRequest:
    """The request with its attachments' bytes loaded from the invocation's session, for
    a provider to send (`openai_content`); the request itself if it has none."""
    if not any(p.artifact is not None and p.data is None for m in request.messages for p in m.parts):
        return request
    session = invocation.session
    scope = ArtifactScope(app=invocation.app, user_id=session.user_id, session_id=session.id)
    messages = await load_attachments(
        request.messages, artifacts=invocation.services.get(ARTIFACT_SERVICE), scope=scope
    )
    return dataclasses.replace(request, messages=messages)
