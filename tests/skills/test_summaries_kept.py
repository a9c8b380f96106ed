"""The database skill repository keeps its summaries between runs (issue 23) and reads them
again on the next call after any change to the app's published skills, whoever made it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.skills.conftest import skill_md

pytestmark = pytest.mark.django_db(transaction=True)

APP = "kept"


def _publish(name: str, description: str) -> Any:
    from skills_app.services import skill_revision_create

    return skill_revision_create(app=APP, files={"SKILL.md": skill_md(name, description)}, status="published")


def _elsewhere(change: Callable[[], Any]) -> None:
    """Make the change on another thread, with its own database connection: nothing of it
    passes through this repository (as a change by another process would)."""

    def run() -> None:
        try:
            change()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def _summaries(repository: Any) -> list[tuple[str, str]]:
    return [(s.name, s.description) for s in repository.summaries_sync()]


def test_unchanged_summaries_cost_one_small_statement() -> None:
    from skills_app.backends import DjangoSkillRepository

    _publish("alpha", "First.")
    repository = DjangoSkillRepository(app=APP)
    with CaptureQueriesContext(connection) as first:
        assert _summaries(repository) == [("alpha", "First.")]
    with CaptureQueriesContext(connection) as again:
        assert _summaries(repository) == [("alpha", "First.")]
    assert len(first) == 3  # the fingerprint, the skills, their published revisions
    assert len(again) == 1  # the fingerprint only


def test_a_revision_published_elsewhere_shows_on_the_next_call() -> None:
    from skills_app.backends import DjangoSkillRepository
    from skills_app.services import skill_revision_create, skill_revision_publish

    _publish("alpha", "First.")
    repository = DjangoSkillRepository(app=APP)
    assert _summaries(repository) == [("alpha", "First.")]
    pending = skill_revision_create(
        app=APP, files={"SKILL.md": skill_md("alpha", "Improved.")}, source="evolution", status="pending_review"
    )
    assert _summaries(repository) == [("alpha", "First.")]  # pending review: not live

    _elsewhere(lambda: skill_revision_publish(revision=pending))

    assert _summaries(repository) == [("alpha", "Improved.")]


def test_a_rollback_elsewhere_shows_on_the_next_call() -> None:
    from skills_app import models as orm
    from skills_app.backends import DjangoSkillRepository
    from skills_app.services import skill_rollback

    _publish("alpha", "First.")
    _publish("alpha", "Second.")
    repository = DjangoSkillRepository(app=APP)
    assert _summaries(repository) == [("alpha", "Second.")]

    _elsewhere(lambda: skill_rollback(skill=orm.Skill.objects.get(app=APP, name="alpha")))

    assert _summaries(repository) == [("alpha", "First.")]


def test_new_deleted_retired_and_renamed_skills_show_on_the_next_call() -> None:
    from skills_app import models as orm
    from skills_app.backends import DjangoSkillRepository

    _publish("alpha", "First.")
    repository = DjangoSkillRepository(app=APP)
    assert _summaries(repository) == [("alpha", "First.")]

    _elsewhere(lambda: _publish("beta", "Second."))
    assert _summaries(repository) == [("alpha", "First."), ("beta", "Second.")]

    _elsewhere(lambda: orm.Skill.objects.filter(app=APP, name="alpha").delete())
    assert _summaries(repository) == [("beta", "Second.")]

    def rename() -> None:
        skill = orm.Skill.objects.get(app=APP, name="beta")
        skill.name = "gamma"
        skill.save()  # as the admin saves it

    _elsewhere(rename)
    assert _summaries(repository) == [("gamma", "Second.")]

    # Retired without a signal or a touched skill row (a bulk update).
    _elsewhere(lambda: orm.SkillRevision.objects.filter(skill__app=APP).update(status="retired"))
    assert _summaries(repository) == []


def test_a_skill_given_to_one_owner_leaves_the_shared_summaries(alice: Any) -> None:
    from skills_app import models as orm
    from skills_app.backends import DjangoSkillRepository

    _publish("alpha", "First.")
    _publish("beta", "Second.")
    repository = DjangoSkillRepository(app=APP)
    assert len(_summaries(repository)) == 2

    _elsewhere(lambda: orm.Skill.objects.filter(app=APP, name="beta").update(owner=alice))

    assert _summaries(repository) == [("alpha", "First.")]
