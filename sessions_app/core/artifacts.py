"""Versioned artifacts (SPEC 7): named files an agent or a user saves in a session.

A filename starting with `user:` is user-scoped (shared by all the user's sessions);
any other name belongs to one session. Each save of a name adds a version: 0, 1, 2, ...
per (scope, name); two concurrent saves of one name get two different versions. Each
version records its MIME type (guessed from the name when not given), size and sha256.

Filenames are validated (`validate_filename`): no path separators, no `.` / `..`, no
control characters, no surrounding blanks, at most 255 bytes. Data over the service's
`max_bytes` is refused with `ArtifactTooLargeError` before anything is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from sessions_app.core.events import utcnow

USER_PREFIX = "user:"
DEFAULT_MIME = "application/octet-stream"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
MAX_FILENAME_BYTES = 255


class ArtifactError(ValueError):
    """Base of the artifact errors a caller can act on."""


class InvalidArtifactNameError(ArtifactError):
    """A filename that could escape its scope or cannot be stored."""


class ArtifactTooLargeError(ArtifactError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"artifact is {size} bytes, more than the limit of {limit} bytes")
        self.size = size
        self.limit = limit


@dataclass(frozen=True, kw_only=True)
class ArtifactScope:
    """Whose artifacts: the session they were saved in (user-scoped names ignore the session)."""

    app: str
    user_id: str
    session_id: str

    def __post_init__(self) -> None:
        for name in ("app", "user_id", "session_id"):
            if not getattr(self, name):
                raise ValueError(f"ArtifactScope.{name} is required")

    def storage_scope(self, filename: str) -> str:
        """`user` for user-scoped names, else `session:<id>`."""
        return "user" if filename.startswith(USER_PREFIX) else f"session:{self.session_id}"

    def base_path(self, filename: str) -> str:
        """SPEC 7's layout: `{app}/{user}/{session or "user"}/{name}` (the `user:` prefix dropped)."""
        if filename.startswith(USER_PREFIX):
            return f"{self.app}/{self.user_id}/user/{filename[len(USER_PREFIX) :]}"
        return f"{self.app}/{self.user_id}/{self.session_id}/{filename}"


@dataclass(frozen=True, kw_only=True)
class ArtifactVersion:
    """What is known about one stored version, without its bytes."""

    filename: str
    version: int
    mime: str
    size: int
    sha256: str
    created_at: datetime = field(default_factory=utcnow)

    @property
    def scope(self) -> Literal["user", "session"]:
        return "user" if self.filename.startswith(USER_PREFIX) else "session"


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One version with its bytes."""

    info: ArtifactVersion
    data: bytes

    @property
    def filename(self) -> str:
        return self.info.filename

    @property
    def version(self) -> int:
        return self.info.version

    @property
    def mime(self) -> str:
        return self.info.mime


def validate_filename(filename: str) -> str:
    """The filename, if it is safe to store; raises `InvalidArtifactNameError`."""
    if not isinstance(filename, str) or not filename:
        raise InvalidArtifactNameError("a filename is required")
    name = filename[len(USER_PREFIX) :] if filename.startswith(USER_PREFIX) else filename
    if not name:
        raise InvalidArtifactNameError(f"filename {filename!r} has nothing after {USER_PREFIX!r}")
    if name != name.strip():
        raise InvalidArtifactNameError(f"filename {filename!r} starts or ends with blanks")
    if name in (".", ".."):
        raise InvalidArtifactNameError(f"filename {filename!r} is not a file name")
    for char in name:
        if char in "/\\":
            raise InvalidArtifactNameError(f"filename {filename!r} contains a path separator")
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise InvalidArtifactNameError(f"filename {filename!r} contains a control character")
    if len(filename.encode("utf-8")) > MAX_FILENAME_BYTES:
        raise InvalidArtifactNameError(f"filename is longer than {MAX_FILENAME_BYTES} bytes")
    return filename


def guess_mime(filename: str, mime: str | None = None) -> str:
    if mime and mime.strip():
        return mime.strip()
    guessed, _ = mimetypes.guess_type(filename.removeprefix(USER_PREFIX), strict=False)
    return guessed or DEFAULT_MIME


def describe(filename: str, version: int, data: bytes, mime: str | None) -> ArtifactVersion:
    return ArtifactVersion(
        filename=filename,
        version=version,
        mime=guess_mime(filename, mime),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def check_size(data: bytes, limit: int) -> None:
    if len(data) > limit:
        raise ArtifactTooLargeError(len(data), limit)


@runtime_checkable
class ArtifactService(Protocol):
    """Versioned files of a session and its user (SPEC 7)."""

    max_bytes: int

    async def save(
        self, scope: ArtifactScope, filename: str, data: bytes, *, mime: str | None = None
    ) -> ArtifactVersion:
        """Store a new version (0 for a new name); raises `InvalidArtifactNameError`,
        `ArtifactTooLargeError`."""
        ...

    async def load(self, scope: ArtifactScope, filename: str, *, version: int | None = None) -> Artifact | None:
        """The latest version, or the given one; None when there is no such artifact or version."""
        ...

    async def list_names(self, scope: ArtifactScope) -> list[str]:
        """Sorted names of the session's artifacts and the user's (`user:`-prefixed) ones."""
        ...

    async def list_versions(self, scope: ArtifactScope, filename: str) -> list[int]:
        """The versions of a name, ascending ([] when none)."""
        ...

    async def versions(self, scope: ArtifactScope, filename: str) -> list[ArtifactVersion]:
        """Every version of a name with its metadata, ascending."""
        ...

    async def delete(self, scope: ArtifactScope, filename: str) -> bool:
        """Remove every version of a name; False when there was none."""
        ...


class InMemoryArtifactService:
    """Artifacts in process memory. For tests and single-process use."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._files: dict[tuple[str, str, str, str], list[Artifact]] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _slot(scope: ArtifactScope, filename: str) -> tuple[str, str, str, str]:
        return (scope.app, scope.user_id, scope.storage_scope(filename), filename)

    async def save(
        self, scope: ArtifactScope, filename: str, data: bytes, *, mime: str | None = None
    ) -> ArtifactVersion:
        validate_filename(filename)
        check_size(data, self.max_bytes)
        async with self._lock:
            stored = self._files.setdefault(self._slot(scope, filename), [])
            info = describe(filename, stored[-1].version + 1 if stored else 0, data, mime)
            stored.append(Artifact(info=info, data=bytes(data)))
            return info

    async def load(self, scope: ArtifactScope, filename: str, *, version: int | None = None) -> Artifact | None:
        validate_filename(filename)
        stored = self._files.get(self._slot(scope, filename), [])
        if version is None:
            return stored[-1] if stored else None
        return next((a for a in stored if a.version == version), None)

    async def list_names(self, scope: ArtifactScope) -> list[str]:
        session_scope = f"session:{scope.session_id}"
        return sorted(
            name
            for (app, user, where, name), stored in self._files.items()
            if stored and app == scope.app and user == scope.user_id and where in (session_scope, "user")
        )

    async def list_versions(self, scope: ArtifactScope, filename: str) -> list[int]:
        return [info.version for info in await self.versions(scope, filename)]

    async def versions(self, scope: ArtifactScope, filename: str) -> list[ArtifactVersion]:
        validate_filename(filename)
        return [a.info for a in self._files.get(self._slot(scope, filename), [])]

    async def delete(self, scope: ArtifactScope, filename: str) -> bool:
        validate_filename(filename)
        async with self._lock:
            return bool(self._files.pop(self._slot(scope, filename), None))
