"""`make run` as a newcomer meets it (issue 21, set-up): a busy port stops it at once, the
banner names the real address, Node is never needed, and a missing sandbox is announced."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from runs.management.commands.bootstrap_demo import code_execution_line
from skills_app.core.workspace import WorkspaceConfig, probe_isolation

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def test_make_run_on_a_busy_port_exits_at_once_naming_the_port() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        make = subprocess.Popen(
            ["make", "--no-print-directory", "run", "HOST=127.0.0.1", f"PORT={port}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = make.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGTERM)
            output, _ = make.communicate()
            pytest.fail(f"`make run` on busy port {port} was still running after 10 s:\n{output[-2000:]}")

    assert make.returncode != 0, output
    assert f"port {port} on 127.0.0.1 is already in use" in output
    assert "Agentsite is ready" not in output


def test_make_run_never_needs_node() -> None:
    # -W pretends package.json just changed: any rule of `run` that installs the JS client shows up.
    dry = subprocess.run(
        ["make", "-n", "-W", "package.json", "run"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )

    assert dry.returncode == 0, dry.stderr
    assert "npm" not in dry.stdout and "runserver" in dry.stdout


@pytest.mark.django_db
def test_the_banner_names_the_host_and_port_the_server_listens_on(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.AGENTSITE_SKILLS_PROFILE = "knowledge_only"
    out = io.StringIO()

    call_command("bootstrap_demo", host="0.0.0.0", port=8123, stdout=out)

    banner = out.getvalue()
    assert "Agentsite is ready on http://127.0.0.1:8123/" in banner
    assert "http://127.0.0.1:8123/api/runs/" in banner and ":8000" not in banner
    assert (tmp_path / "demo_credentials.txt").exists()


def test_without_bubblewrap_the_start_up_says_code_execution_is_off_and_how_to_turn_it_on(tmp_path: Path) -> None:
    isolation = probe_isolation(WorkspaceConfig(root=tmp_path / "ws", bwrap=str(tmp_path / "no-bwrap")))

    line = code_execution_line(isolation)

    assert "code execution: OFF" in line and "apt install bubblewrap" in line
