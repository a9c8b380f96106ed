"""Images and files as each surface receives them, checked before anything is stored
(issue 20, item 3): OpenAI content arrays (/v1, and the same shapes on REST), REST's
base64 parts, AG-UI's binary input content and A2A's file parts all become
`ContentPart`s through `runs.core.attachments`, within the limits of the settings
`AGENTSITE_UPLOAD_MAX_BYTES` (per attachment) and `AGENTSITE_UPLOAD_MAX_COUNT` (per message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from runs.core.attachments import (
    ALLOWED_TYPES,
    IMAGE_TYPES,
    AttachmentError,
    AttachmentLimits,
    check_count,
    decode_base64,
    decode_data_url,
    display_name,
    upload_part,
    url_image_part,
)
from sessions_app.core.artifacts import ArtifactVersion
from sessions_app.core.events import ArtifactRef, ContentPart

OPENAI_PART_TYPES = ("text", "image_url", "file")

ArtifactLookup = Callable[[str, "int | None"], "ArtifactVersion | None"]
"""(name, version or None for the latest) -> that stored version of the session, or None."""


def attachment_limits() -> AttachmentLimits:
    return AttachmentLimits(
        max_bytes=settings.AGENTSITE_UPLOAD_MAX_BYTES, max_count=settings.AGENTSITE_UPLOAD_MAX_COUNT
    )


def image_from_url(url: Any, *, field: str, detail: str | None = None, limits: AttachmentLimits) -> ContentPart:
    """An image given as a `data:` URL (decoded, checked, to be stored) or an http(s) URL."""
    if not isinstance(url, str) or not url:
        raise AttachmentError(400, "invalid_image_url", f"{field} must be a non-empty string", field=field)
    if url.startswith("data:"):
        declared, data = decode_data_url(url, field=field)
        return upload_part(
            data,
            limits=limits,
            field=field,
            declared=declared,
            kind="image",
            detail=detail,
            name=f"image.{declared.rsplit('/', 1)[-1]}" if declared.startswith("image/") else "image",
        )
    return url_image_part(url, field=field, detail=detail)


def file_from_data(
    data: Any, *, field: str, name: Any = "", declared: Any = "", limits: AttachmentLimits
) -> ContentPart:
    """A file given as base64 text or a `data:` URL."""
    if not isinstance(data, str) or not data:
        raise AttachmentError(400, "invalid_file_data", f"{field} must be base64 text or a data URL", field=field)
    if data.startswith("data:"):
        said, raw = decode_data_url(data, field=field)
        declared = declared or said
    else:
        raw = decode_base64(data, field=field)
    return upload_part(
        raw,
        limits=limits,
        field=field,
        name=name if isinstance(name, str) else "",
        declared=declared if isinstance(declared, str) else "",
    )


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
            raise AttachmentError(
                400, "unsupported_content", f"{at}: only a user message may carry images and files", field=at
            )
        if kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) and isinstance(image.get("detail"), str) else None
            parts.append(image_from_url(url, field=f"{at}.image_url.url", detail=detail, limits=limits))
        else:
            file = part.get("file")
            if not isinstance(file, dict) or "file_data" not in file:
                # A `file_id` names a file uploaded to OpenAI's Files API, which this server does not have.
                raise AttachmentError(
                    400,
                    "unsupported_content",
                    f"{at}.file must carry file_data (base64 or a data URL); file_id is not supported",
                    field=f"{at}.file",
                )
            parts.append(
                file_from_data(
                    file.get("file_data"), field=f"{at}.file.file_data", name=file.get("filename") or "", limits=limits
                )
            )
    check_count(parts, limits=limits, field=field)
    return tuple(parts)


def rest_parts(items: Any, *, field: str, lookup: ArtifactLookup | None) -> tuple[ContentPart, ...]:
    """REST's `attachments`: each `{"type": "image"|"file", "data": <base64 or data URL>,
    "name"?, "mime"?}`, an image `{"type": "image", "url": "https://..."}`, or a file already
    stored in the session `{"type": "file", "artifact": <name>, "version"?}` (`lookup`
    finds it; None when the request names no session)."""
    if not isinstance(items, list):
        raise AttachmentError(400, "invalid", f"{field} must be an array", field=field)
    limits = attachment_limits()
    check_count(items, limits=limits, field=field)
    parts: list[ContentPart] = []
    for number, item in enumerate(items):
        at = f"{field}[{number}]"
        if not isinstance(item, dict) or item.get("type") not in ("image", "file"):
            raise AttachmentError(
                400, "invalid", f"{at} must be an object with type 'image' or 'file'", field=f"{at}.type"
            )
        kind = item["type"]
        name, declared = item.get("name") or "", item.get("mime") or ""
        if "artifact" in item:
            parts.append(_stored_artifact(item, at=at, lookup=lookup))
        elif "url" in item and kind == "image":
            parts.append(image_from_url(item["url"], field=f"{at}.url", limits=limits))
        elif "data" in item:
            part = file_from_data(item["data"], field=f"{at}.data", name=name, declared=declared, limits=limits)
            if kind == "image" and part.type != "image":
                raise AttachmentError(
                    415,
                    "unsupported_media_type",
                    f"{at}.data: the bytes are {part.mime}, not an image",
                    field=f"{at}.data",
                )
            parts.append(part)
        else:
            raise AttachmentError(
                400, "invalid", f"{at} needs data (base64), url (an image) or artifact (a stored file's name)", field=at
            )
    return tuple(parts)


def _stored_artifact(item: dict[str, Any], *, at: str, lookup: ArtifactLookup | None) -> ContentPart:
    name, version = item.get("artifact"), item.get("version")
    if not isinstance(name, str) or not name:
        raise AttachmentError(400, "invalid", f"{at}.artifact must be an artifact's name", field=f"{at}.artifact")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise AttachmentError(400, "invalid", f"{at}.version must be a non-negative integer", field=f"{at}.version")
    info = lookup(name, version) if lookup is not None else None
    if info is None:
        raise AttachmentError(
            400,
            "artifact_not_found",
            f"{at}.artifact: no artifact {name!r} in this session"
            + (f" (version {version})" if version is not None else ""),
            field=f"{at}.artifact",
        )
    if info.mime not in ALLOWED_TYPES:
        raise AttachmentError(
            415,
            "unsupported_media_type",
            f"{at}.artifact: {name!r} is {info.mime}; allowed types: {', '.join(ALLOWED_TYPES)}",
            field=f"{at}.artifact",
        )
    return ContentPart(
        type="image" if info.mime in IMAGE_TYPES else "file",
        name=name.removeprefix("user:"),
        mime=info.mime,
        size=info.size,
        artifact=ArtifactRef(filename=info.filename, version=info.version),
    )


def a2a_file_part(
    *, raw: bytes | None, url: str | None, filename: str, media_type: str, field: str, limits: AttachmentLimits
) -> ContentPart:
    """An A2A file part: `raw` bytes, or a `url` (a `data:` URL is decoded; an http(s) URL
    is passed on only for an image, as a URL the model fetches: this server fetches nothing)."""
    if raw is not None:
        return upload_part(raw, limits=limits, field=f"{field}.raw", name=filename, declared=media_type)
    if url and url.startswith("data:"):
        declared, data = decode_data_url(url, field=f"{field}.url")
        return upload_part(data, limits=limits, field=f"{field}.url", name=filename, declared=media_type or declared)
    if url and media_type.startswith("image/"):
        part = url_image_part(url, field=f"{field}.url")
        return (
            part if not display_name(filename) else ContentPart(type="image", name=display_name(filename), url=part.url)
        )
    raise AttachmentError(
        415,
        "unsupported_media_type",
        f"{field}.url: only an image (mediaType image/*) is accepted "
        "by URL; send other files as raw bytes or a data: URL",
        field=f"{field}.url",
    )


def agui_parts(content: Any, *, field: str) -> tuple[ContentPart, ...]:
    """The media parts of an AG-UI user message (`image`, `document`, each with a `data`
    source: base64 and its mimeType, or a `url` source: passed on for an image only); audio,
    video and provider `file` sources are refused (415)."""
    if not isinstance(content, list):
        return ()
    limits = attachment_limits()
    parts: list[ContentPart] = []
    for number, part in enumerate(content):
        at = f"{field}.{number}"
        kind = getattr(part, "type", None)
        if kind == "text":
            continue
        source = getattr(part, "source", None)
        source_type = getattr(source, "type", None)
        if kind not in ("image", "document") or source_type not in ("data", "url"):
            what = f"{kind} content" if kind not in ("image", "document") else f"a {source_type} source"
            raise AttachmentError(
                415,
                "unsupported_media_type",
                f"{at}: {what} is not supported; send images and documents with a data or url source",
                field=at,
            )
        value, declared = str(getattr(source, "value", "")), str(getattr(source, "mime_type", None) or "")
        name = (
            str((getattr(part, "metadata", None) or {}).get("filename", ""))
            if isinstance(getattr(part, "metadata", None), dict)
            else ""
        )
        if source_type == "url":
            if kind == "image" or declared.startswith("image/"):
                parts.append(image_from_url(value, field=f"{at}.source.value", limits=limits))
                continue
            parts.append(
                a2a_file_part(
                    raw=None, url=value, filename=name, media_type=declared, field=f"{at}.source", limits=limits
                )
            )
            continue
        part_found = file_from_data(value, field=f"{at}.source.value", name=name, declared=declared, limits=limits)
        if kind == "image" and part_found.type != "image":
            raise AttachmentError(
                415,
                "unsupported_media_type",
                f"{at}.source.value: the bytes are {part_found.mime}, not an image",
                field=f"{at}.source.value",
            )
        parts.append(part_found)
    check_count(parts, limits=limits, field=field)
    return tuple(parts)
