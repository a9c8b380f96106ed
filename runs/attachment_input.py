"""Images and files as each surface receives them, checked before anything is stored
(issue 20, item 3): OpenAI content arrays (/v1, and the same shapes on REST), REST's
base64 parts, AG-UI's binary input content and A2A's file parts all become
`ContentPart`s through `runs.core.attachments`, within the limits of the settings
`AGENTSITE_UPLOAD_MAX_BYTES` (per attachment) and `AGENTSITE_UPLOAD_MAX_COUNT` (per message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings

from runs.core.attachments import (
    AttachmentError,
    AttachmentLimits,
    check_count,
    decode_base64,
    decode_data_url,
    upload_part,
    url_image_part,
)
from sessions_app.core.events import ContentPart

OPENAI_PART_TYPES = ("text", "image_url", "file")


def attachment_limits() -> AttachmentLimits:
    return AttachmentLimits(max_bytes=settings.AGENTSITE_UPLOAD_MAX_BYTES, max_count=settings.AGENTSITE_UPLOAD_MAX_COUNT)


def image_from_url(url: Any, *, field: str, detail: str | None = None, limits: AttachmentLimits) -> ContentPart:
    """An image given as a `data:` URL (decoded, checked, to be stored) or an http(s) URL."""
    if not isinstance(url, str) or not url:
        raise AttachmentError(400, "invalid_image_url", f"{field} must be a non-empty string", field=field)
    if url.startswith("data:"):
        declared, data = decode_data_url(url, field=field)
        return upload_part(data, limits=limits, field=field, declared=declared, kind="image", detail=detail,
                           name=f"image.{declared.rsplit('/', 1)[-1]}" if declared.startswith("image/") else "image")
    return url_image_part(url, field=field, detail=detail)


def file_from_data(data: Any, *, field: str, name: Any = "", declared: Any = "", limits: AttachmentLimits) -> ContentPart:
    """A file given as base64 text or a `data:` URL."""
    if not isinstance(data, str) or not data:
        raise AttachmentError(400, "invalid_file_data", f"{field} must be base64 text or a data URL", field=field)
    if data.startswith("data:"):
        said, raw = decode_data_url(data, field=field)
        declared = declared or said
    else:
        raw = decode_base64(data, field=field)
    return upload_part(raw, limits=limits, field=field, name=name if isinstance(name, str) else "",
                       declared=declared if isinstance(declared, str) else "")


def openai_parts(content: Any, *, field: str, role: str) -> tuple[ContentPart, ...]:
    """The images and files of an OpenAI `content` array (`image_url`, `file` with
    `file_data`); only a user message may carry them. Text parts are the caller's."""
    if not isinstance(content, list):
        return ()
    limits = attachment_limits()
    parts: list[ContentPart] = []
    for number, part in enumerate(content):
        at = f"{field}[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("image_url", "file"):
            continue
        if role != "user":
            raise AttachmentError(400, "unsupported_content", f"{at}: only a user message may carry images and files",
                                  field=at)
        if kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) and isinstance(image.get("detail"), str) else None
            parts.append(image_from_url(url, field=f"{at}.image_url.url", detail=detail, limits=limits))
        else:
            file = part.get("file")
            if not isinstance(file, dict) or "file_data" not in file:
                # A `file_id` names a file uploaded to OpenAI's Files API, which this server does not have.
                raise AttachmentError(400, "unsupported_content", f"{at}.file must carry file_data (base64 or a data "
                                      "URL); file_id is not supported", field=f"{at}.file")
            parts.append(file_from_data(file.get("file_data"), field=f"{at}.file.file_data",
                                        name=file.get("filename") or "", limits=limits))
    check_count(parts, limits=limits, field=field)
    return tuple(parts)


def check_parts(parts: Sequence[ContentPart], *, field: str) -> None:
    check_count(parts, limits=attachment_limits(), field=field)
