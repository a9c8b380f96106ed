"""`/api/skills/` (read-only, what the user may see) and the admin's publish and rollback."""

from __future__ import annotations

from typing import Any

import pytest

from skills_app import models as orm
from skills_app.services import skill_revision_create
from tests.skills.conftest import skill_md

pytestmark = pytest.mark.django_db


def test_the_list_shows_shared_and_own_published_skills_and_the_demo_folder(
    alice: Any, bob: Any, alice_api: Any
) -> None:
    skill_revision_create(app="agentsite", files={"SKILL.md": skill_md("shared", "For all.")}, status="published")
    skill_revision_create(app="agentsite", files={"SKILL.md": skill_md("drafty", "Not yet.")}, status="draft")
    bobs = skill_revision_create(
        app="agentsite", files={"SKILL.md": skill_md("bobs", "Bob's own.")}, owner=bob, status="published"
    )
    assert bobs.skill.owner == bob

    listed = alice_api.get("/api/skills/")

    assert listed.status_code == 200
    by_name = {s["name"]: s for s in listed.json()["results"]}
    assert set(by_name) == {"shared", "diagnostic-report"}
    assert (by_name["shared"]["source"], by_name["shared"]["revision"]) == ("db", 1)
    assert by_name["diagnostic-report"]["source"] == "fs"


def test_detail_shows_the_body_and_files_and_another_users_skill_is_404(alice: Any, bob: Any, alice_api: Any) -> None:
    skill_revision_create(
        app="agentsite", files={"SKILL.md": skill_md("bobs", "Bob's.")}, owner=bob, status="published"
    )

    demo = alice_api.get("/api/skills/diagnostic-report/").json()
    missing = alice_api.get("/api/skills/bobs/")

    assert "scripts/render_report.py" in demo["files"] and demo["docs"] == ["docs/format.md"]
    assert "skill_run" in demo["body"]
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert alice_api.get("/api/skills/").status_code == 200


def test_the_api_needs_authentication(client: Any) -> None:
    assert client.get("/api/skills/").status_code in (401, 403)


def test_admin_publishes_a_revision_and_rolls_back(admin_client: Any, admin_user: Any) -> None:
    first = skill_revision_create(app="agentsite", files={"SKILL.md": skill_md("s", "v1")}, status="published")
    second = skill_revision_create(
        app="agentsite", files={"SKILL.md": skill_md("s", "v2")}, source="evolution", status="pending_review"
    )

    page = admin_client.get(f"/admin/skills_app/skillrevision/{second.pk}/change/")
    assert page.status_code == 200 and b"SKILL.md" in page.content and b"pending review" in page.content
    admin_client.post("/admin/skills_app/skillrevision/", {"action": "publish", "_selected_action": [second.pk]})
    second.refresh_from_db()
    assert (second.status, second.approved_by) == ("published", admin_user)

    admin_client.post("/admin/skills_app/skill/", {"action": "rollback", "_selected_action": [first.skill_id]})
    assert list(orm.SkillRevision.objects.filter(skill=first.skill).values_list("revision", "status")) == [
        (2, "retired"),
        (1, "published"),
    ]
    assert admin_client.get("/admin/skills_app/skill/").status_code == 200
