"""The runtime accessor (issue 22, item 1): the apps reach what the composition root built
through agentsite.runtime, which the project's AppConfig installs at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentsite import runtime

ROOT = Path(__file__).resolve().parents[2]


def test_the_app_config_installs_the_composition_root_as_the_runtime() -> None:
    from agentsite import composition

    assert runtime.run_manager() is composition.run_manager()
    assert runtime.current().summary_engine is composition.summary_engine


def test_an_app_asking_before_the_root_is_installed_is_told_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_installed", None)
    with pytest.raises(runtime.RuntimeNotInstalled, match="add 'agentsite' to INSTALLED_APPS"):
        runtime.run_manager()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("myproject.agents", "AGENTSITE_AGENTS entries are module:factory, got 'myproject.agents'"),
        ("myproject.agents:billing", "AGENTSITE_AGENTS: cannot import 'myproject.agents'"),
        ("agentsite.demo.factories:no_such_agent", "'agentsite.demo.factories' has no callable 'no_such_agent'"),
    ],
)
def test_a_bad_registry_entry_stops_start_up_naming_it(entry: str, message: str) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_AGENTS": entry},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "started" not in result.stdout
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr, result.stderr[-2000:]
