"""`DjangoReviewStore`: the review job's cursor, library and writes on the ORM.

`commit` is one transaction: the cursor moves only from the seq the job read (a
conditional UPDATE; zero rows means another run of the job got there first and nothing is
written), the `Review` row records what happened (skips with their reason), and each
candidate is stored with its gate results (and published when no gate holds it).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from evolution_app import models as orm
from evolution_app.core.engine import ReviewRecord
from evolution_app.core.reconcile import UserFacts
from evolution_app.core.spec import LibraryEntry, SkillOrigin
from evolution_app.services import candidate_create
from sessions_app import models as sessions
from sessions_app.backends import db_call
from sessions_app.core.session import SessionKey
from skills_app import models as skills
from skills_app.core.repository import FolderSkillRepository, read_skill_files

_ORIGINS: dict[str, SkillOrigin] = {"fs": "fs", "evolution": "evolution", "admin": "admin"}


def cursor_sync(key: SessionKey) -> int:
    return orm.ReviewCursor.objects.filter(session_id=key.session_id).values_list("last_seq", flat=True).first() or 0


def library_sync(app: str) -> list[LibraryEntry]:
    """Published shared database skills, then the folder skills the database does not hold."""
    entries: dict[str, LibraryEntry] = {}
    live = skills.SkillRevision.objects.select_related("skill").filter(
        skill__app=app, skill__owner__isnull=True, status="published"
    )
    for revision in live.order_by("skill__name"):
        entries[revision.skill.name] = LibraryEntry(
            name=revision.skill.name,
            description=revision.description,
            body=revision.body,
            origin=_ORIGINS.get(revision.source, "admin"),
            revision=revision.revision,
            files=dict(revision.files or {}),
        )
    folders = FolderSkillRepository(settings.AGENTSITE_SKILLS_ROOTS)
    for summary in folders.summaries_sync():
        if summary.name in entries:
            continue
        skill = folders.get_sync(summary.name)
        entries[summary.name] = LibraryEntry(
            name=summary.name,
            description=summary.description,
            body=skill.body,
            origin="fs",
            files=read_skill_files(folders.path(summary.name)),
        )
    return [entries[name] for name in sorted(entries)]


def user_facts_sync(key: SessionKey) -> UserFacts:
    user = get_user_model().objects.filter(pk=key.user_id).first()
    terms: list[str] = []
    if user is not None:
        terms += [
            user.get_username(),
            getattr(user, "first_name", ""),
            getattr(user, "last_name", ""),
            getattr(user, "email", ""),
        ]
    memories = sessions.Memory.objects.filter(app=key.app, user_id=key.user_id).values_list("text", flat=True)
    return UserFacts(terms=tuple(t for t in terms if t), memories=tuple(memories[:1000]))


def waiting_sync(app: str) -> set[str]:
    return set(orm.SkillCandidate.objects.filter(app=app, status="pending_review").values_list("name", flat=True))


def commit_sync(key: SessionKey, expected_seq: int, record: ReviewRecord) -> bool:
    with transaction.atomic():
        if not sessions.Session.objects.filter(id=key.session_id).exists():
            return False
        orm.ReviewCursor.objects.get_or_create(session_id=key.session_id)
        moved = orm.ReviewCursor.objects.filter(session_id=key.session_id, last_seq=expected_seq).update(
            last_seq=record.to_seq,
            reviewed_at=timezone.now(),
            last_status=record.status,
            last_reason=record.reason,
        )
        if not moved:
            return False
        review = orm.Review.objects.create(
            session_id=key.session_id,
            from_seq=record.from_seq,
            to_seq=record.to_seq,
            status=record.status,
            reason=record.reason,
            notes=list(record.notes),
        )
        for draft in record.candidates:
            candidate_create(app=key.app, session_id=key.session_id, review=review, draft=draft)
    return True


class DjangoReviewStore:
    """`ReviewStore` on the ORM (see the module docstring)."""

    async def cursor(self, key: SessionKey) -> int:
        return await db_call(cursor_sync)(key)

    async def library(self, key: SessionKey) -> list[LibraryEntry]:
        return await db_call(library_sync)(key.app)

    async def user_facts(self, key: SessionKey) -> UserFacts:
        return await db_call(user_facts_sync)(key)

    async def waiting(self, key: SessionKey) -> set[str]:
        return await db_call(waiting_sync)(key.app)

    async def commit(self, key: SessionKey, *, expected_seq: int, record: ReviewRecord) -> bool:
        return await db_call(commit_sync)(key, expected_seq, record)
