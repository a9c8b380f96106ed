"""Artifacts on Django: version rows in the database, bytes on `storages["artifacts"]`
(any django-storages backend: the file system by default, S3 and friends in production).

Saving uploads the bytes first, under a key no other save can use
(`{app}/{user}/{session|user}/{name}/{random}`), and only then claims the next version
with an insert that the unique (app, user, scope, name, version) constraint guards; a save
that loses the race to a concurrent one retries with the next number. So two concurrent
saves of one name never collide and never overwrite each other's bytes, and a version
row always points at bytes that exist. (SPEC 7 keys objects by version; we key them by a
random suffix because the version is only known once the claim succeeds.) Deleting
removes the rows, then the files once the transaction has committed.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet

from runs.core.tools.function import FunctionTool
from sessions_app import models as orm
from sessions_app.artifact_files import artifacts_delete, remove_files
from sessions_app.backends import db_call
from sessions_app.core.artifact_tools import artifact_tool_functions
from sessions_app.core.artifacts import (
    Artifact,
    ArtifactScope,
    ArtifactVersion,
    check_size,
    describe,
    validate_filename,
)
from sessions_app.core.session import SessionNotFoundError
from sessions_app.memory_backends import bind_context_tool

SAVE_ATTEMPTS = 50


def info_from_row(row: orm.Artifact) -> ArtifactVersion:
    return ArtifactVersion(
        filename=row.filename,
        version=row.version,
        mime=row.mime,
        size=row.size,
        sha256=row.sha256,
        created_at=row.created_at,
    )


class DjangoArtifactService:
    """ArtifactService with version rows in the database and bytes on a Django storage.

    The `*_sync` methods do the work in the calling thread (for request handlers); the
    async methods run them in a database worker thread.
    """

    def __init__(self, *, storage: Storage | None = None, max_bytes: int | None = None) -> None:
        self._storage = storage
        self.max_bytes = max_bytes if max_bytes is not None else settings.AGENTSITE_ARTIFACT_MAX_BYTES

    @property
    def storage(self) -> Storage:
        return self._storage if self._storage is not None else storages["artifacts"]

    # -- rows

    @staticmethod
    def _rows(scope: ArtifactScope, filename: str) -> QuerySet[orm.Artifact]:
        return orm.Artifact.objects.filter(
            app=scope.app, user_id=int(scope.user_id), scope=scope.storage_scope(filename), filename=filename
        )

    @staticmethod
    def _check_session(scope: ArtifactScope) -> None:
        if not orm.Session.objects.filter(id=scope.session_id, app=scope.app, user_id=int(scope.user_id)).exists():
            raise SessionNotFoundError(f"session {scope.session_id!r} not found")

    # -- synchronous operations

    def save_sync(
        self, scope: ArtifactScope, filename: str, data: bytes, *, mime: str | None = None
    ) -> ArtifactVersion:
        validate_filename(filename)
        check_size(data, self.max_bytes)
        self._check_session(scope)
        draft = describe(filename, 0, data, mime)
        key = self.storage.save(f"{scope.base_path(filename)}/{uuid.uuid4().hex}", ContentFile(data))
        try:
            return self._claim_version(scope, filename, draft, key)
        except BaseException:
            remove_files(self.storage, [key])
            raise

    def _claim_version(self, scope: ArtifactScope, filename: str, draft: ArtifactVersion, key: str) -> ArtifactVersion:
        session_id = None if scope.storage_scope(filename) == "user" else scope.session_id
        for attempt in range(SAVE_ATTEMPTS):
            try:
                with transaction.atomic():
                    latest = self._rows(scope, filename).aggregate(latest=Max("version"))["latest"]
                    row = orm.Artifact.objects.create(
                        app=scope.app,
                        user_id=int(scope.user_id),
                        scope=scope.storage_scope(filename),
                        session_id=session_id,
                        filename=filename,
                        version=0 if latest is None else latest + 1,
                        storage_key=key,
                        mime=draft.mime,
                        size=draft.size,
                        sha256=draft.sha256,
                        created_at=draft.created_at,
                    )
                return info_from_row(row)
            except IntegrityError:
                # Another save took this version: try the next one, after a short jittered pause.
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise RuntimeError(f"could not claim a version of {filename!r} after {SAVE_ATTEMPTS} attempts")

    def _row(self, scope: ArtifactScope, filename: str, version: int | None) -> orm.Artifact | None:
        validate_filename(filename)
        rows = self._rows(scope, filename)
        if version is None:
            return rows.order_by("-version").first()
        return rows.filter(version=version).first()

    def open_sync(
        self, scope: ArtifactScope, filename: str, *, version: int | None = None
    ) -> tuple[ArtifactVersion, IO[bytes]] | None:
        """The version's metadata and an open binary file to stream, or None."""
        row = self._row(scope, filename, version)
        if row is None:
            return None
        return info_from_row(row), self.storage.open(row.storage_key, "rb")

    def load_sync(self, scope: ArtifactScope, filename: str, *, version: int | None = None) -> Artifact | None:
        opened = self.open_sync(scope, filename, version=version)
        if opened is None:
            return None
        info, handle = opened
        with handle:
            return Artifact(info=info, data=handle.read())

    def list_names_sync(self, scope: ArtifactScope) -> list[str]:
        names = (
            orm.Artifact.objects.filter(
                app=scope.app, user_id=int(scope.user_id), scope__in=[f"session:{scope.session_id}", "user"]
            )
            .values_list("filename", flat=True)
            .distinct()
        )
        return sorted(set(names))

    def versions_sync(self, scope: ArtifactScope, filename: str) -> list[ArtifactVersion]:
        validate_filename(filename)
        return [info_from_row(r) for r in self._rows(scope, filename).order_by("version")]

    def delete_sync(self, scope: ArtifactScope, filename: str) -> bool:
        validate_filename(filename)
        with transaction.atomic():
            return artifacts_delete(rows=self._rows(scope, filename), storage=self.storage) > 0

    # -- the async contract

    async def _call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await db_call(func)(*args, **kwargs)

    async def save(
        self, scope: ArtifactScope, filename: str, data: bytes, *, mime: str | None = None
    ) -> ArtifactVersion:
        return await self._call(self.save_sync, scope, filename, data, mime=mime)

    async def load(self, scope: ArtifactScope, filename: str, *, version: int | None = None) -> Artifact | None:
        return await self._call(self.load_sync, scope, filename, version=version)

    async def list_names(self, scope: ArtifactScope) -> list[str]:
        return await self._call(self.list_names_sync, scope)

    async def list_versions(self, scope: ArtifactScope, filename: str) -> list[int]:
        return [info.version for info in await self.versions(scope, filename)]

    async def versions(self, scope: ArtifactScope, filename: str) -> list[ArtifactVersion]:
        return await self._call(self.versions_sync, scope, filename)

    async def delete(self, scope: ArtifactScope, filename: str) -> bool:
        return await self._call(self.delete_sync, scope, filename)


def artifact_function_tools() -> list[FunctionTool]:
    """`artifact_save`, `artifact_load` and `artifact_list` as `FunctionTool`s."""
    return [bind_context_tool(f) for f in artifact_tool_functions()]
