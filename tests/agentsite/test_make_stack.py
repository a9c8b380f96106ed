"""`make stack`'s launcher (deploy/stack.py) before it starts anything: the balancer's
configuration it writes is valid HAProxy with one server per web process, and a busy port
stops it with a message naming the port. The whole stack is tested through its balancer in
tests/integration/test_stack_smoke.py."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_stack", ROOT / "deploy" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")


@needs_haproxy
@pytest.mark.parametrize("web_ports", [[18401], [18401, 18402]])
def test_the_balancer_configuration_is_valid_with_a_server_per_web_process(
    tmp_path: Path, web_ports: list[int]
) -> None:
    path = _launcher().write_haproxy_config(
        state_dir=tmp_path,
        host="127.0.0.1",
        port=18400,
        web_ports=web_ports,
        stats_port=18403,
    )
    checked = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = path.read_text()
    assert "bind 127.0.0.1:18400" in text
    assert [line.split()[1:3] for line in text.splitlines() if line.strip().startswith("server ")] == [
        [f"web{i}", f"127.0.0.1:{port}"] for i, port in enumerate(web_ports, start=1)
    ]


@needs_haproxy
def test_a_busy_port_stops_the_stack_naming_it() -> None:
    launcher = _launcher()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = launcher.Stack(launcher.parse_args(["--port", "0", "--web-ports", f"{port},0", "--stats-port", "0"]))
        with pytest.raises(launcher.StackError, match=f"port {port} on 127.0.0.1 is already in use"):
            stack.preflight()


def test_more_web_processes_than_ports_is_refused() -> None:
    launcher = _launcher()
    with pytest.raises(launcher.StackError, match="--web 2 needs 2 --web-ports"):
        launcher.Stack(launcher.parse_args(["--web", "2", "--web-ports", "18401"]))
