"""Artifact tools for agents (SPEC 7): save, load and list the session's files.

Like the memory tools, these are plain async functions over a structural tool context
(`session`, `services`; `services["artifacts"]` is an `ArtifactService`), bound to the
invocation's app, user and session, wrapped as `FunctionTool`s by
`sessions_app.artifact_backends.artifact_function_tools`.

A successful save describes the new version as `{"filename", "version", "url", "mime",
"size"}`: in the tool's result, and in the context's `extensions["artifact"]` when the
context carries an `extensions` mapping, which the runtime copies onto the tool-result
event (the UI and the AG-UI translator render it).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import quote

from sessions_app.core.artifacts import ArtifactError, ArtifactScope, ArtifactService, ArtifactVersion
from sessions_app.core.memory_tools import ToolScope

ARTIFACT_SERVICE = "artifacts"
"""The key of the artifact service in the runner's services."""

URL_TEMPLATE = "/api/sessions/{session_id}/artifacts/{filename}?version={version}"
LOAD_INLINE_BYTES = 64 * 1024
_TEXT_MIMES = ("application/json", "application/xml", "application/javascript", "application/x-yaml", "image/svg+xml")


class ArtifactsUnavailableError(RuntimeError):
    """The runner was built without an artifact service."""


def _service(context: ToolScope) -> tuple[ArtifactService, ArtifactScope]:
    service = context.services.get(ARTIFACT_SERVICE)
    if service is None:
        raise ArtifactsUnavailableError("artifacts are not configured for this agent")
    session = context.session
    return service, ArtifactScope(app=session.app, user_id=session.user_id, session_id=session.id)


def artifact_url(session_id: str, filename: str, version: int) -> str:
    """Where the API serves this version (`GET /api/sessions/<id>/artifacts/<name>?version=`)."""
    return URL_TEMPLATE.format(
        session_id=quote(session_id, safe=""), filename=quote(filename, safe=""), version=version
    )


def artifact_descriptor(session_id: str, info: ArtifactVersion) -> dict[str, Any]:
    """The `extensions["artifact"]` value of a tool-result event that saved a version."""
    return {
        "filename": info.filename,
        "version": info.version,
        "url": artifact_url(session_id, info.filename, info.version),
        "mime": info.mime,
        "size": info.size,
    }


def _attach(context: ToolScope, descriptor: dict[str, Any]) -> None:
    extensions = getattr(context, "extensions", None)
    if isinstance(extensions, dict):
        extensions["artifact"] = descriptor


def _is_text(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_MIMES or mime.endswith(("+json", "+xml"))


async def artifact_save(
    context: ToolScope,
    filename: str,
    content: str,
    mime: str | None = None,
    encoding: Literal["text", "base64"] = "text",
) -> dict[str, Any]:
    """Save a file in this session (a report, a CSV, a patch, ...); saving the same name again adds a new version.

    Args:
        filename: a plain file name such as "report.md" (no folders); prefix with "user:" to share it across the user's sessions
        content: the file's content: text, or base64 when encoding is "base64"
        mime: the MIME type, e.g. "text/markdown"; guessed from the name when omitted
        encoding: "text" (UTF-8) or "base64" for binary content
    """
    service, scope = _service(context)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ArtifactError("content is not valid base64") from None
    else:
        data = content.encode("utf-8")
    info = await service.save(scope, filename, data, mime=mime)
    descriptor = artifact_descriptor(scope.session_id, info)
    _attach(context, descriptor)
    return {**descriptor, "sha256": info.sha256, "saved": True}


async def artifact_load(context: ToolScope, filename: str, version: int | None = None) -> dict[str, Any]:
    """Read a file saved in this session (or a "user:" file), the latest version unless one is given.

    Args:
        filename: the file's name, as artifact_list shows it
        version: a version number (0 is the first); the latest when omitted
    """
    service, scope = _service(context)
    artifact = await service.load(scope, filename, version=version)
    if artifact is None:
        wanted = f" version {version}" if version is not None else ""
        return {"filename": filename, "found": False, "error": f"no artifact {filename!r}{wanted}"}
    info = artifact.info
    result: dict[str, Any] = {**artifact_descriptor(scope.session_id, info), "sha256": info.sha256, "found": True}
    head = artifact.data[:LOAD_INLINE_BYTES]
    result["truncated"] = len(artifact.data) > LOAD_INLINE_BYTES
    if _is_text(info.mime):
        result["content"] = head.decode("utf-8", errors="replace")
    else:
        result["content_base64"] = base64.b64encode(head).decode("ascii")
    return result


async def artifact_list(context: ToolScope) -> dict[str, Any]:
    """List the files saved in this session and the user's shared ("user:") files, with their versions."""
    service, scope = _service(context)
    listed = []
    for name in await service.list_names(scope):
        versions = await service.versions(scope, name)
        if versions:
            latest = versions[-1]
            listed.append(
                {
                    "filename": name,
                    "versions": [v.version for v in versions],
                    "latest": artifact_descriptor(scope.session_id, latest),
                }
            )
    return {"count": len(listed), "artifacts": listed}


def artifact_tool_functions() -> list[Callable[..., Any]]:
    return [artifact_save, artifact_load, artifact_list]
