"""`make stack`'s launcher (deploy/stack.py) before it starts anything: the balancer's
configuration it writes is valid HAProxy with one server per web process, and a busy port
stops it with a message naming the port; run as written, the balancer fails open (nodes its
checks mark down still get the traffic) and answers its own errors in the JSON envelope. The
whole stack is tested through its balancer in tests/integration/test_stack_smoke.py."""

from __future__ import annotations

import http.server
import importlib.util
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    servers = [line.split()[1:] for line in text.splitlines() if line.strip().startswith("server ")]
    assert servers == [[f"web{i}", f"127.0.0.1:{port}"] for i, port in enumerate(web_ports, start=1)] + [
        [f"open-web{i}", f"127.0.0.1:{port}", "backup", "no-check"] for i, port in enumerate(web_ports, start=1)
    ]
    assert "uri /livez" in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _FailingChecks(http.server.BaseHTTPRequestHandler):
    """A node that serves requests but fails the balancer's check (as a node too loaded to
    answer it in time would)."""

    def do_GET(self) -> None:
        status = 500 if self.path == "/livez" else 200
        body = b'{"served": true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _balancer(tmp_path: Path, web_ports: list[int]) -> Iterator[tuple[str, int]]:
    """HAProxy on deploy/stack.py's configuration: its URL and stats port."""
    port, stats_port = _free_port(), _free_port()
    path = _launcher().write_haproxy_config(
        state_dir=tmp_path, host="127.0.0.1", port=port, web_ports=web_ports, stats_port=stats_port
    )
    process = subprocess.Popen(["haproxy", "-f", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}", stats_port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _until(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@needs_haproxy
def test_the_balancer_fails_open_when_its_checks_mark_every_node_down(tmp_path: Path) -> None:
    import httpx

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingChecks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with _balancer(tmp_path, [server.server_address[1]]) as (url, stats_port):
            launcher = _launcher()
            # fall 3 at inter 3 s: the node is down within about ten seconds
            _until(lambda: launcher.servers_up(stats_port).get("web1", "").startswith("DOWN"), timeout_s=30)
            response = httpx.get(f"{url}/api/anything", timeout=10)
            assert response.status_code == 200, response.text
            assert response.json() == {"served": True}
            assert response.headers["X-Agentsite-Node"] == "open-web1"
    finally:
        server.shutdown()
        server.server_close()


@needs_haproxy
def test_the_balancers_own_errors_are_json_in_the_envelope(tmp_path: Path) -> None:
    import httpx

    with _balancer(tmp_path, [_free_port()]) as (url, _):  # nothing listens there
        _until(lambda: _answers(url))
        response = httpx.get(f"{url}/api/runs/", timeout=30)
    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "unavailable"


def _answers(url: str) -> bool:
    """Whether the balancer accepts connections yet."""
    try:
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
    except OSError:
        return False
    return True


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
