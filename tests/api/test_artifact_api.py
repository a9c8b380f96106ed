"""REST API for a session's artifacts: list, download, upload, delete; owner only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def artifact_storage(tmp_path: Path) -> Iterator[Path]:
    """Artifacts of these tests go to a temporary folder, never to the checkout's `var/`."""
    from django.conf import settings

    location = tmp_path / "artifacts"
    storages = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location)},
        },
    }
    with override_settings(STORAGES=storages):
        yield location


def new_session(client: Any) -> str:
    response = client.post("/api/sessions/", {}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def upload(client: Any, session_id: str, name: str, data: bytes, content_type: str = "application/octet-stream") -> Any:
    return client.generic(
        "POST", f"/api/sessions/{session_id}/artifacts/{quote(name, safe='')}", data, content_type=content_type
    )


def download(client: Any, session_id: str, name: str, **params: Any) -> Any:
    return client.get(f"/api/sessions/{session_id}/artifacts/{quote(name, safe='')}", params)


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, getattr(response, "content", response)
    assert response.json()["error"]["code"] == code


def body_of(response: Any) -> bytes:
    return b"".join(response.streaming_content)


def test_uploaded_versions_are_listed_and_downloaded_with_their_type_and_name(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    first = upload(alice_api, session_id, "report.md", b"# v0", "text/markdown")
    assert first.status_code == 201, first.content
    assert first.json() | {"created_at": None} == {
        "filename": "report.md",
        "version": 0,
        "mime": "text/markdown",
        "size": 4,
        "sha256": first.json()["sha256"],
        "created_at": None,
        "url": f"/api/sessions/{session_id}/artifacts/report.md?version=0",
    }
    assert upload(alice_api, session_id, "report.md", b"# v1!", "text/markdown").json()["version"] == 1

    listed = alice_api.get(f"/api/sessions/{session_id}/artifacts/").json()["results"]
    assert [(a["filename"], a["scope"], a["latest"], [v["version"] for v in a["versions"]]) for a in listed] == [
        ("report.md", "session", 1, [0, 1])
    ]

    latest = download(alice_api, session_id, "report.md")
    assert latest.status_code == 200
    assert latest["Content-Type"] == "text/markdown"
    assert latest["Content-Disposition"] == 'attachment; filename="report.md"'
    assert latest["X-Content-Type-Options"] == "nosniff" and latest["X-Artifact-Version"] == "1"
    assert body_of(latest) == b"# v1!"
    older = download(alice_api, session_id, "report.md", version=0)
    assert body_of(older) == b"# v0" and older["ETag"] == f'"{first.json()["sha256"]}"'


def test_a_download_answers_whatever_the_client_accepts(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    upload(alice_api, session_id, "chart.png", b"\x89PNG", "image/png")
    response = alice_api.get(f"/api/sessions/{session_id}/artifacts/chart.png", HTTP_ACCEPT="image/png")
    response.close()  # the file response holds the stored file open until then
    assert response.status_code == 200 and response["Content-Type"] == "image/png"


def test_non_ascii_names_download_with_an_encoded_filename(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    upload(alice_api, session_id, "报告 v2.txt", "内容".encode(), "text/plain; charset=utf-8")
    response = download(alice_api, session_id, "报告 v2.txt")
    assert response.status_code == 200
    assert "filename*=utf-8''%E6%8A%A5%E5%91%8A%20v2.txt" in response["Content-Disposition"]
    assert body_of(response).decode() == "内容"


def test_user_scoped_artifacts_are_listed_in_every_session_of_the_user(alice_api: Any) -> None:
    first, second = new_session(alice_api), new_session(alice_api)
    upload(alice_api, first, "user:style.md", b"terse", "text/markdown")
    upload(alice_api, first, "draft.txt", b"here only", "text/plain")
    listed = alice_api.get(f"/api/sessions/{second}/artifacts/").json()["results"]
    assert [(a["filename"], a["scope"]) for a in listed] == [("user:style.md", "user")]
    response = download(alice_api, second, "user:style.md")
    assert body_of(response) == b"terse"
    assert response["Content-Disposition"] == 'attachment; filename="style.md"'
    assert_error(download(alice_api, second, "draft.txt"), 404, "not_found")


def test_missing_artifacts_versions_and_bad_versions(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    upload(alice_api, session_id, "a.txt", b"a", "text/plain")
    assert_error(download(alice_api, session_id, "b.txt"), 404, "not_found")
    assert_error(download(alice_api, session_id, "a.txt", version=3), 404, "not_found")
    assert_error(download(alice_api, session_id, "a.txt", version=-1), 400, "invalid")
    assert_error(download(alice_api, session_id, "a.txt", version="latest"), 400, "invalid")
    assert_error(alice_api.get("/api/sessions/no-such-session/artifacts/"), 404, "not_found")


@pytest.mark.parametrize("name", ["..", "bad\tname.txt", " lead.txt", "user:", "nul\x00.txt"])
def test_bad_filenames_are_refused(alice_api: Any, name: str) -> None:
    session_id = new_session(alice_api)
    # A NUL is refused in any path, before the view (agentsite/middleware.py).
    assert_error(
        upload(alice_api, session_id, name, b"x"), 400, "invalid_text" if "\x00" in name else "invalid_filename"
    )
    assert alice_api.get(f"/api/sessions/{session_id}/artifacts/").json()["results"] == []


def test_a_path_in_the_name_never_reaches_the_artifact_api(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    assert_error(upload(alice_api, session_id, "../x.txt", b"x"), 404, "not_found")


@override_settings(AGENTSITE_ARTIFACT_MAX_BYTES=16)
def test_an_upload_over_the_limit_is_refused_with_413(alice_api: Any) -> None:
    session_id = new_session(alice_api)
    assert upload(alice_api, session_id, "small.bin", b"x" * 16).status_code == 201
    assert_error(upload(alice_api, session_id, "big.bin", b"x" * 17), 413, "artifact_too_large")
    names = [a["filename"] for a in alice_api.get(f"/api/sessions/{session_id}/artifacts/").json()["results"]]
    assert names == ["small.bin"]


def stored_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_delete_removes_every_version(
    alice_api: Any, artifact_storage: Path, django_capture_on_commit_callbacks: Any
) -> None:
    session_id = new_session(alice_api)
    upload(alice_api, session_id, "log.txt", b"1", "text/plain")
    upload(alice_api, session_id, "log.txt", b"2", "text/plain")
    assert len(stored_files(artifact_storage)) == 2
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/sessions/{session_id}/artifacts/log.txt").status_code == 204
    assert stored_files(artifact_storage) == []
    assert_error(download(alice_api, session_id, "log.txt"), 404, "not_found")
    assert_error(alice_api.delete(f"/api/sessions/{session_id}/artifacts/log.txt"), 404, "not_found")


def test_deleting_a_session_removes_its_artifacts_files_but_keeps_the_users_own(
    alice_api: Any, artifact_storage: Path, django_capture_on_commit_callbacks: Any
) -> None:
    doomed, kept = new_session(alice_api), new_session(alice_api)
    upload(alice_api, doomed, "report.md", b"v0", "text/markdown")
    upload(alice_api, doomed, "report.md", b"v1", "text/markdown")
    upload(alice_api, doomed, "user:profile.txt", b"mine", "text/plain")
    upload(alice_api, kept, "notes.txt", b"other session", "text/plain")
    assert len(stored_files(artifact_storage)) == 4

    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/sessions/{doomed}/").status_code == 204

    assert sorted(p.read_bytes() for p in stored_files(artifact_storage)) == [b"mine", b"other session"]
    assert body_of(download(alice_api, kept, "user:profile.txt")) == b"mine"
    assert body_of(download(alice_api, kept, "notes.txt")) == b"other session"


def test_alice_cannot_list_download_upload_or_delete_in_bobs_session(alice_api: Any, bob_api: Any) -> None:
    bobs = new_session(bob_api)
    upload(bob_api, bobs, "secret.txt", b"bob only", "text/plain")
    upload(bob_api, bobs, "user:keys.txt", b"bob's keys", "text/plain")
    assert_error(alice_api.get(f"/api/sessions/{bobs}/artifacts/"), 404, "not_found")
    assert_error(download(alice_api, bobs, "secret.txt"), 404, "not_found")
    assert_error(upload(alice_api, bobs, "planted.txt", b"x"), 404, "not_found")
    assert_error(alice_api.delete(f"/api/sessions/{bobs}/artifacts/secret.txt"), 404, "not_found")
    # Bob's user-scoped files are not Alice's either, from her own session.
    alices = new_session(alice_api)
    assert_error(download(alice_api, alices, "user:keys.txt"), 404, "not_found")
    assert alice_api.get(f"/api/sessions/{alices}/artifacts/").json()["results"] == []
    assert body_of(download(bob_api, bobs, "secret.txt")) == b"bob only"
