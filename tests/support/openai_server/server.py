"""`ScriptedOpenAIServer`: the script queue, the records, and starting and stopping the server."""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from tests.support.openai_server.handler import ScriptHandler, ScriptHTTPServer
from tests.support.openai_server.steps import RecordedRequest, ServerStep
from tests.support.openai_server.wire import CHAT_PATH


class ScriptedOpenAIServer:
    """A local OpenAI-compatible HTTP server that plays a script of `ServerStep`s.

    `requests` holds the JSON bodies of the chat completion requests, in order;
    `received` holds every request with its method, path and headers. A plain string in the
    script is short for `ServerStep.answer(text)`. `GET /v1/models` lists `models` and
    consumes no step.
    """

    def __init__(
        self,
        *steps: ServerStep | str,
        models: Sequence[str] = ("scripted-openai-model",),
        validate: bool = True,
    ) -> None:
        self.models = tuple(models)
        self.validate = validate
        self.requests: list[dict[str, Any]] = []
        self.received: list[RecordedRequest] = []
        self.unexpected: list[dict[str, Any]] = []
        self._steps: deque[ServerStep] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: ScriptHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.script(*steps)

    # -- script ---------------------------------------------------------------------------

    def script(self, *steps: ServerStep | str) -> ScriptedOpenAIServer:
        """Append steps to the script; returns the server so calls can be chained."""
        with self._lock:
            self._steps.extend(ServerStep.answer(s) if isinstance(s, str) else s for s in steps)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps)

    def assert_consumed(self) -> None:
        """Fail when steps were left unplayed or a request arrived after the script ran out."""
        with self._lock:
            left, unexpected = len(self._steps), len(self.unexpected)
        if left:
            raise AssertionError(f"ScriptedOpenAIServer: {left} scripted step(s) were never requested")
        if unexpected:
            raise AssertionError(f"ScriptedOpenAIServer: {unexpected} request(s) arrived after the script ran out")

    def _next_step(self, body: dict[str, Any]) -> ServerStep | None:
        with self._lock:
            if self._steps:
                return self._steps.popleft()
            self.unexpected.append(body)
            return None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give a client, e.g. `http://127.0.0.1:PORT/v1`."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not running; call start() or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedOpenAIServer:
        """Listen on 127.0.0.1 on a free port and serve from a background thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = ScriptHTTPServer(("127.0.0.1", 0), ScriptHandler, owner=self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-openai-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake up delayed answers and drop open (keep-alive) connections."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _track(self, connection: socket.socket, *, open: bool) -> None:
        with self._lock:
            if open:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.received.append(request)
            if request.path == CHAT_PATH and isinstance(request.body, dict):
                self.requests.append(request.body)
