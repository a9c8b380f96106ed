"""The test run writes only to temporary folders (issue 21): never a database, WAL or
user's artifact in the checkout's var/."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import connection

from tests.conftest import worker_redis_dbs

VAR = Path(__file__).resolve().parents[2] / "var"


@pytest.mark.django_db
def test_the_test_database_and_artifacts_live_outside_the_checkout() -> None:
    if connection.vendor == "sqlite":
        assert not Path(connection.settings_dict["NAME"]).resolve().is_relative_to(VAR)
    saved = storages["artifacts"].save("probe/report.md", ContentFile(b"# report"))

    assert not Path(storages["artifacts"].path(saved)).resolve().is_relative_to(VAR)


@pytest.mark.skipif(
    not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("REDIS_URL")),
    reason="only under pytest-xdist (make test, make test-fast) with REDIS_URL",
)
def test_each_xdist_worker_has_redis_databases_of_its_own(settings: Any) -> None:
    """The worker's environment names them before Django reads its settings (tests/conftest.py)."""
    broker, cache = worker_redis_dbs(os.environ["AGENTSITE_TEST_REDIS_URL"], os.environ["PYTEST_XDIST_WORKER"])

    assert urlsplit(settings.REDIS_URL).path == f"/{broker}" == urlsplit(settings.CELERY_BROKER_URL).path
    assert urlsplit(settings.CACHES["default"]["LOCATION"]).path == f"/{cache}"
