"""Settings come from the environment; a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.env import Env, database_from_url

ROOT = Path(__file__).resolve().parents[2]


def start_django(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentsite.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AGENTSITE_CONTEXT_WINDOW", "lots"),
        ("AGENTSITE_CONTEXT_WINDOW", "-5"),
        ("DATABASE_URL", "mysql://root@localhost/x"),
        ("REDIS_URL", "http://127.0.0.1:6379"),
        ("OPENAI_BASE_URL", "ftp://models.local"),
        ("DJANGO_DEBUG", "maybe"),
        ("AGENTSITE_MAX_MESSAGE_CHARS", "0"),
        ("AGENTSITE_PINNED_BUDGET_RATIO", "2"),
        # Read per call by the demo tool, checked at start all the same.
        ("AGENTSITE_DEMO_SCAN_DELAY_S", "soon"),
        ("AGENTSITE_DB_THREADS", "0"),
    ],
)
def test_a_bad_environment_value_stops_start_up_naming_the_variable(name: str, value: str) -> None:
    result = start_django(**{name: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert name in result.stderr and repr(value) in result.stderr


def test_a_retired_variable_stops_start_up_naming_its_replacement() -> None:
    # The sandbox's single uid became a pool: a deployment still setting the old variable must
    # learn it, not run on a pool it never chose.
    result = start_django(AGENTSITE_WORKSPACE_UID="1000")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "AGENTSITE_WORKSPACE_UID is no longer read" in result.stderr
    assert "AGENTSITE_WORKSPACE_UID_BASE" in result.stderr and "AGENTSITE_WORKSPACE_UID_COUNT" in result.stderr


def test_embedded_defaults_start() -> None:
    result = start_django()
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_postgres_urls_become_database_settings() -> None:
    db = database_from_url("postgres://u:p%40ss@db.local:5433/agents?sslmode=require", base_dir=ROOT)
    assert (db["ENGINE"], db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "django.db.backends.postgresql",
        "agents",
        "u",
        "p@ss",
        "db.local",
        "5433",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_sqlite_urls_accept_relative_and_absolute_paths() -> None:
    assert database_from_url("sqlite:///var/x.sqlite3", base_dir=ROOT)["NAME"] == str(ROOT / "var/x.sqlite3")
    assert database_from_url("sqlite:////tmp/x.sqlite3", base_dir=ROOT)["NAME"] == "/tmp/x.sqlite3"


def test_a_database_url_without_a_name_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url("postgres://127.0.0.1:5432/", base_dir=ROOT)


def test_env_values_are_parsed_strictly() -> None:
    env = Env({"A": " 12 ", "B": "off", "C": "x, y,,z", "EMPTY": "  "})
    assert env.integer("A", None) == 12
    assert env.boolean("B", True) is False
    assert env.strings("C", []) == ["x", "y", "z"]
    assert env.integer("EMPTY", 7) == 7
    with pytest.raises(ImproperlyConfigured, match="'off'"):
        env.integer("B", None)
