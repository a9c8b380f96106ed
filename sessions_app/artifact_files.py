"""Deleting artifact rows together with their files on `storages["artifacts"]`."""

from __future__ import annotations

import logging

from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import QuerySet

from sessions_app import models as orm

logger = logging.getLogger(__name__)


def artifacts_delete(*, rows: QuerySet[orm.Artifact], storage: Storage | None = None) -> int:
    """Delete `rows` now and their files once the transaction commits: a rollback keeps
    both, and a file never disappears while its row is still visible. Returns the count."""
    keys = list(rows.values_list("storage_key", flat=True))
    if not keys:
        return 0
    rows.delete()
    store = storage if storage is not None else storages["artifacts"]
    transaction.on_commit(lambda: remove_files(store, keys))
    return len(keys)


def remove_files(storage: Storage, keys: list[str]) -> None:
    """Delete files by key; a failure is logged, never raised."""
    for key in keys:
        try:
            storage.delete(key)
        except Exception:  # an orphaned file is harmless; a failed request is not
            logger.warning("could not delete artifact file %r", key, exc_info=True)
