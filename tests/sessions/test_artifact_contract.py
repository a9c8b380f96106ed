"""The ArtifactService contract, on memory, on Django with FileSystemStorage, and on Django
with django-storages' S3 backend against a local S3-compatible server (moto, on loopback)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions_app.core.artifacts import (
    ArtifactScope,
    ArtifactService,
    ArtifactTooLargeError,
    InMemoryArtifactService,
    InvalidArtifactNameError,
)

APP = "contract"
LIMIT = 64 * 1024

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (an ephemeral port), for this module's tests."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def s3_storage(endpoint: str) -> Any:
    import boto3
    from storages.backends.s3 import S3Storage

    bucket = f"artifacts-{uuid.uuid4().hex[:12]}"
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **credentials).create_bucket(Bucket=bucket)
    return S3Storage(
        bucket_name=bucket,
        endpoint_url=endpoint,
        access_key="testing",
        secret_key="testing",
        region_name="us-east-1",
        addressing_style="path",
        file_overwrite=False,
    )


class Backend:
    def __init__(
        self, service: ArtifactService, users: dict[str, str], sessions: dict[str, str], storage: Any = None
    ) -> None:
        self.service = service
        self.users = users
        self.sessions = sessions
        self.storage = storage

    def scope(self, user: str, session: str | None = None) -> ArtifactScope:
        return ArtifactScope(app=APP, user_id=self.users[user], session_id=self.sessions[session or user])


@pytest.fixture(params=["memory", "django-fs", "django-s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    sessions = {"alice": "s-alice", "alice2": "s-alice-2", "bob": "s-bob"}
    if request.param == "memory":
        return Backend(InMemoryArtifactService(max_bytes=LIMIT), {"alice": "alice", "bob": "bob"}, sessions)
    from django.contrib.auth import get_user_model
    from django.core.files.storage import FileSystemStorage

    from sessions_app import models as orm
    from sessions_app.artifact_backends import DjangoArtifactService
    from sessions_app.core.events import utcnow

    users = {name: get_user_model().objects.create_user(username=name) for name in ("alice", "bob")}
    for session_id, owner in (("s-alice", "alice"), ("s-alice-2", "alice"), ("s-bob", "bob")):
        orm.Session.objects.create(id=session_id, app=APP, user=users[owner], created_at=utcnow(), updated_at=utcnow())
    if request.param == "django-fs":
        storage = FileSystemStorage(location=str(tmp_path / "artifacts"))
    else:
        storage = s3_storage(request.getfixturevalue("s3_endpoint"))
    service = DjangoArtifactService(storage=storage, max_bytes=LIMIT)
    return Backend(service, {n: str(u.pk) for n, u in users.items()}, sessions, storage)


async def test_versions_count_from_zero_and_load_returns_latest_or_the_one_asked(backend: Backend) -> None:
    scope = backend.scope("alice")
    first = await backend.service.save(scope, "report.md", b"# v0")
    second = await backend.service.save(scope, "report.md", b"# v1, longer")
    assert (first.version, second.version) == (0, 1)
    latest = await backend.service.load(scope, "report.md")
    assert latest is not None and (latest.version, latest.data) == (1, b"# v1, longer")
    older = await backend.service.load(scope, "report.md", version=0)
    assert older is not None and older.data == b"# v0"
    assert await backend.service.load(scope, "report.md", version=7) is None
    assert await backend.service.load(scope, "missing.txt") is None
    assert await backend.service.list_versions(scope, "report.md") == [0, 1]
    assert await backend.service.list_versions(scope, "missing.txt") == []


async def test_each_version_records_sha256_size_and_mime(backend: Backend) -> None:
    scope = backend.scope("alice")
    data = b"a,b\n1,2\n"
    saved = await backend.service.save(scope, "table.csv", data)
    assert (saved.size, saved.sha256, saved.mime) == (len(data), hashlib.sha256(data).hexdigest(), "text/csv")
    blob = await backend.service.save(scope, "blob", b"\x00\x01")
    assert blob.mime == "application/octet-stream"
    chosen = await backend.service.save(scope, "notes", b"{}", mime="application/json")
    loaded = await backend.service.load(scope, "notes")
    assert chosen.mime == "application/json" and loaded is not None and loaded.mime == "application/json"
    infos = await backend.service.versions(scope, "table.csv")
    assert [(i.version, i.sha256) for i in infos] == [(0, saved.sha256)]


async def test_user_scoped_names_are_shared_by_the_users_sessions_and_listed_with_session_names(
    backend: Backend,
) -> None:
    here, there = backend.scope("alice"), backend.scope("alice", "alice2")
    await backend.service.save(here, "draft.txt", b"only here")
    await backend.service.save(here, "user:profile.json", b'{"v": 0}')
    await backend.service.save(there, "user:profile.json", b'{"v": 1}')
    await backend.service.save(there, "elsewhere.txt", b"other session")
    assert await backend.service.list_names(here) == ["draft.txt", "user:profile.json"]
    assert await backend.service.list_names(there) == ["elsewhere.txt", "user:profile.json"]
    shared = await backend.service.load(here, "user:profile.json")
    assert shared is not None and (shared.version, shared.data) == (1, b'{"v": 1}')
    assert await backend.service.load(there, "draft.txt") is None


async def test_delete_removes_every_version_and_its_bytes(backend: Backend) -> None:
    scope = backend.scope("alice")
    await backend.service.save(scope, "log.txt", b"one")
    await backend.service.save(scope, "log.txt", b"two")
    keys: list[str] = []
    if backend.storage is not None:
        from asgiref.sync import sync_to_async

        from sessions_app import models as orm

        rows = orm.Artifact.objects.filter(filename="log.txt").values_list("storage_key", flat=True)
        keys = await sync_to_async(list)(rows)
        assert len(keys) == 2 and all(backend.storage.exists(k) for k in keys)
    assert await backend.service.delete(scope, "log.txt") is True
    assert await backend.service.load(scope, "log.txt") is None
    assert await backend.service.list_names(scope) == []
    assert await backend.service.delete(scope, "log.txt") is False
    assert not any(backend.storage.exists(k) for k in keys) if keys else True
    # A name deleted and saved again starts over at version 0.
    assert (await backend.service.save(scope, "log.txt", b"three")).version == 0


async def test_concurrent_saves_of_one_name_never_collide(backend: Backend) -> None:
    scope = backend.scope("alice")
    payloads = [f"writer {i}".encode() * (i + 1) for i in range(8)]
    saved = await asyncio.gather(*(backend.service.save(scope, "shared.txt", p) for p in payloads))
    assert sorted(s.version for s in saved) == list(range(8))
    for info, payload in zip(saved, payloads, strict=True):
        loaded = await backend.service.load(scope, "shared.txt", version=info.version)
        assert loaded is not None and loaded.data == payload
        assert loaded.info.sha256 == hashlib.sha256(payload).hexdigest()


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../etc/passwd",
        "a/b.txt",
        "a\\b.txt",
        "/abs.txt",
        "bad\x00name",
        "tab\tname",
        "new\nline",
        " leading.txt",
        "trailing.txt ",
        "user:",
        "user:../up.txt",
        "user:a/b",
        "x" * 256,
    ],
)
async def test_bad_filenames_are_refused_and_nothing_is_stored(backend: Backend, name: str) -> None:
    scope = backend.scope("alice")
    with pytest.raises(InvalidArtifactNameError):
        await backend.service.save(scope, name, b"data")
    assert await backend.service.list_names(scope) == []


async def test_data_over_the_size_limit_is_refused(backend: Backend) -> None:
    scope = backend.scope("alice")
    assert (await backend.service.save(scope, "exact.bin", b"x" * LIMIT)).size == LIMIT
    with pytest.raises(ArtifactTooLargeError, match=f"limit of {LIMIT} bytes"):
        await backend.service.save(scope, "big.bin", b"x" * (LIMIT + 1))
    assert await backend.service.list_names(scope) == ["exact.bin"]


async def test_another_user_sees_nothing_of_alices_artifacts(backend: Backend) -> None:
    alice = backend.scope("alice")
    await backend.service.save(alice, "secret.txt", b"alice only")
    await backend.service.save(alice, "user:keys.txt", b"alice's keys")
    # Bob naming Alice's session id still only reaches his own artifacts.
    bob_in_alices_session = ArtifactScope(app=APP, user_id=backend.users["bob"], session_id=alice.session_id)
    for scope in (backend.scope("bob"), bob_in_alices_session):
        assert await backend.service.list_names(scope) == []
        assert await backend.service.load(scope, "secret.txt") is None
        assert await backend.service.load(scope, "user:keys.txt") is None
        assert await backend.service.delete(scope, "secret.txt") is False
    assert (await backend.service.load(alice, "secret.txt")) is not None
