"""The test run writes only to temporary folders (issue 21): never a database, WAL or
user's artifact in the checkout's var/."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import connection

VAR = Path(__file__).resolve().parents[2] / "var"


@pytest.mark.django_db
def test_the_test_database_and_artifacts_live_outside_the_checkout() -> None:
    if connection.vendor == "sqlite":
        assert not Path(connection.settings_dict["NAME"]).resolve().is_relative_to(VAR)
    saved = storages["artifacts"].save("probe/report.md", ContentFile(b"# report"))

    assert not Path(storages["artifacts"].path(saved)).resolve().is_relative_to(VAR)
